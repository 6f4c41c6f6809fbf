"""The retry: `RetryDecision` (which delay, or stop) and the `RetryStrategy` loop.

The decision is pure: given the attempt that failed, its response, the time
and the deadline, it answers a delay or None. The strategy sends, classifies,
closes what a retry supersedes, reports and sleeps on the clock.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from datetime import datetime

import httpx

from http_resilience._classify import (
    FAILURE_EXCEPTIONS,
    RETRY_AFTER_STATUSES,
    is_failure_status,
    may_retry,
)
from http_resilience._clock import Clock, utc_now
from http_resilience._pipeline import Call, Handler, close_quietly, close_quietly_sync
from http_resilience._retry_after import parse_retry_after
from http_resilience._telemetry import Telemetry

__all__ = ["RetryDecision", "RetryStrategy"]

# 2.0 ** 1024 overflows a float; a delay that long ends the call anyway.
_MAX_DOUBLINGS = 1000
# 0.5 + 0.5 * draw rounds to 1.0 for the largest draws below 1.
_BELOW_ONE = math.nextafter(1.0, 0.0)


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

    __slots__ = ("_base", "_max", "_random", "_unsafe", "_wall_clock")

    def __init__(
        self,
        *,
        max_retry_attempts: int,
        base_delay: float,
        retry_unsafe_methods: bool,
        random: Callable[[], float],
        wall_clock: Callable[[], datetime] = utc_now,
    ) -> None:
        self._max = max_retry_attempts
        self._base = base_delay
        self._unsafe = retry_unsafe_methods
        self._random = random
        self._wall_clock = wall_clock

    def will_retry(self, request: httpx.Request, stream: object = None) -> bool:
        """Whether a failed attempt of `request` may be sent again at all.

        `stream`: the body before the first attempt, if it may have changed.
        """
        return self._max > 0 and may_retry(
            request, retry_unsafe_methods=self._unsafe, stream=stream
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
        draw = self._random()
        if not 0.0 <= draw < 1.0:
            raise ValueError(f"the jitter source must return [0, 1), got {draw!r}")
        doublings = min(max(attempt - 1, 0), _MAX_DOUBLINGS)
        return self._base * 2.0**doublings * min(0.5 + 0.5 * draw, _BELOW_ONE)

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
        if attempt > self._max:
            return None
        wait = self.delay(attempt, response)
        if now + wait >= deadline:
            return None
        return wait


class RetryStrategy:
    """Sends again after a failed attempt, as `RetryDecision` says.

    A failure is a response with a failure status or an exception in
    `FAILURE_EXCEPTIONS`; anything else ends the call as it is. When the call
    ends on a failure, the last response is returned and the last exception
    raised. A request that may not be retried (`RetryDecision.will_retry`) is
    sent once.

    Args:
        next: The handler inside: one attempt.
        decision: The delays.
        clock: Where the waits happen.
        telemetry: Where attempts and retries are reported.
    """

    __slots__ = ("_clock", "_decision", "_next", "_telemetry")

    def __init__(
        self,
        next: Handler,
        *,
        decision: RetryDecision,
        clock: Clock,
        telemetry: Telemetry,
    ) -> None:
        self._next = next
        self._decision = decision
        self._clock = clock
        self._telemetry = telemetry

    async def handle(self, request: httpx.Request, call: Call) -> httpx.Response:
        """Send `request`, again after each failure while allowed."""
        clock = self._clock
        telemetry = self._telemetry
        body = request.stream  # as it is before any attempt reads it
        report = telemetry.wants_attempts
        attempt = 1
        while True:
            call.attempt = attempt
            started = clock.monotonic() if report else 0.0
            try:
                response = await self._next.handle(request, call)
            except FAILURE_EXCEPTIONS as exc:
                reason = type(exc).__name__
                delay = self._after_error(request, body, call, reason, started)
                if delay is None:
                    raise
            else:
                status = response.status_code
                if report:
                    self._report(call, str(status), started)
                if not is_failure_status(status):
                    return response
                delay = self._after_failed_answer(request, body, call, response)
                if delay is None:
                    return response
                reason = str(status)
                await close_quietly(response)
            telemetry.retry(call.method, call.host, attempt, delay, reason)
            await clock.sleep(delay)
            attempt += 1

    def handle_sync(self, request: httpx.Request, call: Call) -> httpx.Response:
        """The blocking twin of `handle`; the decisions are shared."""
        clock = self._clock
        telemetry = self._telemetry
        body = request.stream  # as it is before any attempt reads it
        report = telemetry.wants_attempts
        attempt = 1
        while True:
            call.attempt = attempt
            started = clock.monotonic() if report else 0.0
            try:
                response = self._next.handle_sync(request, call)
            except FAILURE_EXCEPTIONS as exc:
                reason = type(exc).__name__
                delay = self._after_error(request, body, call, reason, started)
                if delay is None:
                    raise
            else:
                status = response.status_code
                if report:
                    self._report(call, str(status), started)
                if not is_failure_status(status):
                    return response
                delay = self._after_failed_answer(request, body, call, response)
                if delay is None:
                    return response
                reason = str(status)
                close_quietly_sync(response)
            telemetry.retry(call.method, call.host, attempt, delay, reason)
            clock.sleep_sync(delay)
            attempt += 1

    # --- the decisions both loops share: off the path of a first success ----

    def _report(self, call: Call, outcome: str, started: float) -> None:
        self._telemetry.attempt(
            call.method,
            call.host,
            call.attempt,
            outcome,
            self._clock.monotonic() - started,
        )

    def _after_error(
        self,
        request: httpx.Request,
        body: object,
        call: Call,
        reason: str,
        started: float,
    ) -> float | None:
        """After an attempt raised: the wait before the next, or None to re-raise."""
        ended = self._clock.monotonic()
        if self._telemetry.wants_attempts:
            self._telemetry.attempt(
                call.method, call.host, call.attempt, reason, ended - started
            )
        if not self._decision.will_retry(request, body):
            return None
        return self._decision.next_delay(
            call.attempt, None, now=ended, deadline=call.deadline
        )

    def _after_failed_answer(
        self,
        request: httpx.Request,
        body: object,
        call: Call,
        response: httpx.Response,
    ) -> float | None:
        """After a failure status: the wait before the next, or None to return it."""
        if not self._decision.will_retry(request, body):
            return None
        return self._decision.next_delay(
            call.attempt,
            response,
            now=self._clock.monotonic(),
            deadline=call.deadline,
        )
