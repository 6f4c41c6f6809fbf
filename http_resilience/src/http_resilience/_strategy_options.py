"""One options model per strategy, for pipelines built with `ResiliencePipeline`.

Each mirrors the fields `HttpResilienceOptions` has for its strategy, with the
same defaults, so a custom pipeline reads like the standard one taken apart.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Final

from pydantic import BaseModel, ConfigDict, Field

from http_resilience._duration import Duration
from http_resilience._options import (
    DEFAULT_BASE_DELAY,
    DEFAULT_BREAK_DURATION,
    DEFAULT_BREAKER_PER_HOST,
    DEFAULT_CONCURRENCY_LIMIT,
    DEFAULT_FAILURE_RATIO,
    DEFAULT_MAX_RETRY_ATTEMPTS,
    DEFAULT_MAXIMUM_HOSTS,
    DEFAULT_MINIMUM_THROUGHPUT,
    DEFAULT_QUEUE_LIMIT,
    DEFAULT_RETRY_UNSAFE_METHODS,
    DEFAULT_SAMPLING_DURATION,
    Count,
    Ratio,
)

__all__ = [
    "DEFAULT_HEDGING_DELAY",
    "DEFAULT_MAX_HEDGED_ATTEMPTS",
    "BreakerOptions",
    "HedgingOptions",
    "LimiterOptions",
    "RetryOptions",
    "TimeoutOptions",
]

DEFAULT_HEDGING_DELAY: Final = timedelta(seconds=2)
DEFAULT_MAX_HEDGED_ATTEMPTS: Final = 1

_FROZEN = ConfigDict(frozen=True, extra="forbid")


class RetryOptions(BaseModel):
    """The retry of a custom pipeline.

    The delay before retry n (1 for the first) is ``base_delay * 2**(n-1)``
    scaled by a random factor in [0.5, 1), unless a 429 or 503 carries a valid
    ``Retry-After``; a wait that would pass the deadline of a timeout around
    the retry ends the call at once.

    Attributes:
        max_retry_attempts: Retries after the first attempt; 0 turns retry
            off. Default 3.
        base_delay: The delay before the first retry. Default 2 s.
        retry_unsafe_methods: Retry POST, PATCH and CONNECT too. Default False:
            they are retried only when they carry an ``Idempotency-Key``.

    Raises:
        pydantic.ValidationError: On construction, naming every invalid field.

    Example:
        >>> RetryOptions(max_retry_attempts=2, base_delay="100ms").base_delay
        datetime.timedelta(microseconds=100000)
    """

    model_config = _FROZEN

    max_retry_attempts: Count = Field(default=DEFAULT_MAX_RETRY_ATTEMPTS, ge=0)
    base_delay: Duration = Field(default=DEFAULT_BASE_DELAY, ge=timedelta(0))
    retry_unsafe_methods: bool = DEFAULT_RETRY_UNSAFE_METHODS


class BreakerOptions(BaseModel):
    """The circuit breaker of a custom pipeline.

    Attributes:
        failure_ratio: The share of failed attempts within the sampling window
            that opens the breaker, in (0, 1]. Default 0.1.
        sampling_duration: The breaker's sliding window. Default 30 s; keep it
            at least twice the timeout of the attempts it sees.
        minimum_throughput: Attempts needed in the window before the breaker
            can open. Default 100.
        break_duration: How long an open breaker refuses before it lets one
            probe through. Default 5 s.
        breaker_per_host: One breaker per scheme, host and port; False shares
            one breaker between every host. Default True.
        maximum_hosts: The per-host registry's bound. Default 1024.

    Raises:
        pydantic.ValidationError: On construction, naming every invalid field.

    Example:
        >>> BreakerOptions(minimum_throughput=5).failure_ratio
        0.1
    """

    model_config = _FROZEN

    failure_ratio: Ratio = Field(default=DEFAULT_FAILURE_RATIO, gt=0.0, le=1.0)
    sampling_duration: Duration = Field(
        default=DEFAULT_SAMPLING_DURATION, gt=timedelta(0)
    )
    minimum_throughput: Count = Field(default=DEFAULT_MINIMUM_THROUGHPUT, ge=1)
    break_duration: Duration = Field(default=DEFAULT_BREAK_DURATION, gt=timedelta(0))
    breaker_per_host: bool = DEFAULT_BREAKER_PER_HOST
    maximum_hosts: Count = Field(default=DEFAULT_MAXIMUM_HOSTS, ge=1)


class LimiterOptions(BaseModel):
    """The concurrency limiter of a custom pipeline.

    Attributes:
        concurrency_limit: Requests inside at once. Default 1000.
        queue_limit: Requests that may wait for a permit; beyond that a
            request is refused with `RateLimitedError`. Default 0.

    Raises:
        pydantic.ValidationError: On construction, naming every invalid field.

    Example:
        >>> LimiterOptions(concurrency_limit=10, queue_limit=5).queue_limit
        5
    """

    model_config = _FROZEN

    concurrency_limit: Count = Field(default=DEFAULT_CONCURRENCY_LIMIT, ge=1)
    queue_limit: Count = Field(default=DEFAULT_QUEUE_LIMIT, ge=0)


class HedgingOptions(BaseModel):
    """Hedging: a second attempt when the first is slow, the first good answer wins.

    Only safe methods are hedged: GET, HEAD, OPTIONS and TRACE. PUT and DELETE
    are idempotent but not safe: two copies in flight at once may interleave
    with other writers, and a cancelled copy may still reach the server after
    the call has returned. They, and every other method, are sent once, as is
    a request whose body cannot be replayed.

    Attributes:
        delay: How long an attempt may go without an answer before the next
            hedged attempt is sent beside it. Default 2 s.
        max_hedged_attempts: Attempts sent beyond the first, at most; at most
            ``max_hedged_attempts + 1`` are in flight. Default 1.

    Durations accept a `timedelta`, a number of seconds, ``"200ms"``, ``"2s"``,
    ``"5m"``, ``"1h"`` or ISO 8601 (``"PT0.2S"``).

    Raises:
        pydantic.ValidationError: On construction, naming every invalid field.

    Example:
        >>> HedgingOptions(delay="200ms").max_hedged_attempts
        1
    """

    model_config = _FROZEN

    delay: Duration = Field(default=DEFAULT_HEDGING_DELAY, gt=timedelta(0))
    max_hedged_attempts: Count = Field(default=DEFAULT_MAX_HEDGED_ATTEMPTS, ge=1)


class TimeoutOptions(BaseModel):
    """A timeout of a custom pipeline (internal: `add_timeout` builds it).

    Attributes:
        timeout: The limit of what runs inside the timeout; more than zero.
    """

    model_config = _FROZEN

    timeout: Duration = Field(gt=timedelta(0))
