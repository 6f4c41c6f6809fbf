"""The circuit breaker's options and defaults: `BreakerOptions`, its builders."""

from __future__ import annotations

from datetime import timedelta
from typing import Final

from pydantic import (
    BaseModel,
    Field,
)

from http_resilience._core.classify import DEFAULT_FAILURE_STATUSES, Classifier
from http_resilience._core.fields import (
    FROZEN,
    PositiveCount,
    PositiveDuration,
    RatioOrOff,
    StatusCodes,
    UnitRatio,
)
from http_resilience._core.host_registry import DEFAULT_MAXIMUM_HOSTS
from http_resilience._core.step_defaults import SyncStepDefaults
from http_resilience._primitives.setting import default
from http_resilience._strategies.breaker.baseline import Guards
from http_resilience._strategies.breaker.strategy import (
    AsyncBreaker,
    BreakerStrategy,
    SyncBreaker,
)

__all__ = [
    "DEFAULT_ADAPTIVE_TIMEOUT_FACTOR",
    "DEFAULT_BASELINE_HALF_LIFE",
    "DEFAULT_BASELINE_MIN_SAMPLES",
    "DEFAULT_BREAKER_BASELINE_FACTOR",
    "DEFAULT_BREAKER_PER_HOST",
    "DEFAULT_BREAK_DURATION",
    "DEFAULT_FAILURE_RATIO",
    "DEFAULT_MINIMUM_THROUGHPUT",
    "DEFAULT_SAMPLING_DURATION",
    "DEFAULT_SLOW_CALL_FACTOR",
    "DEFAULT_SLOW_CALL_RATIO",
    "BreakerOptions",
]

DEFAULT_FAILURE_RATIO: Final = 0.1
DEFAULT_SAMPLING_DURATION: Final = timedelta(seconds=30)
DEFAULT_MINIMUM_THROUGHPUT: Final = 100
DEFAULT_BREAK_DURATION: Final = timedelta(seconds=5)
DEFAULT_BREAKER_PER_HOST: Final = True
DEFAULT_BASELINE_MIN_SAMPLES: Final = 100
DEFAULT_BASELINE_HALF_LIFE: Final = timedelta(minutes=10)
DEFAULT_ADAPTIVE_TIMEOUT_FACTOR: Final = 3.0
DEFAULT_BREAKER_BASELINE_FACTOR: Final = 5.0
DEFAULT_SLOW_CALL_FACTOR: Final = 3.0
DEFAULT_SLOW_CALL_RATIO: Final = 0.5


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
        baseline_min_samples: Attempts a host's baseline learns before the
            adaptive rules below read it. Default 100.
        baseline_half_life: How fast the baseline forgets: an attempt counts
            half as much after this long. Default 10 minutes.
        adaptive_timeout_factor: Once the host's baseline is armed, the attempt
            timeout inside this breaker is at most this many times the host's
            95th percentile (never below 1 s). Default None here (off; the
            standard pipeline's is 3.0).
        breaker_baseline_factor: Once armed, the breaker trips on this many
            times the host's own error rate, never below `failure_ratio` and
            never above halfway from that rate to 1. Default None here (off;
            standard: 5.0).
        slow_call_factor: Once armed, an attempt is slow when it took longer
            than this many times the host's median (and at least 100 ms), or
            its attempt timeout cut it. Default None here (off; standard: 3.0).
        slow_call_ratio: The share of slow attempts in the window (with at
            least `minimum_throughput` attempts) that opens the breaker.
            Default 0.5.

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
    baseline_min_samples: PositiveCount = DEFAULT_BASELINE_MIN_SAMPLES
    baseline_half_life: PositiveDuration = default(DEFAULT_BASELINE_HALF_LIFE)
    adaptive_timeout_factor: RatioOrOff = Field(
        default=None, ge=1.0, allow_inf_nan=False
    )
    breaker_baseline_factor: RatioOrOff = Field(
        default=None, ge=1.0, allow_inf_nan=False
    )
    slow_call_factor: RatioOrOff = Field(default=None, gt=1.0, allow_inf_nan=False)
    slow_call_ratio: UnitRatio = DEFAULT_SLOW_CALL_RATIO

    _label = "breaker"
    _strategy_kind = BreakerStrategy
    _async_driver = AsyncBreaker
    _sync_driver = SyncBreaker

    def guards(self) -> Guards | None:
        """The adaptive rules each host's breaker reads; None when all are off."""
        rules = (
            self.adaptive_timeout_factor,
            self.breaker_baseline_factor,
            self.slow_call_factor,
        )
        if all(rule is None for rule in rules):
            return None
        return Guards(
            half_life=self.baseline_half_life.total_seconds(),
            min_samples=self.baseline_min_samples,
            error_factor=self.breaker_baseline_factor,
            slow_factor=self.slow_call_factor,
            slow_ratio=self.slow_call_ratio,
            timeout_factor=self.adaptive_timeout_factor,
        )
