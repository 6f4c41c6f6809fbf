"""The adaptive limiter's options: the limit's bounds, its start, the queue.

`AdaptiveLimiterOptions` (for a custom pipeline, and the standard one's
limiter when `adaptive_concurrency` is on), its defaults, and its build.
"""

from __future__ import annotations

from typing import Final, Self

from pydantic import BaseModel, model_validator

from http_resilience._core.builder import BuildContext
from http_resilience._core.fields import FROZEN, NonNegativeCount, PositiveCount
from http_resilience._core.host_registry import DEFAULT_MAXIMUM_HOSTS
from http_resilience._core.step_defaults import SyncStepDefaults
from http_resilience._strategies.adaptive.strategy import (
    AdaptiveLimiterStrategy,
    AsyncAdaptiveLimiter,
    SyncAdaptiveLimiter,
)

__all__ = [
    "DEFAULT_INITIAL_LIMIT",
    "DEFAULT_MAX_LIMIT",
    "DEFAULT_MIN_LIMIT",
    "DEFAULT_PER_HOST",
    "DEFAULT_QUEUE_LIMIT",
    "AdaptiveLimiterOptions",
]

DEFAULT_MIN_LIMIT: Final = 1
DEFAULT_MAX_LIMIT: Final = 1000
DEFAULT_INITIAL_LIMIT: Final = 20
DEFAULT_PER_HOST: Final = True
DEFAULT_QUEUE_LIMIT: Final = 0


class AdaptiveLimiterOptions(SyncStepDefaults, BaseModel):
    """A concurrency limit per host, discovered from the host's own latency.

    About once a second (jittered) the limit compares the mean latency of the
    calls that succeeded at their first attempt with a slow baseline: latency
    above the baseline (queueing at the host) cuts the limit at once, in
    proportion; latency at the baseline while the limit is in use grows it by
    a fifth of its square root. Failed calls teach it nothing, so an outage
    moves neither the baseline nor the limit. Every 20 to 40 windows (the
    first time after 3 to 6) a limit in use runs one window 2 x sqrt(limit)
    lower, at least half (a probe), to tell a host that queues from one that
    got slower by itself. A request beyond the
    limit and its queue is refused at once with `RateLimitedError` (reason
    ``"concurrency_limit"``): not retried, no evidence against the host.

    Attributes:
        min_limit: The lowest limit, at least 1. Default 1.
        max_limit: The highest limit. Default 1000.
        initial_limit: The limit a host starts with, in [min_limit,
            max_limit]. Default 20.
        per_host: One limit per scheme, host and port (at most
            `maximum_hosts`, least recently used forgotten); False: one limit
            shared by every host. Default True.
        queue_limit: Requests that may wait for a permit. Default 0.
        maximum_hosts: The per-host limits kept. Default 1024.

    Raises:
        pydantic.ValidationError: On construction, naming every invalid field;
            ``min_limit <= initial_limit <= max_limit`` names the fields.

    Example:
        >>> AdaptiveLimiterOptions(max_limit=200).initial_limit
        20
    """

    model_config = FROZEN

    min_limit: PositiveCount = DEFAULT_MIN_LIMIT
    max_limit: PositiveCount = DEFAULT_MAX_LIMIT
    initial_limit: PositiveCount = DEFAULT_INITIAL_LIMIT
    per_host: bool = DEFAULT_PER_HOST
    queue_limit: NonNegativeCount = DEFAULT_QUEUE_LIMIT
    maximum_hosts: PositiveCount = DEFAULT_MAXIMUM_HOSTS

    _label = "adaptive limiter"
    _async_driver = AsyncAdaptiveLimiter
    _sync_driver = SyncAdaptiveLimiter

    @model_validator(mode="after")
    def _check_bounds(self) -> Self:
        low, high, first = self.min_limit, self.max_limit, self.initial_limit
        if low > high:
            raise ValueError(f"min_limit ({low}) must be at most max_limit ({high})")
        if not low <= first <= high:
            raise ValueError(
                f"initial_limit ({first}) must be within min_limit ({low}) "
                f"and max_limit ({high})"
            )
        return self

    @property
    def waits_outside_attempts(self) -> bool:
        """A request may wait in the queue: time passes outside any attempt."""
        return self.queue_limit > 0

    def _strategy(self, context: BuildContext) -> AdaptiveLimiterStrategy:
        """This transport's limits, jittered by the context's random source."""
        return AdaptiveLimiterStrategy(
            options=self,
            clock=context.clock,
            telemetry=context.telemetry,
            random=context.random,
        )
