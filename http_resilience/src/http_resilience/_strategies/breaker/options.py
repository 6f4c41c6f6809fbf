"""The circuit breaker's options and defaults: `BreakerOptions`, its builders."""

from __future__ import annotations

from datetime import timedelta
from typing import Final

from pydantic import (
    BaseModel,
)

from http_resilience._core.classify import DEFAULT_FAILURE_STATUSES, Classifier
from http_resilience._core.fields import (
    FROZEN,
    PositiveCount,
    PositiveDuration,
    StatusCodes,
    UnitRatio,
)
from http_resilience._core.host_registry import DEFAULT_MAXIMUM_HOSTS
from http_resilience._core.step_defaults import SyncStepDefaults
from http_resilience._primitives.setting import default
from http_resilience._strategies.breaker.strategy import (
    AsyncBreaker,
    BreakerStrategy,
    SyncBreaker,
)

__all__ = [
    "DEFAULT_BREAKER_PER_HOST",
    "DEFAULT_BREAK_DURATION",
    "DEFAULT_FAILURE_RATIO",
    "DEFAULT_MINIMUM_THROUGHPUT",
    "DEFAULT_SAMPLING_DURATION",
    "BreakerOptions",
]

DEFAULT_FAILURE_RATIO: Final = 0.1
DEFAULT_SAMPLING_DURATION: Final = timedelta(seconds=30)
DEFAULT_MINIMUM_THROUGHPUT: Final = 100
DEFAULT_BREAK_DURATION: Final = timedelta(seconds=5)
DEFAULT_BREAKER_PER_HOST: Final = True


class BreakerOptions(SyncStepDefaults, BaseModel):
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
        breaker_on_status: The statuses that count as a failure of the host.
            Default 408, 429 and every 5xx but 501 and 505. Ints, ranges, or a
            string such as ``"500-504"``.
        should_break: Your own say on an attempt's outcome, a response or an
            exception: True counts it as a failure, False as a success, None
            leaves it to `breaker_on_status` (and, for an exception, the
            built-in rule). Never asked about a cancellation, an error the
            client caused itself or a refusal in this process. Default None.

    Raises:
        pydantic.ValidationError: On construction, naming every invalid field.

    Example:
        >>> BreakerOptions(minimum_throughput=5).failure_ratio
        0.1
    """

    model_config = FROZEN

    failure_ratio: UnitRatio = DEFAULT_FAILURE_RATIO
    sampling_duration: PositiveDuration = default(DEFAULT_SAMPLING_DURATION)
    minimum_throughput: PositiveCount = DEFAULT_MINIMUM_THROUGHPUT
    break_duration: PositiveDuration = default(DEFAULT_BREAK_DURATION)
    breaker_per_host: bool = DEFAULT_BREAKER_PER_HOST
    maximum_hosts: PositiveCount = DEFAULT_MAXIMUM_HOSTS
    breaker_on_status: StatusCodes = default(DEFAULT_FAILURE_STATUSES)
    should_break: Classifier | None = None

    _label = "breaker"
    _strategy_kind = BreakerStrategy
    _async_driver = AsyncBreaker
    _sync_driver = SyncBreaker
