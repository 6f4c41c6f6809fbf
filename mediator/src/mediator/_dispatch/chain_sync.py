# Generated from chain.py by tools/unasync.py; do not edit.
# Edit the async source and run `python tools/unasync.py`.
"""The parts every send and publish route is made of, on the sync path.

Each behavior's handle wraps the rest of the route, and a route that may
reach request-scoped services runs inside a scope. Everything here runs once
per message type, when the mediator is built, except the closures it returns.

What differs on purpose between the paths (the call of a handler, the
refusals of `send_sync`) is written by hand in `mediator._dispatch.routes` and
`mediator._dispatch.publish`.

This sync copy is generated from `chain` by
``tools/unasync.py``: edit that one and run the script.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from typing import Any, TypeVar

from mediator._core.colour import SyncAny, SyncNone, notify_sync
from mediator._core.handlers import HandlerInfo
from mediator._core.scope import enter_scope

__all__ = [
    "NotificationTarget",
    "SyncHandle",
    "SyncPublishRoute",
    "SyncRoute",
    "chain_publish_sync",
    "chain_sync",
    "deliver_in_turn_sync",
    "failed",
]

SyncRoute = Callable[[Any], SyncAny]
"""A send route: from the request to its response."""

SyncHandle = Callable[[Any, Any], SyncAny]
"""A behavior's ``handle(message, next)``."""

SyncPublishRoute = Callable[[Any, bool, bool], SyncNone]
"""A publish route: ``(notification, concurrent, stop_on_first_failure)``."""

NotificationTarget = tuple[HandlerInfo, Callable[[], Any]]

R = TypeVar("R")


def _wrapped(
    route: R,
    handles: Sequence[SyncHandle],
    step: Callable[[SyncHandle, R], R],
    scope: Callable[[R], R] | None,
) -> R:
    """`route` inside each of `handles`, outermost first, then inside `scope`."""
    for handle in reversed(handles):
        route = step(handle, route)
    return route if scope is None else scope(route)


# --- send ----------------------------------------------------------------------


def chain_sync(
    route: SyncRoute, handles: Sequence[SyncHandle], *, scoped: bool
) -> SyncRoute:
    """`route` inside each of `handles`, outermost first; inside a scope if `scoped`."""
    return _wrapped(route, handles, _step, _scoped if scoped else None)


def _step(handle: SyncHandle, inner: SyncRoute) -> SyncRoute:
    def step(
        request: Any, handle: SyncHandle = handle, inner: SyncRoute = inner
    ) -> SyncAny:
        # partial(), not a lambda: it is cheaper to create, and one is made per step.
        # The defaults make them locals: faster to reach than the closure's cells.
        return handle(request, partial(inner, request))

    return step


def _scoped(inner: SyncRoute) -> SyncRoute:
    def run(request: Any) -> Any:
        with enter_scope():
            return inner(request)

    return run


# --- publish -------------------------------------------------------------------


def chain_publish_sync(
    route: SyncPublishRoute, handles: Sequence[SyncHandle], *, scoped: bool
) -> SyncPublishRoute:
    """`route` inside each of `handles`, outermost first; inside a scope if `scoped`."""
    return _wrapped(route, handles, _publish_step, _scoped_publish if scoped else None)


def _publish_step(handle: SyncHandle, inner: SyncPublishRoute) -> SyncPublishRoute:
    def step(notification: Any, concurrent: bool, stop: bool) -> SyncAny:
        return handle(notification, partial(inner, notification, concurrent, stop))

    return step


def _scoped_publish(inner: SyncPublishRoute) -> SyncPublishRoute:
    def run(notification: Any, concurrent: bool, stop: bool) -> None:
        with enter_scope():
            inner(notification, concurrent, stop)

    return run


def deliver_in_turn_sync(
    targets: list[NotificationTarget], type_name: str
) -> SyncPublishRoute:
    """Delivery to each of `targets` in turn, keeping every failure (`failed`).

    With ``stop`` it stops at the first failure. ``concurrent`` is the caller's
    to act on: this route runs the handlers one after another.
    """

    def deliver(notification: Any, concurrent: bool, stop: bool) -> None:
        errors: list[Exception] = []
        for info, make in targets:
            try:
                notify_sync(info, make, notification)
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
