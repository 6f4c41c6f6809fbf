"""The retry's options: `RetryOptions`, its defaults, and how it builds its strategy."""

from __future__ import annotations

from datetime import timedelta
from typing import ClassVar, Final, Self

import httpx
from pydantic import (
    BaseModel,
    model_validator,
)

from http_resilience._core.builder import BuildContext
from http_resilience._core.classify import (
    DEFAULT_FAILURE_STATUSES,
    SAFE_METHODS,
    Backoff,
    Classifier,
    may_retry,
)
from http_resilience._core.fields import (
    FROZEN,
    Methods,
    MethodsInput,
    NonNegativeCount,
    NonNegativeDuration,
    StatusCodes,
    StatusInput,
)
from http_resilience._core.nested import NestedRetries
from http_resilience._core.step_defaults import SyncStepDefaults
from http_resilience._primitives.backoff import check_delays
from http_resilience._primitives.setting import default
from http_resilience._strategies.retry.decision import RetryDecision
from http_resilience._strategies.retry.drive import AsyncRetry
from http_resilience._strategies.retry.drive_sync import SyncRetry
from http_resilience._strategies.retry.strategy import RetryStrategy

__all__ = [
    "DEFAULT_BACKOFF",
    "DEFAULT_BASE_DELAY",
    "DEFAULT_MAX_DELAY",
    "DEFAULT_MAX_RETRY_ATTEMPTS",
    "DEFAULT_RETRY_UNSAFE_METHODS",
    "MethodsInput",
    "RetryOptions",
    "StatusInput",
    "check_delays",
]

DEFAULT_MAX_RETRY_ATTEMPTS: Final = 3
DEFAULT_BASE_DELAY: Final = timedelta(seconds=2)
DEFAULT_RETRY_UNSAFE_METHODS: Final = False
DEFAULT_BACKOFF: Final[Backoff] = "exponential"
DEFAULT_MAX_DELAY: Final = timedelta(seconds=30)


class RetryOptions(SyncStepDefaults, BaseModel):
    """The retry of a custom pipeline.

    The delay before retry n (1 for the first) follows `backoff` from
    `base_delay`, at most `max_delay`, scaled by a random factor in [0.5, 1),
    unless a 429 or 503 carries a valid ``Retry-After``, which is waited as
    asked (not capped); a wait that would pass the deadline of a timeout
    around the retry ends the call at once.

    Attributes:
        max_retry_attempts: Retries after the first attempt; 0 turns retry
            off. Default 3.
        base_delay: The delay before the first retry. Default 2 s.
        retry_unsafe_methods: Retry every method, POST, PATCH and CONNECT
            too. Default False: a method not in `retry_methods` is retried
            only when the request carries an ``Idempotency-Key``.
        retry_on_status: The statuses that are a failed attempt, retried.
            Default 408, 429 and every 5xx but 501 and 505. Ints, ranges, or
            a string such as ``"429, 500-504"``.
        should_retry: Your own say on an attempt's outcome, a response or an
            exception: True retries it, False does not, None leaves it to
            `retry_on_status` (and, for an exception, the built-in rule:
            transport errors and attempt timeouts). Never asked about a
            cancellation, an error the client caused itself or a refusal in
            this process. Default None.
        retry_methods: The methods retried without an ``Idempotency-Key``.
            Default the safe and idempotent ones: GET, HEAD, OPTIONS, TRACE,
            PUT, DELETE.
        backoff: ``"exponential"`` (``base_delay * 2**(n-1)``, the default),
            ``"linear"`` (``base_delay * n``) or ``"constant"``.
        max_delay: The longest delay the backoff gives, before jitter; at
            least `base_delay`. Default 30 s.
        detect_nested_retries: Attempts after the first carry their number in
            ``X-Retry-Attempt``, so a service called sees its caller
            retrying; and a call made while the work in hand serves a
            retrying caller (`ResilienceContextMiddleware`) follows
            `nested_retries`. Default True.
        nested_retries: ``"suppress"``: while the caller retries, a failed
            call makes no retry of its own (the caller's retry is the one);
            ``"report"``: it retries as usual. Both emit a
            `NestedRetryEvent`. Default ``"suppress"``.

    Raises:
        pydantic.ValidationError: On construction, naming every invalid field;
            `base_delay` above `max_delay` names both.

    Example:
        >>> RetryOptions(max_retry_attempts=2, base_delay="100ms").base_delay
        datetime.timedelta(microseconds=100000)
    """

    model_config = FROZEN

    max_retry_attempts: NonNegativeCount = DEFAULT_MAX_RETRY_ATTEMPTS
    base_delay: NonNegativeDuration = default(DEFAULT_BASE_DELAY)
    retry_unsafe_methods: bool = DEFAULT_RETRY_UNSAFE_METHODS
    retry_on_status: StatusCodes = default(DEFAULT_FAILURE_STATUSES)
    should_retry: Classifier | None = None
    retry_methods: Methods = default(SAFE_METHODS)
    backoff: Backoff = DEFAULT_BACKOFF
    max_delay: NonNegativeDuration = default(DEFAULT_MAX_DELAY)
    detect_nested_retries: bool = True
    nested_retries: NestedRetries = "suppress"

    @model_validator(mode="after")
    def _delays_in_order(self) -> Self:
        check_delays(self.base_delay, self.max_delay)
        return self

    repeats: ClassVar[bool] = True
    _label = "retry"
    _async_driver = AsyncRetry
    _sync_driver = SyncRetry

    # It waits between attempts, but never past a deadline: it does not wait
    # outside attempts (`StepDefaults.waits_outside_attempts`).

    def will_repeat(self, request: httpx.Request) -> bool:
        """Whether a failed attempt of `request` may be sent again at all."""
        return self.max_retry_attempts > 0 and may_retry(
            request,
            retry_unsafe_methods=self.retry_unsafe_methods,
            methods=self.retry_methods,
        )

    def _strategy(self, context: BuildContext) -> RetryStrategy:
        """The retry's delays and rules, for the async and the blocking loop."""
        decision = RetryDecision(
            max_retry_attempts=self.max_retry_attempts,
            base_delay=self.base_delay.total_seconds(),
            retry_unsafe_methods=self.retry_unsafe_methods,
            random=context.random,
            backoff=self.backoff,
            max_delay=self.max_delay.total_seconds(),
            retry_methods=self.retry_methods,
        )
        return RetryStrategy(
            decision=decision,
            clock=context.clock,
            telemetry=context.telemetry,
            statuses=self.retry_on_status,
            classify=self.should_retry,
            nested=self.nested_retries if self.detect_nested_retries else None,
        )
