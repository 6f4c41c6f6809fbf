"""The rate limiter's options: the rate, the burst, the queue, per host or shared.

`RateLimiterOptions` (for a custom pipeline), its bounds, and the builders of
the two drivers.
"""

from __future__ import annotations

from typing import Final

from pydantic import BaseModel, Field

from http_resilience._core.fields import (
    FROZEN,
    NonNegativeCount,
    PositiveCount,
    Ratio,
)
from http_resilience._core.host_registry import DEFAULT_MAXIMUM_HOSTS
from http_resilience._core.step_defaults import SyncStepDefaults
from http_resilience._primitives.durations import MAX_DURATION
from http_resilience._strategies.rate_limit.strategy import (
    AsyncRateLimiter,
    RateLimiterStrategy,
    SyncRateLimiter,
)

__all__ = ["RateLimiterOptions"]


_SLOWEST: Final = 1 / MAX_DURATION.total_seconds()
"""One permit every 24 days: a slower rate would make a queued request wait
longer than any runtime can."""


class RateLimiterOptions(SyncStepDefaults, BaseModel):
    """A time-based rate limiter for a custom pipeline (a token bucket).

    Attributes:
        permits_per_second: Requests a second, on average; at least one
            every 24 days (the longest wait every runtime takes).
        burst: Requests that may go at once after a quiet spell, at least 1.
            Default 1: evenly spaced.
        per_host: One bucket per scheme, host and port (at most
            `maximum_hosts`, least recently used forgotten); False shares one.
            Default True.
        queue_limit: Requests that may wait for a permit to come (never past
            the deadline of a timeout around the limiter); beyond it a request
            is refused at once with `RateLimitedError`. Default 0.
        maximum_hosts: The per-host buckets kept. Default 1024.

    Raises:
        pydantic.ValidationError: On construction, naming every invalid field.

    Example:
        >>> RateLimiterOptions(permits_per_second=20, burst=5).queue_limit
        0
    """

    model_config = FROZEN

    permits_per_second: Ratio = Field(ge=_SLOWEST, allow_inf_nan=False)
    burst: PositiveCount = 1
    per_host: bool = True
    queue_limit: NonNegativeCount = 0
    maximum_hosts: PositiveCount = DEFAULT_MAXIMUM_HOSTS

    _strategy_kind = RateLimiterStrategy
    _async_driver = AsyncRateLimiter
    _sync_driver = SyncRateLimiter

    @property
    def label(self) -> str:
        """``"rate limiter 20/s"``."""
        return f"rate limiter {self.permits_per_second:g}/s"

    @property
    def waits_outside_attempts(self) -> bool:
        """A queued request waits for its permit outside any attempt."""
        return self.queue_limit > 0
