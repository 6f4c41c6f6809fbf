"""The route compiler: every route of a mediator, compiled once, when it is built.

`build_mediator` hands it the handlers and the behaviors; it checks them, works
out each handler's factory and the behaviors that apply to each message type,
and composes the send, send_sync, stream, publish and publish_sync routes into
a `Routes`. The `Mediator` only looks routes up in those tables and calls them.
"""

from __future__ import annotations

import gc
import inspect
import threading
from collections.abc import Callable, Generator, Iterable
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Final, TypeVar

from mediator._core.errors import (
    ConfigurationError,
    DuplicateHandlerError,
    ScopeError,
    UnresolvableDependencyError,
)
from mediator._core.handlers import HandlerInfo, HandlerKind
from mediator._core.stage import Stage
from mediator._core.wiring import Factory, Wiring
from mediator._dispatch.publish import (
    NotificationTarget,
    PublishRoute,
    SyncPublishRoute,
    publish_route,
    sync_publish_route,
)
from mediator._dispatch.requirements import NeedsCheck, check_outbox_use
from mediator._dispatch.routes import (
    AsyncRoute,
    BehaviorInfo,
    SendParts,
    SyncRoute,
)
from mediator._dispatch.streams import StreamRoute, stream_route

__all__ = [
    "OWN_SCOPE",
    "RouteCompiler",
    "RouteTable",
    "Routes",
    "check_single_handlers",
    "collector_paused",
    "compile_behaviors",
]

V = TypeVar("V")

OWN_SCOPE: Final = "enters_own_scope"
"""A behavior's class attribute: True when it enters the request scope itself.

Such a behavior holds the `Wiring` (so it could reach request-scoped services
at any time) but only builds what needs the scope inside an `enter_scope` of
its own; a send through it opens no scope for it.
"""


_pause_lock = threading.Lock()
_pauses = 0  # builds running now, in any thread
_resume = False  # whether the collector was on when the first of them started


@contextmanager
def collector_paused() -> Generator[None, None, None]:
    """Hold off the cyclic garbage collector while routes are compiled.

    A build allocates a few dozen long-lived objects per message type (closures,
    factories, routes) and almost no garbage. Left on, the collector would run
    every few hundred allocations, and every so often walk the whole heap: in a
    large application mostly the request models' pydantic schemas, again and
    again (more than half the cost of building 10,000 types). Once the build
    ends, the collector is as it was before the first build that is still
    running started, and it sees the new objects once, as young ones.
    """
    global _pauses, _resume
    with _pause_lock:
        if _pauses == 0:
            _resume = gc.isenabled()
            gc.disable()
        _pauses += 1
    try:
        yield
    finally:
        with _pause_lock:
            _pauses -= 1
            if _pauses == 0 and _resume:
                gc.enable()


class RouteTable(dict[type[Any], V]):
    """Routes by message type, with a compiler for the types not compiled at build.

    Only publish has such types: a notification may be a subclass nobody
    registered a handler for (its bases' handlers receive it), or a type with
    no handler at all (delivered to nobody, through the behaviors that apply).
    Its route is compiled on its first publish and kept.
    """

    __slots__ = ("_compile",)

    def __init__(self, compile: Callable[[type[Any]], V]) -> None:
        super().__init__()
        self._compile = compile

    def __missing__(self, kind: type[Any]) -> V:
        route = self[kind] = self._compile(kind)
        return route


@dataclass(frozen=True, slots=True, eq=False)
class Routes:
    """The tables a `Mediator` dispatches from, one per entry point."""

    sources: tuple[str, ...]
    send: dict[type[Any], AsyncRoute]
    send_sync: dict[type[Any], SyncRoute]
    stream: dict[type[Any], StreamRoute]
    publish: RouteTable[PublishRoute]
    publish_sync: RouteTable[SyncPublishRoute]


