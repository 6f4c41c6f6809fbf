"""The retry strategy: `RetryStrategy`, what its two loops ask.

The strategy classifies each attempt, reports it and says how long to wait
before the next; `RetryDecision` gives the delays. Its loops, `AsyncRetry`
(`drive`) and `SyncRetry` (`drive_sync`, generated), send, close what a retry
supersedes and sleep on the clock.
"""

from __future__ import annotations

from typing import Final

import httpx

from http_resilience._core.call import Call, charged
from http_resilience._core.classify import (
    DEFAULT_FAILURE_STATUSES,
    LOCAL_REFUSALS,
    Classifier,
    failure_table,
    is_classified_failure,
    mark_final,
)
from http_resilience._core.clock import Clock
from http_resilience._core.errors import BrokenCircuitError, RateLimitedError
from http_resilience._core.nested import (
    RETRY_EXHAUSTED_HEADER,
    NestedRetries,
    caller_attempt,
)
from http_resilience._core.telemetry import Telemetry, correlation_of
from http_resilience._strategies.retry.decision import RetryDecision

__all__ = ["RetryStrategy"]

_EXHAUSTED: Final = RETRY_EXHAUSTED_HEADER.lower()


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

    def after_raise(
        self,
        request: httpx.Request,
        body: object,
        call: Call,
        exc: Exception,
        attempt: int,
        started: float,
    ) -> float | None:
        """After attempt `attempt` raised: the wait before the next, or None to raise.

        A refusal in this process (`LOCAL_REFUSALS`) refunds the retry it was
        charged for and is waited for only as `after_refusal` says; any other
        exception is decided by `after_error`.
        """
        if isinstance(exc, LOCAL_REFUSALS):
            if attempt > 1:
                self.refused(call)
            return self.after_refusal(request, body, call, exc)
        return self.after_error(request, body, call, exc, started)

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
