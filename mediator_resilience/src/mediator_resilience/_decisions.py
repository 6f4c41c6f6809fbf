"""What `RetryBehavior` decides, without I/O: whether to retry, and how long to wait.

The drivers (`_driver` and its generated sync twin `_driver_sync`) run the
attempts and make the waits these decisions name; `RetryBehavior` is both.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from injector import inject

from mediator import (
    TransientDatabaseError,
    current_correlation_id,
    in_unit_of_work,
)
from mediator_resilience._events import RetryEvent, RetryListener
from mediator_resilience._options import ResilienceMediatorOptions
from mediator_resilience._primitives.backoff import jitter_factor
from mediator_resilience._primitives.clock import Clock
from mediator_resilience._primitives.durations import MAX_DURATION
from mediator_resilience._primitives.testing_mode import retries_allowed, testing_wait
from mediator_resilience._transient import asked_wait, is_cancellation

if TYPE_CHECKING:
    # Imported when the first retry happens: importing tenacity costs more than
    # the rest of this package, and most requests never need it.
    from tenacity import RetryCallState, retry_base

__all__ = ["RetryDecisions", "RetryTools"]

_log = logging.getLogger("mediator_resilience")
# The longest duration an option takes: an asked wait (within `max_delay`)
# with the backoff on top is held to it, so every platform can sleep the sum.
_LONGEST_WAIT = MAX_DURATION.total_seconds()


@dataclass(frozen=True, slots=True)
class RetryTools:
    """What the behavior waits on, draws jitter from, reports to, and is bound by.

    `remaining_time` answers the seconds left before a deadline the retry
    must keep (None: no deadline): no retry and no wait starts past it.
    """

    clock: Clock
    random: Callable[[], float]
    listeners: tuple[RetryListener, ...] = ()
    remaining_time: Callable[[], float | None] | None = None


class RetryDecisions:
    """`RetryBehavior`'s options and tools, and the decisions its drivers ask for."""

    @inject
    def __init__(self, options: ResilienceMediatorOptions, tools: RetryTools) -> None:
        self._options = options
        self._clock = tools.clock
        self._random = tools.random
        self._listeners = tools.listeners
        self._predicate = options.should_retry
        self._result_predicate = options.should_retry_result
        self._remaining = tools.remaining_time
        limit = options.max_retry_duration
        self._limit = None if limit is None else limit.total_seconds()
        self._max_delay = options.max_delay.total_seconds()

    def _first_wait(
        self,
        request: Any,
        started: float,
        error: BaseException | None,
        result: Any = None,
    ) -> float | None:
        """The wait before the second attempt, reported; None: no retry.

        The decision both drivers make after the first attempt, which raised
        `error` or (when `error` is None) returned `result`.
        """
        if not (
            self._retries(error) if error is not None else self._retries_result(result)
        ):
            return None
        delay = self._wait_before(request, 1, error, started)
        return None if delay is None else testing_wait(delay)

    def _strategy(self, request: Any, started: float) -> dict[str, Any]:
        from tenacity import retry_if_exception, retry_if_result, stop_after_attempt

        # Attempt 1 ran outside tenacity: its attempt k is the request's k + 1.
        retry: retry_base = retry_if_exception(self._retries)
        if self._result_predicate is not None:
            retry = retry | retry_if_result(self._result_predicate)

        last = retries_allowed(self._options.max_retry_attempts)
        attempts_spent = stop_after_attempt(last)
        out_of_time = False

        def wait(state: RetryCallState) -> float:
            # tenacity asks for the wait before it checks whether to stop: the
            # last attempt gets no wait and announces no retry, and a wait
            # past the time limit stops the retry instead.
            nonlocal out_of_time
            if state.attempt_number >= last:
                return 0.0
            delay = self._wait_before(
                request, state.attempt_number + 1, _failure(state), started
            )
            if delay is None:
                out_of_time = True
                return 0.0
            return testing_wait(delay)

        def stop(state: RetryCallState) -> bool:
            return out_of_time or attempts_spent(state)

        return {
            "stop": stop,
            "wait": wait,
            "retry": retry,
            "retry_error_callback": _last_outcome,
        }

    def _retries_result(self, result: Any) -> bool:
        predicate = self._result_predicate
        if predicate is None or retries_allowed(self._options.max_retry_attempts) < 1:
            return False
        return bool(predicate(result))

    def _retries(self, error: BaseException) -> bool:
        if is_cancellation(error) or not isinstance(error, Exception):
            return False
        if isinstance(error, TransientDatabaseError) and in_unit_of_work():
            # The transaction this send joined is lost (a serialization failure,
            # a deadlock, a dropped connection): another attempt inside it fails
            # again. The outermost send's retry runs the whole unit afresh.
            return False
        retries = retries_allowed(self._options.max_retry_attempts)
        return retries > 0 and bool(self._predicate(error))

    def _wait_before(
        self,
        request: Any,
        attempt: int,
        error: BaseException | None,
        started: float,
    ) -> float | None:
        """The wait before the attempt after `attempt`, reported; None: no more.

        The backoff, or longer when the failure asks for it (``retry_after``,
        plus the jittered backoff when jitter is on, to spread the herd);
        None when the failure asks for more than `max_delay`, or when the
        wait would pass `max_retry_duration` (counted from `started`) or the
        time `remaining_time` leaves.
        """
        asked = asked_wait(error)
        if asked is not None and asked > self._max_delay:
            # A wait longer than any this policy makes (a day-long quota
            # reset, a bogus 1e10 s) is not waited, nor shortened: the
            # failure goes up now, as an HTTP wait past the deadline does.
            return None
        use_jitter = self._options.use_jitter
        jitter = jitter_factor(self._random()) if use_jitter else 1.0
        delay = self._options.delay_before(attempt, jitter)
        if asked is not None and asked > delay:
            # Never less than asked. With jitter, the backoff goes on top:
            # the sends that waited out one open breaker must not all come
            # back in the same instant it lets calls through again. Both are
            # within `max_delay`; the cap keeps the sum a wait every platform
            # can sleep.
            delay = min(asked + delay, _LONGEST_WAIT) if use_jitter else asked
        if self._limit is not None and (
            self._clock.monotonic() - started + delay >= self._limit
        ):
            return None
        if self._remaining is not None:
            left = self._remaining()
            if left is not None and delay >= left:
                return None
        return self._announce(request, attempt, error, delay)

    def _announce(
        self, request: Any, attempt: int, error: BaseException | None, delay: float
    ) -> float:
        """Report the retry about to wait `delay` seconds; `delay`."""
        event = RetryEvent(
            request_type=type(request).__qualname__,
            attempt=attempt,
            delay=delay,
            exception_type=type(error).__qualname__ if error is not None else None,
        )
        _log.warning(
            "%s: attempt %d failed with %s; retrying in %.3f s",
            event.request_type,
            attempt,
            event.exception_type or "a rejected response",
            delay,
            extra={
                "resilience_event": "retry",
                "resilience_request_type": event.request_type,
                "resilience_attempt": attempt,
                "resilience_delay_s": delay,
                "resilience_reason": event.exception_type or "rejected response",
                "correlation_id": current_correlation_id(),
            },
        )
        for listener in self._listeners:
            try:
                listener(event)
            except Exception:
                # A broken listener must not fail the request it reports on.
                _log.exception("retry listener %r failed", listener)
        return delay


def _failure(state: RetryCallState) -> BaseException | None:
    outcome = state.outcome
    return outcome.exception() if outcome is not None and outcome.failed else None


def _last_outcome(state: RetryCallState) -> Any:
    """When the attempts are spent: the last failure, raised, or the last response.

    The response is one a result predicate rejected.
    """
    outcome = state.outcome
    if outcome is None:  # tenacity calls this only after an attempt
        raise RuntimeError("retry ended before any attempt")
    return outcome.result()