class RouteCompiler:
    """Compiles every route of one mediator into `routes`.

    The tables exist from the start, empty, so the mediator can be made first
    and given them: handlers and behaviors may depend on the mediator itself.
    `compile` fills them before `build_mediator` hands the mediator out.
    """

    def __init__(self, sources: tuple[str, ...]) -> None:
        self._chain: list[BehaviorInfo] = []
        self._targets: list[tuple[HandlerInfo, Factory]] = []
        self.routes = Routes(
            sources,
            send={},
            send_sync={},
            stream={},
            publish=RouteTable(self.publish_route),
            publish_sync=RouteTable(self.sync_publish_route),
        )

    def compile(
        self,
        wiring: Wiring,
        handlers: Iterable[HandlerInfo],
        behaviors: Iterable[Any],
        *,
        ordered_by_stage: bool,
    ) -> None:
        """Build the chain and compile the route of every message type of `handlers`.

        Raises:
            UnresolvableDependencyError: A handler or behavior cannot be built,
                or needs a service only a module provides and no module bound.
            ConfigurationError: A behavior is malformed, or a request carries a
                marker (``@retryable``, ``@transactional``, ...) whose behavior
                is not in its chain.
        """
        self._chain = chain = compile_behaviors(
            wiring, behaviors, ordered_by_stage=ordered_by_stage
        )
        routes = self.routes
        needs = NeedsCheck(chain)
        notification_types: dict[type[Any], None] = {}
        for info in handlers:
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
                self._targets.append((info, factory))
                notification_types[kind] = None
                continue
            applicable = [b for b in chain if b.applies(kind)]
            if info.kind is HandlerKind.STREAM:
                applicable = [b for b in applicable if b.handle_stream is not None]
                scoped = factory.scoped or any(b.scoped for b in applicable)
                routes.stream[kind] = stream_route(
                    info, factory.make, applicable, scoped=scoped
                )
                continue
            needs.check(kind, applicable)
            check_outbox_use(info.handler, kind)
            scoped = factory.scoped or any(b.scoped for b in applicable)
            parts = SendParts(info, factory.make, applicable, scoped, factory.instance)
            routes.send[kind] = parts.async_route()
            routes.send_sync[kind] = parts.sync_route()
        for kind in notification_types:
            routes.publish[kind] = self.publish_route(kind)
            routes.publish_sync[kind] = self.sync_publish_route(kind)

    def publish_route(self, kind: type[Any]) -> PublishRoute:
        """The `publish` route of a notification type (and of its subclasses' bases)."""
        targets, behaviors, scoped = self._publish_parts(kind)
        return publish_route(kind, targets, behaviors, scoped=scoped)

    def sync_publish_route(self, kind: type[Any]) -> SyncPublishRoute:
        """The `publish_sync` route of a notification type."""
        targets, behaviors, scoped = self._publish_parts(kind)
        return sync_publish_route(kind, targets, behaviors, scoped=scoped)

    def _publish_parts(
        self, kind: type[Any]
    ) -> tuple[list[NotificationTarget], list[BehaviorInfo], bool]:
        targets: list[NotificationTarget] = []
        scoped = False
        for info, factory in self._targets:
            if issubclass(kind, info.message_type):
                targets.append((info, factory.make))
                scoped = scoped or factory.scoped
        behaviors = [b for b in self._chain if b.applies(kind)]
        scoped = scoped or any(b.scoped for b in behaviors)
        return targets, behaviors, scoped


def check_single_handlers(handlers: Iterable[HandlerInfo]) -> None:
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


def compile_behaviors(
    wiring: Wiring, registered: Iterable[Any], *, ordered_by_stage: bool
) -> list[BehaviorInfo]:
    """Build and check every behavior; the chain, outermost first.

    Raises:
        ConfigurationError: A behavior is malformed (no stage, sync `handle`,
            registered twice).
        UnresolvableDependencyError: A behavior cannot be built.
    """
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
        if getattr(instance, OWN_SCOPE, False) is True:
            # It reaches request-scoped services only inside a scope it enters
            # itself (`FallbackBehavior`, for its fallback handler): its
            # routes need not open one per send for it.
            scoped = False
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
