"""Composes the route of one message type: its behaviors around its handler.

Everything here runs once per message type, when the mediator is built. What
it returns is a chain of plain closures: a send looks the route up by type and
calls it, with no per-send decisions left to make. The chain itself is
`mediator._dispatch.chain` (and its generated sync copy); what is here differs on
purpose between the paths: how the handler is called, and what `send_sync`
refuses.
"""

from __future__ import annotations

from collections.abc import (
    AsyncIterator,
    Awaitable,
    Callable,
)
from dataclasses import dataclass
from typing import Any, NoReturn

from mediator._core.errors import SyncPathError
from mediator._core.handlers import CallStyle, HandlerInfo
from mediator._core.threads import build_and_handle, in_thread
from mediator._dispatch.chain import AsyncRoute, chain
from mediator._dispatch.chain_sync import SyncHandle, SyncRoute, chain_sync

__all__ = [
    "AsyncRoute",
    "BehaviorInfo",
    "SendParts",
    "SyncRoute",
    "describe",
    "refuse",
]


@dataclass(frozen=True, slots=True)
class BehaviorInfo:
    """One behavior instance with the optional parts it was found to have."""

    instance: Any
    name: str
    handle_sync: Callable[[Any, Callable[[], Any]], Any] | None
    handle_stream: (
        Callable[[Any, Callable[[], AsyncIterator[Any]]], AsyncIterator[Any]] | None
    )
    applies_to: Callable[[type[Any]], bool] | None
    scoped: bool  # it may reach request-scoped services: sends through it open a scope

    def applies(self, message_type: type[Any]) -> bool:
        """Whether the behavior wraps `message_type`; asked once per type."""
        return self.applies_to is None or bool(self.applies_to(message_type))


# --- send ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SendParts:
    """What the routes of one request type are made of, on either path.

    Attributes:
        info: The request type's handler.
        make: Builds the handler.
        behaviors: The behaviors that apply to the type, outermost first.
        scoped: Whether a send opens a request scope.
        instance: The handler, when it is a singleton built already.
    """

    info: HandlerInfo
    make: Callable[[], Any]
    behaviors: list[BehaviorInfo]
    scoped: bool
    instance: Any = None

    def async_route(self) -> AsyncRoute:
        """The async route of the request type: behaviors, outermost first, around it.

        A singleton handler built already is called through its bound method. A
        plain-def handler is built and called in a worker thread
        (`mediator._core.threads`), so it never blocks the event loop; behaviors
        stay on the loop, and a behavior with a ``handle_threaded``
        (`TransactionBehavior`) wraps it with that instead of ``handle``.
        """
        info, make, behaviors = self.info, self.make, self.behaviors
        scoped, instance = self.scoped, self.instance
        if info.style is not CallStyle.SYNC:

            def call_async(request: Any) -> Awaitable[Any]:
                return make().handle(request)  # type: ignore[no-any-return]

            route: AsyncRoute = call_async if instance is None else instance.handle
            return chain(route, [b.instance.handle for b in behaviors], scoped=scoped)

        if instance is None:

            def call_in_thread(request: Any) -> Awaitable[Any]:
                return in_thread(build_and_handle, make, request)

            route = call_in_thread
        else:
            handle = instance.handle

            def call_singleton_in_thread(request: Any) -> Awaitable[Any]:
                return in_thread(handle, request)

            route = call_singleton_in_thread
        handles = [
            getattr(b.instance, "handle_threaded", None) or b.instance.handle
            for b in behaviors
        ]
        return chain(route, handles, scoped=scoped)

    def sync_route(self) -> SyncRoute:
        """The `send_sync` route; it raises `SyncPathError` if a part is async only."""
        info, make, instance = self.info, self.make, self.instance
        if info.is_async:
            return refuse(
                f"{describe(info.handler)} handles {info.message_type.__qualname__} "
                "with async def, so send_sync cannot run it: await "
                "mediator.send(...) instead, or make handle() a plain def"
            )
        handles = sync_handles(self.behaviors)
        if isinstance(handles, BehaviorInfo):
            return refuse(
                f"behavior {handles.name} applies to {info.message_type.__qualname__} "
                "but has no handle_sync, so send_sync cannot run it: await "
                "mediator.send(...) instead, or give the behavior a handle_sync"
            )

        def call(request: Any) -> Any:
            return make().handle(request)

        route: SyncRoute = call if instance is None else instance.handle
        return chain_sync(route, handles, scoped=self.scoped)


def sync_handles(behaviors: list[BehaviorInfo]) -> list[SyncHandle] | BehaviorInfo:
    """Each behavior's ``handle_sync``, outermost first; or the first without one."""
    handles: list[SyncHandle] = []
    for behavior in behaviors:
        if behavior.handle_sync is None:
            return behavior
        handles.append(behavior.handle_sync)
    return handles


def refuse(message: str) -> Callable[..., NoReturn]:
    def refuse(*_: Any) -> NoReturn:
        raise SyncPathError(message)

    return refuse


def describe(cls: type[Any]) -> str:
    return f"{cls.__qualname__} (module {cls.__module__})"
