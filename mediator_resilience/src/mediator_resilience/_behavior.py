"""`RetryBehavior`: retries `@retryable` requests, outside the transaction."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from injector import inject

from mediator import (
    Next,
    Request,
    Stage,
    SyncNext,
    TransientDatabaseError,
    in_unit_of_work,
)
from mediator_resilience._clock import Clock
from mediator_resilience._events import RetryEvent, RetryListener
from mediator_resilience._marker import is_retryable
from mediator_resilience._options import ResilienceMediatorOptions
from mediator_resilience._transient import is_cancellation

if TYPE_CHECKING:
    # Imported when the first retry happens: importing tenacity costs more than
    # the rest of this package, and most requests never need it.
    from tenacity import RetryCallState, retry_base

__all__ = ["RetryBehavior", "RetryTools"]

_log = logging.getLogger("mediator_resilience")


@dataclass(frozen=True, slots=True)
class RetryTools:
    """What the behavior waits on, draws jitter from, and reports to."""

    clock: Clock
    random: Callable[[], float]
    listeners: tuple[RetryListener, ...] = ()


class RetryBehavior:
    """Re-runs the rest of the chain when a `@retryable` request fails transiently.

    At stage RETRY: under `use_defaults()` it sits inside audit, validation and
    authorization (they run once per request) and outside the transaction, so
    every attempt runs the handler in a fresh transaction. A request without the
    marker never meets it: it is not in that type's chain.

    The first attempt runs without tenacity, so a request that succeeds costs
    one behavior step; after a failure, tenacity (imported then, not with the
    package) drives the remaining attempts, waiting on the injected clock.
    Cancellation is never retried and no attempt starts after it, also when it
    arrives during a wait. When the attempts are
    spent, the last failure is raised (or the last response returned, for
    `should_retry_result`).

    A send nested in a `@transactional` handler runs inside the outer unit of
    work (`mediator.in_unit_of_work`): its attempts each roll back to their own
    savepoint, so it is retried like any other, except for a
    `TransientDatabaseError`, which dooms the whole transaction and is never
    retried there, whatever `should_retry` says: it goes up to the outermost
    `@retryable` send, which retries the whole unit of work.
    """

    stage: ClassVar[Stage] = Stage.RETRY

    @inject
    def __init__(self, options: ResilienceMediatorOptions, tools: RetryTools) -> None:
        self._options = options
        self._clock = tools.clock
        self._random = tools.random
        self._listeners = tools.listeners
        self._predicate = options.should_retry
        self._result_predicate = options.should_retry_result

    def applies_to(self, request_type: type[Any]) -> bool:
        """Only `@retryable` requests (commands and queries) are retried."""
        return is_retryable(request_type) and Request in request_type.__mro__

    # --- the first attempt, on the hot path ------------------------------------

    async def handle(self, request: Any, next: Next[Any]) -> Any:
        """Run the rest of the chain; retry it while the failure is transient."""
        try:
            result = await next()
        except BaseException as error:
            if not self._retries(error):
                raise
            await self._clock.sleep(self._announce(request, 1, error))
            return await self._retry_async(request, next)
        if self._result_predicate is not None and self._result_predicate(result):
            await self._clock.sleep(self._announce(request, 1, None))
            return await self._retry_async(request, next)
        return result

    def handle_sync(self, request: Any, next: SyncNext[Any]) -> Any:
        """The same on the sync path, waiting with the clock's `sleep_sync`."""
        try:
            result = next()
        except BaseException as error:
            if not self._retries(error):
                raise
            self._clock.sleep_sync(self._announce(request, 1, error))
            return self._retry_sync(request, next)
        if self._result_predicate is not None and self._result_predicate(result):
            self._clock.sleep_sync(self._announce(request, 1, None))
            return self._retry_sync(request, next)
        return result

    # --- after a failure: tenacity ---------------------------------------------

    async def _retry_async(self, request: Any, next: Next[Any]) -> Any:
        from tenacity import AsyncRetrying

        async def attempt() -> Any:
            return await next()

        retrying = AsyncRetrying(sleep=self._clock.sleep, **self._strategy(request))
        return await retrying(attempt)

    def _retry_sync(self, request: Any, next: SyncNext[Any]) -> Any:
        from tenacity import Retrying

        retrying = Retrying(sleep=self._clock.sleep_sync, **self._strategy(request))
        return retrying(next)

    def _strategy(self, request: Any) -> dict[str, Any]:
        from tenacity import retry_if_exception, retry_if_result, stop_after_attempt

        # Attempt 1 ran outside tenacity: its attempt k is the request's k + 1.
        retry: retry_base = retry_if_exception(self._retries)
        if self._result_predicate is not None:
            retry = retry | retry_if_result(self._result_predicate)

        last = self._options.max_retry_attempts

        def wait(state: RetryCallState) -> float:
            # tenacity asks for the wait before it checks whether to stop: the
            # last attempt gets no wait and announces no retry.
            if state.attempt_number >= last:
                return 0.0
            return self._announce(request, state.attempt_number + 1, _failure(state))

        return {
            "stop": stop_after_attempt(self._options.max_retry_attempts),
            "wait": wait,
            "retry": retry,
            "retry_error_callback": _last_outcome,
        }

    def _retries(self, error: BaseException) -> bool:
        if is_cancellation(error) or not isinstance(error, Exception):
            return False
        if isinstance(error, TransientDatabaseError) and in_unit_of_work():
            # The transaction this send joined is lost (a serialization failure,
            # a deadlock, a dropped connection): another attempt inside it fails
            # again. The outermost send's retry runs the whole unit afresh.
            return False
        return self._options.max_retry_attempts > 0 and bool(self._predicate(error))

    def _announce(
        self, request: Any, attempt: int, error: BaseException | None
    ) -> float:
        """The wait before the next attempt; reports the retry on the way."""
        jitter = 0.5 + self._random() / 2 if self._options.use_jitter else 1.0
        delay = self._options.delay_before(attempt, jitter)
        event = RetryEvent(
            request_type=type(request).__qualname__,
            attempt=attempt,
            delay=delay,
            exception_type=type(error).__qualname__ if error is not None else None,
        )
        _log.warning(
            "retrying %s: attempt %d failed (%s), next in %.0f ms",
            event.request_type,
            attempt,
            event.exception_type or "rejected response",
            delay * 1000,
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
