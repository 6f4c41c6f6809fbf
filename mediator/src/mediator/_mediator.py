"""`Mediator`: sends requests, publishes notifications and opens streams."""

from __future__ import annotations

import inspect
from collections.abc import AsyncGenerator, Coroutine
from dataclasses import dataclass
from typing import Any, NoReturn, TypeVar

from injector import Injector

from mediator._errors import (
    ConfigurationError,
    DuplicateHandlerError,
    HandlerNotFoundError,
    ScopeError,
    UnresolvableDependencyError,
)
from mediator._handlers import HandlerInfo, HandlerKind
from mediator._publish import (
    NotificationTarget,
    PublishRoute,
    SyncPublishRoute,
    publish_route,
    sync_publish_route,
)
from mediator._requests import Notification, Request, StreamQuery
from mediator._routes import (
    AsyncRoute,
    BehaviorInfo,
    SyncRoute,
    async_route,
    sync_route,
)
from mediator._stage import Stage
from mediator._streams import StreamRoute, stream_route
from mediator._wiring import Factory, Wiring

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
        "_behaviors",
        "_notification_targets",
        "_publish_routes",
        "_send_routes",
        "_sources",
        "_stream_routes",
        "_sync_publish_routes",
        "_sync_routes",
    )

    def __init__(self) -> None:
        self._send_routes: dict[type[Any], AsyncRoute] = {}
        self._sync_routes: dict[type[Any], SyncRoute] = {}
        self._stream_routes: dict[type[Any], StreamRoute] = {}
        self._publish_routes: dict[type[Any], PublishRoute] = {}
        self._sync_publish_routes: dict[type[Any], SyncPublishRoute] = {}
        self._notification_targets: list[tuple[HandlerInfo, Factory]] = []
        self._behaviors: list[BehaviorInfo] = []
        self._sources: tuple[str, ...] = ()

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
        route = self._publish_routes.get(type(notification))
        if route is None:
            route = self._publish_route(type(notification))
        await route(notification, concurrent, stop_on_first_failure)

    def publish_sync(
        self, notification: Notification, *, stop_on_first_failure: bool = False
    ) -> None:
        """Deliver `notification` without an event loop, one handler after another.

        Raises:
            ExceptionGroup: One or more handlers failed.
            SyncPathError: A handler or an applicable behavior is async only.
        """
        route = self._sync_publish_routes.get(type(notification))
        if route is None:
            self._publish_route(type(notification))
            route = self._sync_publish_routes[type(notification)]
        route(notification, stop_on_first_failure)

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

    def _publish_route(self, kind: type[Any]) -> PublishRoute:
        targets: list[NotificationTarget] = []
        scoped = False
        for info, factory in self._notification_targets:
            if issubclass(kind, info.message_type):
                targets.append((info, factory.make))
                scoped = scoped or factory.scoped
        behaviors = [b for b in self._behaviors if b.applies(kind)]
        scoped = scoped or any(b.scoped for b in behaviors)
        route = publish_route(kind, targets, behaviors, scoped=scoped)
        self._publish_routes[kind] = route
        self._sync_publish_routes[kind] = sync_publish_route(
            kind, targets, behaviors, scoped=scoped
        )
        return route


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
    mediator = Mediator()
    mediator._sources = settings.sources  # pyright: ignore[reportPrivateUsage]
    wiring = Wiring(injector, fixed={Mediator: mediator})
    chain = _build_behaviors(
        wiring, behaviors, ordered_by_stage=settings.ordered_by_stage
    )
    mediator._behaviors = chain  # pyright: ignore[reportPrivateUsage]
    for info in settings.handlers:
        kind = info.message_type
        factory = wiring.factory(
            info.handler,
            context=(
                f"handler {info.handler.__qualname__} "
                f"(module {info.handler.__module__}) "
                f"for {kind.__qualname__} (module {kind.__module__})"
            ),
        )
        if info.kind is HandlerKind.NOTIFICATION:
            mediator._notification_targets.append((info, factory))  # pyright: ignore[reportPrivateUsage]
            continue
        applicable = [b for b in chain if b.applies(kind)]
        if info.kind is HandlerKind.STREAM:
            applicable = [b for b in applicable if b.handle_stream is not None]
        scoped = factory.scoped or any(b.scoped for b in applicable)
        if info.kind is HandlerKind.STREAM:
            mediator._stream_routes[kind] = stream_route(  # pyright: ignore[reportPrivateUsage]
                info, factory.make, applicable, scoped=scoped
            )
            continue
        mediator._send_routes[kind] = async_route(  # pyright: ignore[reportPrivateUsage]
            info, factory.make, applicable, scoped=scoped, instance=factory.instance
        )
        mediator._sync_routes[kind] = sync_route(  # pyright: ignore[reportPrivateUsage]
            info, factory.make, applicable, scoped=scoped, instance=factory.instance
        )
    for info, _ in mediator._notification_targets:  # pyright: ignore[reportPrivateUsage]
        if info.message_type not in mediator._publish_routes:  # pyright: ignore[reportPrivateUsage]
            mediator._publish_route(info.message_type)  # pyright: ignore[reportPrivateUsage]
    return mediator


