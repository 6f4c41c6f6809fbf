"""The retry: `RetryDecision` (which delay, or stop) and the `RetryStrategy` loop.

The decision is pure: given the attempt that failed, its response, the time
and the deadline, it answers a delay or None. The strategy sends, classifies,
closes what a retry supersedes, reports and sleeps on the clock.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, ClassVar, Final, Self, TypeAlias

import httpx
from pydantic import (
    BaseModel,
    Field,
    model_validator,
)

from http_resilience._core.builder import BuildContext, Placement
from http_resilience._core.classify import (
    DEFAULT_FAILURE_STATUSES,
    LOCAL_REFUSALS,
    RETRY_AFTER_STATUSES,
    SAFE_METHODS,
    Backoff,
    Classifier,
    failure_table,
    is_classified_failure,
    mark_final,
    may_retry,
)
from http_resilience._core.clock import Clock, utc_now
from http_resilience._core.errors import BrokenCircuitError, RateLimitedError
from http_resilience._core.fields import FROZEN, Count, Methods, StatusCodes
from http_resilience._core.nested import (
    RETRY_EXHAUSTED_HEADER,
    NestedRetries,
    caller_attempt,
)
from http_resilience._core.pipeline import (
    AsyncHandler,
    Call,
    SyncHandler,
    charged,
    close_quietly,
    close_quietly_sync,
)
from http_resilience._core.retry_after import parse_retry_after
from http_resilience._core.telemetry import Telemetry, correlation_of
from http_resilience._primitives.backoff import (
    check_delays,
    exponential,
    jitter_factor,
)
from http_resilience._primitives.durations import Duration, DurationInput
from http_resilience._primitives.testing_mode import retries_allowed, testing_wait

__all__ = [
    "DEFAULT_BACKOFF",
    "DEFAULT_BASE_DELAY",
    "DEFAULT_MAX_DELAY",
    "DEFAULT_MAX_RETRY_ATTEMPTS",
    "DEFAULT_RETRY_UNSAFE_METHODS",
    "AsyncRetry",
    "MethodsInput",
    "RetryDecision",
    "RetryOptions",
    "RetryStrategy",
    "StatusInput",
    "SyncRetry",
    "check_delays",
]

_EXHAUSTED: Final = RETRY_EXHAUSTED_HEADER.lower()


class RetryDecision:
    """Whether a failed attempt is followed by another, and after how long.

    The delay before retry n (n = the attempt that failed, from 1) is
    ``base_delay * 2**(n-1)`` times a jitter factor in [0.5, 1); a 429 or 503
    with a valid ``Retry-After`` asks for its own wait instead. A delay that
    would reach the deadline ends the call: the wait is never shortened.

    Args:
        max_retry_attempts: Retries after the first attempt.
        base_delay: Seconds before the first retry.
        retry_unsafe_methods: Retry POST, PATCH and CONNECT as well.
        random: A float in [0, 1) per call, for the jitter.
        wall_clock: The present, to read a ``Retry-After`` date when the
            response has no valid ``Date``.

    Example:
        >>> decision = RetryDecision(
        ...     max_retry_attempts=3, base_delay=2.0, retry_unsafe_methods=False,
        ...     random=lambda: 0.0,
        ... )
        >>> [decision.delay(n, None) for n in (1, 2, 3)]
        [1.0, 2.0, 4.0]
        >>> decision.next_delay(1, None, now=0.0, deadline=30.0)
        1.0
        >>> decision.next_delay(4, None, now=0.0, deadline=30.0) is None
        True
    """

    __slots__ = (
        "_backoff",
        "_base",
        "_ceiling",
        "_max",
        "_methods",
        "_random",
        "_unsafe",
        "_wall_clock",
    )

    def __init__(
        self,
        *,
        max_retry_attempts: int,
        base_delay: float,
        retry_unsafe_methods: bool,
        random: Callable[[], float],
        wall_clock: Callable[[], datetime] = utc_now,
        backoff: Backoff = "exponential",
        max_delay: float = math.inf,
        retry_methods: frozenset[str] = SAFE_METHODS,
    ) -> None:
        self._max = max_retry_attempts
        self._base = base_delay
        self._unsafe = retry_unsafe_methods
        self._random = random
        self._wall_clock = wall_clock
        self._backoff: Backoff = backoff
        self._ceiling = max_delay
        self._methods = retry_methods

    def will_retry(self, request: httpx.Request, stream: object = None) -> bool:
        """Whether a failed attempt of `request` may be sent again at all.

        `stream`: the body before the first attempt, if it may have changed.
        """
        return self._max > 0 and may_retry(
            request,
            retry_unsafe_methods=self._unsafe,
            stream=stream,
            methods=self._methods,
        )

    def delay(self, attempt: int, response: httpx.Response | None) -> float:
        """Seconds to wait after failed attempt `attempt` (from 1).

        Raises:
            ValueError: The random source returned a value outside [0, 1).
        """
        if response is not None and response.status_code in RETRY_AFTER_STATUSES:
            values = response.headers.get_list("retry-after")
            if values:
                asked = parse_retry_after(
                    values,
                    now=self._wall_clock(),
                    date=response.headers.get_list("date"),
                )
                if asked is not None:
                    return asked
        jitter = jitter_factor(self._random())
        return min(self.curve(attempt), self._ceiling) * jitter

    def curve(self, attempt: int) -> float:
        """The delay after failed attempt `attempt` before jitter and the cap."""
        if self._backoff == "constant":
            return self._base
        if self._backoff == "linear":
            return self._base * max(attempt, 1)
        return exponential(self._base, attempt)

    def allows(self, attempt: int, wait: float, *, now: float, deadline: float) -> bool:
        """Whether another attempt may follow attempt `attempt` after `wait` s.

        Within `max_retry_attempts` (fewer under `set_testing`'s cap), and the
        wait ending before `deadline`.
        """
        return attempt <= retries_allowed(self._max) and now + wait < deadline

    def next_delay(
        self,
        attempt: int,
        response: httpx.Response | None,
        *,
        now: float,
        deadline: float,
    ) -> float | None:
        """The wait before the next attempt, or None to end the call now.

        None when the `max_retry_attempts` retries are spent, or when the wait
        would reach `deadline` (seconds on the same clock as `now`).
        """
        if attempt > retries_allowed(self._max):
            return None
        wait = self.delay(attempt, response)
        return wait if self.allows(attempt, wait, now=now, deadline=deadline) else None


class RetryStrategy:
    """What both retry loops decide: whether a finished attempt is the last.

    A failure is a response with a failure status or an exception in
    `FAILURE_EXCEPTIONS`; anything else ends the call as it is. When the call
    ends on a failure, the last response is returned and the last exception
    raised. A request that may not be retried (`RetryDecision.will_retry`) is
    sent once. With nested retries detected (`nested` not None), a failed
    answer carrying ``X-Retry-Exhausted`` (its service retried its own
    dependencies already) is not retried either, nor is a failure while the
    caller of the request this call serves is retrying (``"suppress"``).
    `AsyncRetry` and `SyncRetry` drive it: send, ask, close what a retry
    supersedes, wait.

    Args:
        decision: The delays.
        clock: Where the waits happen.
        telemetry: Where attempts and retries are reported.
    """

    __slots__ = (
        "_classify",
        "_decision",
        "_failed",
        "_nested",
        "_now",
        "_report",
        "_telemetry",
        "clock",
    )

    def __init__(
        self,
        *,
        decision: RetryDecision,
        clock: Clock,
        telemetry: Telemetry,
        statuses: frozenset[int] = DEFAULT_FAILURE_STATUSES,
        classify: Classifier | None = None,
        nested: NestedRetries | None = "suppress",
    ) -> None:
        self._decision = decision
        self._nested = nested
        self.clock = clock
        self._now = clock.monotonic
        self._telemetry = telemetry
        self._report = telemetry.wants_attempts
        self._failed = failure_table(statuses)
        self._classify = classify

    def started(self, call: Call, attempt: int) -> float:
        """Attempt `attempt` starts: its start time, when attempts are reported."""
        call.attempt = attempt
        call.tell_attempt = self._nested is not None
        return self._now() if self._report else 0.0

    def _caller_retries(self, call: Call) -> bool:
        """Whether the caller's retry is the one: then no retry here (reported)."""
        if self._nested is None:
            return False
        caller = caller_attempt()
        if caller is None:
            return False
        suppressed = self._nested == "suppress"
        self._telemetry.nested(call.method, call.host, caller, suppressed)
        return suppressed

    def after_answer(
        self,
        request: httpx.Request,
        body: object,
        call: Call,
        response: httpx.Response,
        started: float,
    ) -> float | None:
        """After an answer: the wait before the next attempt, or None to return it.

        The driver closes the answer before it waits.
        """
        status = response.status_code
        if self._report:
            self._attempted(call, str(status), started)
        classify = self._classify
        failed = (
            self._failed[status]
            if classify is None
            else is_classified_failure(response, self._failed, classify)
        )
        if not failed or not self._decision.will_retry(request, body):
            return None
        if self._nested is not None and _EXHAUSTED in response.headers:
            mark_final(response)  # retried as far as it goes a hop further in
            return None
        if self._caller_retries(call):
            mark_final(response)  # the caller's retry is the one
            return None
        delay = self._decision.next_delay(
            call.attempt, response, now=self._now(), deadline=call.deadline
        )
        if delay is None or (call.budget is not None and not self._charged(call)):
            mark_final(response)  # retried here as far as it goes
            return None
        self._telemetry.retry(
            call.method,
            call.host,
            call.attempt,
            delay,
            str(status),
            correlation_of(request),
        )
        return delay

    def after_error(
        self,
        request: httpx.Request,
        body: object,
        call: Call,
        exc: Exception,
        started: float,
    ) -> float | None:
        """After an attempt raised: the wait before the next, or None to re-raise.

        An exception that is no failure (`is_classified_failure`: a bug, a
        self-caused error, or one your `should_retry` says no to) is re-raised
        at once, unreported.
        """
        if not is_classified_failure(exc, self._failed, self._classify):
            return None
        ended = self._now()
        reason = type(exc).__name__
        if self._report:
            self._telemetry.attempt(
                call.method, call.host, call.attempt, reason, ended - started
            )
        if not self._decision.will_retry(request, body):
            return None
        if self._caller_retries(call):
            mark_final(exc)  # the caller's retry is the one
            return None
        delay = self._decision.next_delay(
            call.attempt, None, now=ended, deadline=call.deadline
        )
        if delay is None or (call.budget is not None and not self._charged(call)):
            mark_final(exc)  # retried here as far as it goes
            return None
        self._telemetry.retry(
            call.method, call.host, call.attempt, delay, reason, correlation_of(request)
        )
        return delay

    def after_refusal(
        self,
        request: httpx.Request,
        body: object,
        call: Call,
        exc: BrokenCircuitError | RateLimitedError,
    ) -> float | None:
        """After an attempt was refused in this process: the wait, or None to raise.

        Only a refusal that says when to come back and is about the host (a
        spent published quota) is waited for, as a ``Retry-After`` is: never
        past the deadline, within `max_retry_attempts`, and charged to the
        retry budget. An open breaker or a full limiter ends the call.
        """
        if not isinstance(exc, RateLimitedError) or exc.reason != "quota":
            return None
        wait = exc.retry_after
        if wait is None or not self._decision.will_retry(request, body):
            return None
        now = self._now()
        if not self._decision.allows(
            call.attempt, wait, now=now, deadline=call.deadline
        ):
            return None
        if call.budget is not None and not self._charged(call):
            return None
        self._telemetry.retry(
            call.method, call.host, call.attempt, wait, "quota", correlation_of(request)
        )
        return wait

    def refused(self, call: Call) -> None:
        """A retry the budget was charged for was refused in this process: refund it."""
        if call.budget is not None:
            call.budget.refund(self._now())

    def _charged(self, call: Call) -> bool:
        """Charge the call's budget for one more attempt; False: it refused."""
        return charged(call, self._now(), self._telemetry)

    def _attempted(self, call: Call, outcome: str, started: float) -> None:
        self._telemetry.attempt(
            call.method, call.host, call.attempt, outcome, self._now() - started
        )


class AsyncRetry:
    """`RetryStrategy`'s loop on an event loop."""

    __slots__ = ("_next", "_strategy")

    def __init__(self, next: AsyncHandler, strategy: RetryStrategy) -> None:
        self._next = next
        self._strategy = strategy

    async def handle(self, request: httpx.Request, call: Call) -> httpx.Response:
        """Send `request`, again after each failure while allowed."""
        strategy, body, attempt = self._strategy, request.stream, 1
        while True:
            started = strategy.started(call, attempt)
            try:
                response = await self._next.handle(request, call)
            except LOCAL_REFUSALS as exc:
                if attempt > 1:
                    strategy.refused(call)
                delay = strategy.after_refusal(request, body, call, exc)
                if delay is None:
                    raise
            except Exception as exc:
                delay = strategy.after_error(request, body, call, exc, started)
                if delay is None:
                    raise
            else:
                delay = strategy.after_answer(request, body, call, response, started)
                if delay is None:
                    return response
                await close_quietly(response)
            await strategy.clock.sleep(testing_wait(delay))
            attempt += 1


class SyncRetry:
    """`RetryStrategy`'s loop, blocking."""

    __slots__ = ("_next", "_strategy")

    def __init__(self, next: SyncHandler, strategy: RetryStrategy) -> None:
        self._next = next
        self._strategy = strategy

    def handle_sync(self, request: httpx.Request, call: Call) -> httpx.Response:
        """Send `request`, again after each failure while allowed."""
        strategy, body, attempt = self._strategy, request.stream, 1
        while True:
            started = strategy.started(call, attempt)
            try:
                response = self._next.handle_sync(request, call)
            except LOCAL_REFUSALS as exc:
                if attempt > 1:
                    strategy.refused(call)
                delay = strategy.after_refusal(request, body, call, exc)
                if delay is None:
                    raise
            except Exception as exc:
                delay = strategy.after_error(request, body, call, exc, started)
                if delay is None:
                    raise
            else:
                delay = strategy.after_answer(request, body, call, response, started)
                if delay is None:
                    return response
                close_quietly_sync(response)
            strategy.clock.sleep_sync(testing_wait(delay))
            attempt += 1


DEFAULT_MAX_RETRY_ATTEMPTS: Final = 3
DEFAULT_BASE_DELAY: Final = timedelta(seconds=2)
DEFAULT_RETRY_UNSAFE_METHODS: Final = False
DEFAULT_BACKOFF: Final[Backoff] = "exponential"
DEFAULT_MAX_DELAY: Final = timedelta(seconds=30)

StatusInput: TypeAlias = "Iterable[int | range | str] | str | int"
"""What `retry_on_status` and `breaker_on_status` take: ints, ranges, or a
string such as ``"429, 500-504"``."""
MethodsInput: TypeAlias = "Iterable[str] | str"
"""What `retry_methods` takes: names, or one string joined by commas."""


class RetryOptions(BaseModel):
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

    max_retry_attempts: Count = Field(default=DEFAULT_MAX_RETRY_ATTEMPTS, ge=0)
    base_delay: Duration = Field(default=DEFAULT_BASE_DELAY, ge=timedelta(0))
    retry_unsafe_methods: bool = DEFAULT_RETRY_UNSAFE_METHODS
    retry_on_status: StatusCodes = DEFAULT_FAILURE_STATUSES
    should_retry: Classifier | None = None
    retry_methods: Methods = SAFE_METHODS
    backoff: Backoff = DEFAULT_BACKOFF
    max_delay: Duration = Field(default=DEFAULT_MAX_DELAY, ge=timedelta(0))
    detect_nested_retries: bool = True
    nested_retries: NestedRetries = "suppress"

    if TYPE_CHECKING:
        # Durations in every form pydantic reads; see `HttpResilienceOptions`.
        def __init__(
            self,
            *,
            max_retry_attempts: int = DEFAULT_MAX_RETRY_ATTEMPTS,
            base_delay: DurationInput = DEFAULT_BASE_DELAY,
            retry_unsafe_methods: bool = DEFAULT_RETRY_UNSAFE_METHODS,
            retry_on_status: StatusInput = DEFAULT_FAILURE_STATUSES,
            should_retry: Classifier | None = None,
            retry_methods: MethodsInput = SAFE_METHODS,
            backoff: Backoff = DEFAULT_BACKOFF,
            max_delay: DurationInput = DEFAULT_MAX_DELAY,
            detect_nested_retries: bool = True,
            nested_retries: NestedRetries = "suppress",
        ) -> None: ...

    @model_validator(mode="after")
    def _delays_in_order(self) -> Self:
        check_delays(self.base_delay, self.max_delay)
        return self

    is_deadline: ClassVar[bool] = False
    repeats: ClassVar[bool] = True

    @property
    def label(self) -> str:
        """``"retry"``."""
        return "retry"

    @property
    def waits_outside_attempts(self) -> bool:
        """It waits between attempts, but never past a deadline: no."""
        return False

    def will_repeat(self, request: httpx.Request) -> bool:
        """Whether a failed attempt of `request` may be sent again at all."""
        return self.max_retry_attempts > 0 and may_retry(
            request,
            retry_unsafe_methods=self.retry_unsafe_methods,
            methods=self.retry_methods,
        )

    def _strategy(self, context: BuildContext) -> RetryStrategy:
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

    def build_async(
        self, next: AsyncHandler, context: BuildContext, place: Placement
    ) -> AsyncRetry:
        """The retry loop around `next`."""
        return AsyncRetry(next, self._strategy(context))

    def build_sync(
        self, next: SyncHandler, context: BuildContext, place: Placement
    ) -> SyncRetry:
        """The blocking retry loop around `next`."""
        return SyncRetry(next, self._strategy(context))
