"""Around a logical call: its `RequestEvent`, and observers told of its start.

A transport with no listener runs its chain as built, paying nothing for
this. With one, the chain is wrapped once, when the transport is built, in a
link that reads the clock when a call starts and reports a `RequestEvent`
when it ends. A listener that also has ``request_started`` (a
`RequestObserver`, such as ``http_resilience.otel.HttpTracing``) is told when
each call starts, in the caller's task and context, and the callable it
returns is given the call's `RequestEvent` when it ends: what a tracer needs to
hold a span open around the call, with the events of its attempts inside it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol, Self, TypeAlias, TypeVar, runtime_checkable

import httpx

from http_resilience._core.call import AsyncHandler, Call, SyncHandler
from http_resilience._core.classify import LOCAL_REFUSALS
from http_resilience._core.degraded import (
    DEGRADED_EXTENSION,
    Degradation,
    DegradationSource,
)
from http_resilience._core.events import RequestEvent
from http_resilience._core.telemetry import LOGGER, Telemetry

__all__ = ["RequestEnd", "RequestObserver", "observe_async", "observe_sync"]

H = TypeVar("H", AsyncHandler, SyncHandler)

RequestEnd: TypeAlias = Callable[[RequestEvent], None]
"""Called once with the call's `RequestEvent` when the call ends."""


@runtime_checkable
class RequestObserver(Protocol):
    """A listener that is also told when each logical call starts."""

    def request_started(self, client: str, method: str, host: str) -> RequestEnd:
        """A call starts; return what is called with its `RequestEvent` at its end.

        Called in the caller's task and context, before the first attempt; it
        must be quick and must not raise (a failure is logged and the call
        goes on unobserved by it).
        """
        ...


def observe_async(
    handler: AsyncHandler, telemetry: Telemetry, now: Callable[[], float]
) -> AsyncHandler:
    """`handler`, reporting each call's end when `telemetry` has listeners."""
    return _observed(handler, telemetry, now, _ObservedAsync)


def observe_sync(
    handler: SyncHandler, telemetry: Telemetry, now: Callable[[], float]
) -> SyncHandler:
    """`observe_async` for a sync chain."""
    return _observed(handler, telemetry, now, _ObservedSync)


def _observed(
    handler: H,
    telemetry: Telemetry,
    now: Callable[[], float],
    wrap: Callable[[H, _Reporter], H],
) -> H:
    # With no listener, the chain runs as built: nothing to pay per call.
    if not telemetry.listeners:
        return handler
    return wrap(handler, _Reporter(telemetry, now))


def _observers(listeners: Sequence[object]) -> tuple[RequestObserver, ...]:
    # Any object may be a listener: a class with `__call__` and `request_started`.
    return tuple(
        listener for listener in listeners if isinstance(listener, RequestObserver)
    )


class _Reporter:
    """What both wrappers do at a call's start and end."""

    __slots__ = ("now", "observers", "telemetry")

    def __init__(self, telemetry: Telemetry, now: Callable[[], float]) -> None:
        self.telemetry = telemetry
        self.now = now
        self.observers = _observers(telemetry.listeners)

    def observing(self, call: Call) -> _Observation:
        """Tell the observers `call` starts; the `with` block around it ends it."""
        ends: list[RequestEnd] = []
        for observer in self.observers:
            try:
                ends.append(
                    observer.request_started(call.client, call.method, call.host)
                )
            except Exception:
                LOGGER.exception("an http_resilience request observer raised")
        return _Observation(self, call, ends, self.now())


@dataclass(slots=True, eq=False)
class _Observation:
    """One call while it runs: a `with` block around it reports its end.

    `answered` reports a response; leaving the block by an exception reports
    the exception (refused here, or not), and lets it go on.
    """

    reporter: _Reporter
    call: Call
    ends: list[RequestEnd]
    started: float

    def __enter__(self) -> Self:
        return self

    def __exit__(self, _type: object, exc: BaseException | None, _tb: object) -> None:
        if exc is not None:
            self._end(type(exc).__name__, isinstance(exc, LOCAL_REFUSALS))

    def answered(self, response: httpx.Response) -> httpx.Response:
        """Report the call's end with `response`; return it."""
        degraded = response.extensions.get(DEGRADED_EXTENSION)
        self._end(
            str(response.status_code),
            False,
            degraded.source if isinstance(degraded, Degradation) else None,
        )
        return response

    def _end(
        self, outcome: str, rejected: bool, degraded: DegradationSource | None = None
    ) -> None:
        reporter, call = self.reporter, self.call
        event = RequestEvent(
            call.client,
            call.method,
            call.host,
            outcome,
            reporter.now() - self.started,
            rejected,
            degraded,
        )
        reporter.telemetry.request(event)
        # Innermost first: what the last observer opened closes first.
        for end in reversed(self.ends):
            try:
                end(event)
            except Exception:
                LOGGER.exception("an http_resilience request observer raised")


class _ObservedAsync:
    """The outermost async link when someone listens: reports the call's end."""

    __slots__ = ("_next", "_reporter")

    def __init__(self, next: AsyncHandler, reporter: _Reporter) -> None:
        self._next = next
        self._reporter = reporter

    async def handle(self, request: httpx.Request, call: Call) -> httpx.Response:
        with self._reporter.observing(call) as observation:
            return observation.answered(await self._next.handle(request, call))


class _ObservedSync:
    """`_ObservedAsync` for a sync chain."""

    __slots__ = ("_next", "_reporter")

    def __init__(self, next: SyncHandler, reporter: _Reporter) -> None:
        self._next = next
        self._reporter = reporter

    def handle_sync(self, request: httpx.Request, call: Call) -> httpx.Response:
        with self._reporter.observing(call) as observation:
            return observation.answered(self._next.handle_sync(request, call))