def check_single_handlers(handlers: tuple[HandlerInfo, ...]) -> None:
    """One handler per request or stream type; notifications may have many.

    Raises:
        DuplicateHandlerError: Naming the type and both handlers with their modules.
    """
    seen: dict[type[Any], HandlerInfo] = {}
    for info in handlers:
        if info.kind is HandlerKind.NOTIFICATION:
            continue
        first = seen.setdefault(info.message_type, info)
        if first is not info:
            message = info.message_type
            raise DuplicateHandlerError(
                f"{message.__qualname__} (module {message.__module__}) has two "
                f"handlers: {first.handler.__qualname__} (module "
                f"{first.handler.__module__}) and {info.handler.__qualname__} "
                f"(module {info.handler.__module__}); a request type has exactly "
                "one handler, so remove or rename one of them"
            )


def _build_behaviors(
    wiring: Wiring, registered: list[Any], *, ordered_by_stage: bool
) -> list[BehaviorInfo]:
    chain: list[tuple[Stage | None, BehaviorInfo]] = []
    seen: set[type[Any]] = set()
    for entry in registered:
        cls: type[Any] = entry if isinstance(entry, type) else type(entry)
        name = f"{cls.__qualname__} (module {cls.__module__})"
        if cls in seen:
            raise ConfigurationError(
                f"behavior {name} is registered twice; it would run twice per "
                "request. Register it once."
            )
        seen.add(cls)
        if isinstance(entry, type):
            instance, scoped = _instantiate(wiring, entry, name)
        else:
            # A ready instance may hold anything (an injector among them).
            instance, scoped = entry, True
        stage = getattr(instance, "stage", None)
        if ordered_by_stage and not isinstance(stage, Stage):
            raise ConfigurationError(
                f"behavior {name} declares no stage, so use_defaults() cannot "
                "place it: give the class `stage = Stage.<NAME>` or a custom "
                "Stage(value, name)"
            )
        handle = getattr(instance, "handle", None)
        if not inspect.iscoroutinefunction(handle):
            raise ConfigurationError(
                f"behavior {name} must define `async def handle(self, request, next)`; "
                "put synchronous logic in handle_sync"
            )
        handle_stream = getattr(instance, "handle_stream", None)
        if handle_stream is not None and not inspect.isasyncgenfunction(handle_stream):
            raise ConfigurationError(
                f"behavior {name}: handle_stream must be an async generator "
                "(async def with `async for item in next(): yield item`)"
            )
        chain.append(
            (
                stage if isinstance(stage, Stage) else None,
                BehaviorInfo(
                    instance=instance,
                    name=name,
                    handle_sync=getattr(instance, "handle_sync", None),
                    handle_stream=handle_stream,
                    applies_to=getattr(instance, "applies_to", None),
                    scoped=scoped,
                ),
            )
        )
    if ordered_by_stage:
        chain.sort(
            key=lambda pair: pair[0] or Stage(0)
        )  # stable: ties keep registration order
    return [info for _, info in chain]


def _instantiate(wiring: Wiring, cls: type[Any], name: str) -> tuple[Any, bool]:
    factory = wiring.factory(cls, context=f"behavior {name}")
    try:
        return factory.make(), factory.scoped
    except ScopeError as error:
        raise UnresolvableDependencyError(
            f"behavior {name} is built once, with the mediator, but depends on a "
            "request-scoped service; inject ProviderOf[...] (or the Injector) and "
            "ask for it inside handle()"
        ) from error
