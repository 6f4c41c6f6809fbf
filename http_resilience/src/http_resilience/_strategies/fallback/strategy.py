"""What asks a fallback function, checks and marks its answer; the two drivers.

The fallback runs outside every other strategy of its pipeline, so it sees
only what the call ended with: after the retries, the breaker, the timeouts
and the limiters have had their say. An outcome that may degrade
(`is_degradable`: a failure status, a transport failure or timeout, a
refusal in this process) is handed to the function with the request; what
it returns stands in for the failure, marked degraded, or None lets the
failure through as it was.

A function that raises, or returns what is not a response, does not replace
the failure: an exception the call raised is raised as it was, the
fallback's failure kept on it (`suppressed_failure`); a failing response is
returned as it was, and the fallback's failure logged by its type name.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from typing import TypeAlias

import httpx

from http_resilience._core.call import Call
from http_resilience._core.degraded import (
    Degradation,
    is_degradable,
    mark_degraded,
    outcome_name,
)
from http_resilience._core.drive import AsyncDriver, SyncDriver
from http_resilience._core.suppressed import keep_suppressed
from http_resilience._core.telemetry import LOGGER, Telemetry

__all__ = [
    "AsyncFallback",
    "AsyncFallbackFunction",
    "Failure",
    "FallbackFunction",
    "FallbackStrategy",
    "SyncFallback",
]

Failure: TypeAlias = Exception | httpx.Response
"""What a fallback is handed: the exception the call raised, or its failing response."""

FallbackFunction: TypeAlias = Callable[[httpx.Request, Failure], httpx.Response | None]
"""A fallback: the request and its failure to the response that stands in, or None."""

AsyncFallbackFunction: TypeAlias = Callable[
    [httpx.Request, Failure], Awaitable[httpx.Response | None]
]
"""A fallback for an async client: `FallbackFunction`, awaited."""


class FallbackStrategy:
    """Asks the function, checks what it gave, marks it and reports it.

    Args:
        function: The fallback, sync or async.
        telemetry: Where a degraded answer is logged.
    """

    __slots__ = ("function", "telemetry")

    def __init__(
        self, function: FallbackFunction | AsyncFallbackFunction, telemetry: Telemetry
    ) -> None:
        self.function = function
        self.telemetry = telemetry

    def answer(self, call: Call, failure: Failure, given: object) -> httpx.Response:
        """`given`, marked as the call's degraded answer in place of `failure`.

        Raises:
            TypeError: `given` is not an `httpx.Response`.
        """
        if not isinstance(given, httpx.Response):
            raise TypeError(
                f"the fallback of {call.where()} returned "
                f"{type(given).__qualname__}; it must return an httpx.Response "
                "or None"
            )
        reason = outcome_name(failure)
        self.telemetry.degraded(call.method, call.host, "fallback", reason)
        return mark_degraded(given, Degradation("fallback", reason))

    def failed(self, call: Call, failure: Failure, error: Exception) -> None:
        """The fallback raised `error`: keep it on `failure`, or log it."""
        if isinstance(failure, Exception):
            keep_suppressed(failure, error)
            failure.add_note(
                f"the fallback raised {type(error).__name__} while standing in for "
                "this failure (see http_resilience.suppressed_failure)"
            )
            return
        LOGGER.error(
            "%s: the fallback raised %s in place of status %d; the response "
            "goes on as it was",
            call.where(),
            type(error).__name__,
            failure.status_code,
        )


class AsyncFallback(AsyncDriver[FallbackStrategy]):
    """`FallbackStrategy` on an event loop: an async function's answer is awaited."""

    __slots__ = ()

    async def handle(self, request: httpx.Request, call: Call) -> httpx.Response:
        """Run the inside; on a failure that may degrade, ask the fallback."""
        try:
            response = await self._next.handle(request, call)
        except Exception as exc:
            if not is_degradable(exc):
                raise
            answer = await self._ask(request, call, exc)
            if answer is None:
                raise
            return answer
        if not is_degradable(response):
            return response
        answer = await self._ask(request, call, response)
        if answer is None:
            return response
        await response.aclose()
        return answer

    async def _ask(
        self, request: httpx.Request, call: Call, failure: Failure
    ) -> httpx.Response | None:
        strategy = self.strategy
        try:
            given: object = strategy.function(request, failure)
            if inspect.isawaitable(given):
                given = await given
            if given is None:
                return None
            return strategy.answer(call, failure, given)
        except Exception as error:
            strategy.failed(call, failure, error)
            return None


class SyncFallback(SyncDriver[FallbackStrategy]):
    """`FallbackStrategy` for threads: the function is called, never awaited."""

    __slots__ = ()

    def handle_sync(self, request: httpx.Request, call: Call) -> httpx.Response:
        """Run the inside; on a failure that may degrade, ask the fallback."""
        try:
            response = self._next.handle_sync(request, call)
        except Exception as exc:
            if not is_degradable(exc):
                raise
            answer = self._ask(request, call, exc)
            if answer is None:
                raise
            return answer
        if not is_degradable(response):
            return response
        answer = self._ask(request, call, response)
        if answer is None:
            return response
        response.close()
        return answer

    def _ask(
        self, request: httpx.Request, call: Call, failure: Failure
    ) -> httpx.Response | None:
        strategy = self.strategy
        try:
            given: object = strategy.function(request, failure)
            if inspect.isawaitable(given):
                # An async callable not seen as one when it was added (an
                # object whose __call__ is async): a sync client cannot await.
                close = getattr(given, "close", None)
                if callable(close):
                    close()
                raise TypeError(
                    f"the fallback of {call.where()} is async; a sync client "
                    "needs a sync fallback"
                )
            if given is None:
                return None
            return strategy.answer(call, failure, given)
        except Exception as error:
            strategy.failed(call, failure, error)
            return None
