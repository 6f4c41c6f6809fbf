"""`Mediator`: sends requests, publishes notifications and opens streams."""

from __future__ import annotations

from collections.abc import AsyncGenerator, Coroutine
from dataclasses import dataclass
from typing import Any, NoReturn, TypeVar

from injector import Injector

from mediator._core.errors import HandlerNotFoundError
from mediator._core.handlers import HandlerInfo
from mediator._core.requests import Notification, Request, StreamQuery
from mediator._core.wiring import Wiring
from mediator._dispatch.compiler import (
    RouteCompiler,
    Routes,
    check_single_handlers,
    collector_paused,
)

__all__ = ["Mediator", "Settings", "build_mediator"]

R = TypeVar("R")
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Settings:
    """What `MediatorConfig` gathered, handed to the mediator when it is built."""

    handlers: tuple[HandlerInfo, ...]
    sources: tuple[str, ...]
    ordered_by_stage: bool
    validators: tuple[type[Any], ...] = ()
    behaviors: tuple[Any, ...] = ()  # what this module adds to the multibinding


class Mediator:
    """Dispatches requests to their handler through the behavior chain.

    Get it from the injector that has a `MediatorModule`; building it checks
    every handler and behavior, so a mistake shows at start-up, not at the
    first send. Every route is prepared then: a send is one dictionary lookup
    and a call.

    Example:
        >>> price = await mediator.send(GetPrice(sku="A"))  # doctest: +SKIP
    """

    __slots__ = (
        "_publish_routes",
        "_send_routes",
        "_sources",
        "_stream_routes",
        "_sync_publish_routes",
        "_sync_routes",
    )

    def __init__(self, routes: Routes) -> None:
        """Dispatch from `routes`; `build_mediator` compiles them."""
        self._send_routes = routes.send
        self._sync_routes = routes.send_sync
        self._stream_routes = routes.stream
        self._publish_routes = routes.publish
        self._sync_publish_routes = routes.publish_sync
        self._sources = routes.sources

    def send(self, request: Request[R]) -> Coroutine[Any, Any, R]:
        """Send a command or query to its handler and return its response.

        Raises:
            HandlerNotFoundError: No handler is registered for the request type.
        """
        try:
            route = self._send_routes[type(request)]
        except KeyError:
            return self._missing(request, "send")
        return route(request)  # type: ignore[return-value]

    def send_sync(self, request: Request[R]) -> R:
        """Send without an event loop (Flask, Django, scripts), through the same chain.

        Raises:
            HandlerNotFoundError: No handler is registered for the request type.
            SyncPathError: The handler or an applicable behavior is async only.
        """
        try:
            route = self._sync_routes[type(request)]
        except KeyError:
            self._raise_missing(request, "send_sync")
        return route(request)  # type: ignore[no-any-return]

    def stream(self, query: StreamQuery[T]) -> AsyncGenerator[T, None]:
        """Open the stream answering `query`; iterate it with ``async for``.

        The handler and the behaviors run as items are pulled. To stop early,
        close it (``await stream.aclose()``, or ``contextlib.aclosing``): that
        closes the handler's generator and ends the stream's request scope.

        Raises:
            HandlerNotFoundError: No handler is registered for the query type.
        """
        try:
            route = self._stream_routes[type(query)]
        except KeyError:
            self._raise_missing(query, "stream")
        return route(query)

    async def publish(
        self,
        notification: Notification,
        *,
        concurrent: bool = False,
        stop_on_first_failure: bool = False,
    ) -> None:
        """Deliver `notification` to every handler of its type and of its bases.

        Handlers run one after another in registration order, or all at once
        with ``concurrent=True``. Every handler runs, and the failures are raised
        together as one `ExceptionGroup` (so ``except*`` works for one failure as
        for several). With ``stop_on_first_failure=True`` delivery stops at the
        first failure (concurrently: the others are cancelled), which is raised
        in an `ExceptionGroup` too. Cancellation is never collected: it
        propagates as it is. A type with no handlers is delivered to nobody.

        Raises:
            ExceptionGroup: One or more handlers failed.
        """
        route = self._publish_routes[type(notification)]
        await route(notification, concurrent, stop_on_first_failure)

    def publish_sync(
        self, notification: Notification, *, stop_on_first_failure: bool = False
    ) -> None:
        """Deliver `notification` without an event loop, one handler after another.

        Raises:
            ExceptionGroup: One or more handlers failed.
            SyncPathError: A handler or an applicable behavior is async only.
        """
        self._sync_publish_routes[type(notification)](
            notification, False, stop_on_first_failure
        )

    # --- internals -------------------------------------------------------------

    async def _missing(self, message: object, verb: str) -> NoReturn:
        self._raise_missing(message, verb)

    def _raise_missing(self, message: object, verb: str) -> NoReturn:
        kind = type(message)
        hint = ""
        if isinstance(message, StreamQuery) and verb != "stream":
            hint = " It is a StreamQuery: use mediator.stream()."
        elif isinstance(message, Request) and verb == "stream":
            hint = " It is a Request: use mediator.send()."
        elif isinstance(message, Notification):
            hint = " It is a Notification: use mediator.publish()."
        elif not isinstance(message, Request | StreamQuery):
            hint = " Only Command, Query and StreamQuery instances have handlers."
        sources = ", ".join(self._sources) or "nothing (register_from was not called)"
        raise HandlerNotFoundError(
            f"no handler for {kind.__qualname__} (module {kind.__module__}).{hint} "
            f"Handlers were registered from: {sources}. Define its handler in one "
            "of them, or register the module that has it."
        )


def build_mediator(
    injector: Injector, settings: Settings, behaviors: list[Any]
) -> Mediator:
    """Build the mediator: compile every factory and route, or fail naming the culprit.

    Raises:
        DuplicateHandlerError: Two handlers for one request type.
        UnresolvableDependencyError: A handler or behavior cannot be built.
        ConfigurationError: A behavior is malformed (no stage, sync `handle`,
            registered twice).
    """
    check_single_handlers(settings.handlers)
    compiler = RouteCompiler(settings.sources)
    mediator = Mediator(compiler.routes)
    with collector_paused():
        compiler.compile(
            Wiring(injector, fixed={Mediator: mediator}),
            settings.handlers,
            behaviors,
            ordered_by_stage=settings.ordered_by_stage,
        )
    return mediator
