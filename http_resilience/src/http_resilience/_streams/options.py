"""`StreamRetryOptions` and `PartialStreamPolicy`: how `with_retry` retries."""

from __future__ import annotations

import enum
import random as _random
from collections.abc import Callable
from datetime import timedelta
from typing import Final, Self

from pydantic import BaseModel, ConfigDict, model_validator

from http_resilience._core.clock import SYSTEM_CLOCK, Clock
from http_resilience._core.fields import NonNegativeCount, NonNegativeDuration
from http_resilience._primitives.backoff import check_delays
from http_resilience._primitives.cancellation import CANCELLATION
from http_resilience._primitives.setting import default

__all__ = [
    "CANCELLATION",
    "DEFAULT_BASE_DELAY",
    "DEFAULT_MAX_DELAY",
    "DEFAULT_MAX_RETRY_ATTEMPTS",
    "DEFAULT_PARTIAL_STREAM_POLICY",
    "DEFAULT_USE_JITTER",
    "PartialStreamPolicy",
    "StreamRetryOptions",
    "retry_all_but_cancellation",
]


class PartialStreamPolicy(enum.StrEnum):
    """What a failure after the first item does.

    A stream is not a call: by the time it breaks, items are already with the
    consumer, and the only retry is to ask the source again.
    """

    RETHROW_MID_STREAM = "rethrow_mid_stream"
    """Retry only while nothing has been yielded; afterwards re-raise the failure.

    No item is ever produced twice. The default.
    """

    RESTART_FROM_START = "restart_from_start"
    """Call the factory again after a mid-stream failure too.

    Items already yielded come again, unless the factory resumes from
    `StreamRetryContext.items_yielded`.
    """


DEFAULT_MAX_RETRY_ATTEMPTS: Final = 3
DEFAULT_BASE_DELAY: Final = timedelta(milliseconds=200)
DEFAULT_MAX_DELAY: Final = timedelta(seconds=30)
DEFAULT_USE_JITTER: Final = True
DEFAULT_PARTIAL_STREAM_POLICY: Final = PartialStreamPolicy.RETHROW_MID_STREAM


def retry_all_but_cancellation(failure: BaseException) -> bool:
    """The default `should_retry`: every failure is transient but cancellation.

    Broad on purpose, and so it also repeats failures a second attempt cannot
    fix (a rejected credential, a malformed request): narrow it for a stream
    behind an authorization or validation boundary.
    """
    return not isinstance(failure, CANCELLATION)


class StreamRetryOptions(BaseModel):
    """How `with_retry` and `with_retry_sync` retry a stream that breaks.

    Validated on construction, and `with_retry` takes only a built instance, so
    a budget that could never work fails at the call site, before anything is
    iterated. Durations are read back as `timedelta`s; they are given as a
    `timedelta`, a number of seconds, `"200ms"`, `"2s"`, `"5m"`, `"1h"` or ISO
    8601 (`"PT0.2S"`), up to 24 days.

    The delay before retry `n` (1 for the first retry) is
    `base_delay * 2 ** (n - 1)`, capped by `max_delay`, then, with `use_jitter`,
    scaled by `0.5 + 0.5 * random()`: a factor in [0.5, 1).

    Attributes:
        max_retry_attempts: Retries for the whole stream, after the first
            attempt; default 3, at least 0, no ceiling. Progress does not
            replenish it, so a stream that keeps breaking cannot retry forever.
        base_delay: Delay before the first retry; doubles per retry. Default
            200 ms, at least 0.
        max_delay: Ceiling of one delay, before jitter; default 30 s, at least
            `base_delay`.
        use_jitter: Scale each delay by a random factor in [0.5, 1); default
            True.
        should_retry: The classifier: given a failure (an `Exception`), whether
            it is worth another attempt. Default: every failure is.
            Cancellation (`asyncio.CancelledError`, `KeyboardInterrupt`,
            `SystemExit`, `GeneratorExit`) never reaches it.
        partial_stream_policy: What a failure after the first item does;
            default `PartialStreamPolicy.RETHROW_MID_STREAM`.
        clock: What the backoff waits on; default the system clock.
        random: Returns a float in [0, 1) for the jitter; default
            `random.random`.

    Raises:
        pydantic.ValidationError: On construction, naming each invalid field;
            `base_delay` above `max_delay` names both.

    Example:
        >>> from datetime import timedelta
        >>> options = StreamRetryOptions(base_delay=timedelta(seconds=1))
        >>> options.max_delay
        datetime.timedelta(seconds=30)
        >>> StreamRetryOptions.model_validate({"base_delay": "500ms"}).base_delay
        datetime.timedelta(microseconds=500000)
    """

    model_config = ConfigDict(frozen=True, extra="forbid", arbitrary_types_allowed=True)

    max_retry_attempts: NonNegativeCount = DEFAULT_MAX_RETRY_ATTEMPTS
    base_delay: NonNegativeDuration = default(DEFAULT_BASE_DELAY)
    max_delay: NonNegativeDuration = default(DEFAULT_MAX_DELAY)
    use_jitter: bool = DEFAULT_USE_JITTER
    should_retry: Callable[[Exception], bool] = retry_all_but_cancellation
    partial_stream_policy: PartialStreamPolicy = DEFAULT_PARTIAL_STREAM_POLICY
    clock: Clock = SYSTEM_CLOCK
    random: Callable[[], float] = _random.random

    @model_validator(mode="after")
    def _check_delays(self) -> Self:
        check_delays(self.base_delay, self.max_delay)
        return self
