"""The parts every send and publish route is made of, on the async path.

Each behavior's handle wraps the rest of the route, and a route that may
reach request-scoped services runs inside a scope. Everything here runs once
per message type, when the mediator is built, except the closures it returns.

What differs on purpose between the paths (the call of a handler, the
refusals of `send_sync`) is written by hand in `mediator._dispatch.routes` and
`mediator._dispatch.publish`.

The sync copy, `chain_sync`, is generated from this module by
``tools/unasync.py``: edit this one and run the script.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from typing import Any, TypeVar

from mediator._core.colour import AsyncAny, AsyncNone, notify
from mediator._core.handlers import HandlerInfo
from mediator._core.scope import enter_scope

__all__ = [
    "AsyncHandle",
    "AsyncRoute",
    "NotificationTarget",
    "PublishRoute",
    "chain",
    "chain_publish",
    "deliver_in_turn",
    "failed",
]

AsyncRoute = Callable[[Any], AsyncAny]
"""A send route: from the request to its response."""

AsyncHandle = Callable[[Any, Any], AsyncAny]
"""A behavior's ``handle(message, next)``."""

PublishRoute = Callable[[Any, bool, bool], AsyncNone]
"""A publish route: ``(notification, concurrent, stop_on_first_failure)``."""

NotificationTarget = tuple[HandlerInfo, Callable[[], Any]]

R = TypeVar("R")


def _wrapped(
    route: R,
    handles: Sequence[AsyncHandle],
    step: Callable[[AsyncHandle, R], R],
    scope: Callable[[R], R] | None,
) -> R:
    """`route` inside each of `handles`, outermost first, then inside `scope`."""
    for handle in reversed(handles):
        route = step(handle, route)
    return route if scope is None else scope(route)


# --- send ----------------------------------------------------------------------


def chain(
    route: AsyncRoute, handles: Sequence[AsyncHandle], *, scoped: bool
) -> AsyncRoute:
    """`route` inside each of `handles`, outermost first; inside a scope if `scoped`."""
    return _wrapped(route, handles, _step, _scoped if scoped else None)


def _step(handle: AsyncHandle, inner: AsyncRoute) -> AsyncRoute:
    def step(
        request: Any, handle: AsyncHandle = handle, inner: AsyncRoute = inner
    ) -> AsyncAny:
        # partial(), not a lambda: it is cheaper to create, and one is made per step.
        # The defaults make them locals: faster to reach than the closure's cells.
        return handle(request, partial(inner, request))

    return step


def _scoped(inner: AsyncRoute) -> AsyncRoute:
    async def run(request: Any) -> Any:
        async with enter_scope():
            return await inner(request)

    return run


# --- publish -------------------------------------------------------------------


def chain_publish(
    route: PublishRoute, handles: Sequence[AsyncHandle], *, scoped: bool
) -> PublishRoute:
    """`route` inside each of `handles`, outermost first; inside a scope if `scoped`."""
    return _wrapped(route, handles, _publish_step, _scoped_publish if scoped else None)


def _publish_step(handle: AsyncHandle, inner: PublishRoute) -> PublishRoute:
    def step(notification: Any, concurrent: bool, stop: bool) -> AsyncAny:
        return handle(notification, partial(inner, notification, concurrent, stop))

    return step


def _scoped_publish(inner: PublishRoute) -> PublishRoute:
    async def run(notification: Any, concurrent: bool, stop: bool) -> None:
        async with enter_scope():
            await inner(notification, concurrent, stop)

    return run


def deliver_in_turn(targets: list[NotificationTarget], type_name: str) -> PublishRoute:
    """Delivery to each of `targets` in turn, keeping every failure (`failed`).

    With ``stop`` it stops at the first failure. ``concurrent`` is the caller's
    to act on: this route runs the handlers one after another.
    """

    async def deliver(notification: Any, concurrent: bool, stop: bool) -> None:
        errors: list[Exception] = []
        for info, make in targets:
            try:
                await notify(info, make, notification)
            except Exception as error:  # every one is kept; BaseException passes
                errors.append(error)
                if stop:
                    break
        if errors:
            raise failed(type_name, errors, len(targets))

    return deliver


def failed(
    type_name: str, errors: list[Exception], total: int
) -> ExceptionGroup[Exception]:
    """The failure of a publish: every handler failure, in one group."""
    return ExceptionGroup(
        f"{len(errors)} of {total} handlers of {type_name} failed", errors
    )
