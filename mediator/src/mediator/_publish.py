"""The route of a notification type: behaviors around delivery to every handler."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from mediator._handlers import CallStyle, HandlerInfo
from mediator._routes import BehaviorInfo, describe, refuse
from mediator._scope import enter_scope

__all__ = [
    "NotificationTarget",
    "PublishRoute",
    "SyncPublishRoute",
    "publish_route",
    "sync_publish_route",
]

PublishRoute = Callable[[Any, bool, bool], Awaitable[None]]
SyncPublishRoute = Callable[[Any, bool], None]
NotificationTarget = tuple[HandlerInfo, Callable[[], Any]]


def publish_route(
    message_type: type[Any],
    targets: list[NotificationTarget],
    behaviors: list[BehaviorInfo],
    *,
    scoped: bool,
) -> PublishRoute:
    """The route of a notification type: behaviors around delivery to every handler."""
    type_name = message_type.__qualname__

    async def deliver(
        notification: Any, concurrent: bool, stop_on_first_failure: bool
    ) -> None:
        if concurrent:
            await _deliver_concurrently(
                notification, targets, type_name, stop_on_first_failure
            )
        else:
            await _deliver_in_turn(
                notification, targets, type_name, stop_on_first_failure
            )

    route: PublishRoute = deliver
    for behavior in reversed(behaviors):
        route = _wrap_publish(behavior.instance.handle, route)
    if not scoped:
        return route

    async def run(notification: Any, concurrent: bool, stop: bool) -> None:
        async with enter_scope():
            await route(notification, concurrent, stop)

    return run


def _wrap_publish(
    handle: Callable[[Any, Any], Awaitable[Any]], inner: PublishRoute
) -> PublishRoute:
    def step(notification: Any, concurrent: bool, stop: bool) -> Awaitable[None]:
        return handle(notification, lambda: inner(notification, concurrent, stop))

    return step


def _failed(
    type_name: str, errors: list[Exception], total: int
) -> ExceptionGroup[Exception]:
    return ExceptionGroup(
        f"{len(errors)} of {total} handlers of {type_name} failed", errors
    )


async def _deliver_in_turn(
    notification: Any, targets: list[NotificationTarget], type_name: str, stop: bool
) -> None:
    errors: list[Exception] = []
    for info, make in targets:
        try:
            result = make().handle(notification)
            if info.style is CallStyle.ASYNC:
                await result
        except (
            Exception
        ) as error:  # every failure is kept; BaseException passes through
            errors.append(error)
            if stop:
                break
    if errors:
        raise _failed(type_name, errors, len(targets))


async def _call(info: HandlerInfo, make: Callable[[], Any], notification: Any) -> None:
    result = make().handle(notification)
    if info.style is CallStyle.ASYNC:
        await result


async def _deliver_concurrently(
    notification: Any, targets: list[NotificationTarget], type_name: str, stop: bool
) -> None:
    if stop:
        try:
            async with asyncio.TaskGroup() as group:
                for info, make in targets:
                    group.create_task(_call(info, make, notification))
        except ExceptionGroup as failures:
            raise _failed(type_name, list(failures.exceptions), len(targets)) from None
        return
    tasks = [
        asyncio.ensure_future(_call(info, make, notification)) for info, make in targets
    ]
    outcomes = await asyncio.gather(*tasks, return_exceptions=True)
    errors: list[Exception] = []
    for outcome in outcomes:
        if isinstance(outcome, Exception):
            errors.append(outcome)
        elif isinstance(outcome, BaseException):
            raise outcome  # cancellation and exits are never collected or swallowed
    if errors:
        raise _failed(type_name, errors, len(targets))


def sync_publish_route(
    message_type: type[Any],
    targets: list[NotificationTarget],
    behaviors: list[BehaviorInfo],
    *,
    scoped: bool,
) -> SyncPublishRoute:
    """The `publish_sync` route; refuses on use if a handler or behavior is async."""
    type_name = message_type.__qualname__
    for info, _ in targets:
        if info.is_async:
            return refuse(
                f"{describe(info.handler)} handles {type_name} with async def, so "
                "publish_sync cannot run it: await mediator.publish(...) instead, "
                "or make handle() a plain def"
            )
    for behavior in behaviors:
        if behavior.handle_sync is None:
            return refuse(
                f"behavior {behavior.name} applies to {type_name} but has no "
                "handle_sync, so publish_sync cannot run it"
            )

    def deliver(notification: Any, stop: bool) -> None:
        errors: list[Exception] = []
        for _, make in targets:
            try:
                make().handle(notification)
            except Exception as error:
                errors.append(error)
                if stop:
                    break
        if errors:
            raise _failed(type_name, errors, len(targets))

    route: SyncPublishRoute = deliver
    for behavior in reversed(behaviors):
        route = _wrap_sync_publish(behavior.handle_sync, route)  # type: ignore[arg-type]
    if not scoped:
        return route

    def run(notification: Any, stop: bool) -> None:
        with enter_scope():
            route(notification, stop)

    return run


def _wrap_sync_publish(
    handle: Callable[[Any, Callable[[], Any]], Any], inner: SyncPublishRoute
) -> SyncPublishRoute:
    def step(notification: Any, stop: bool) -> None:
        handle(notification, lambda: inner(notification, stop))

    return step
