"""The route of a notification type: behaviors around delivery to every handler.

The delivery in turn and the chain around it are `mediator._dispatch.chain` (and its
generated sync copy); what is here differs on purpose between the paths:
concurrent delivery, which only the async path has, and what `publish_sync`
refuses.
"""

from __future__ import annotations

import asyncio
from typing import Any

from mediator._core.colour import notify
from mediator._dispatch.chain import (
    NotificationTarget,
    PublishRoute,
    chain_publish,
    deliver_in_turn,
    failed,
)
from mediator._dispatch.chain_sync import (
    SyncPublishRoute,
    chain_publish_sync,
    deliver_in_turn_sync,
)
from mediator._dispatch.routes import BehaviorInfo, describe, refuse, sync_handles

__all__ = [
    "NotificationTarget",
    "PublishRoute",
    "SyncPublishRoute",
    "publish_route",
    "sync_publish_route",
]


def publish_route(
    message_type: type[Any],
    targets: list[NotificationTarget],
    behaviors: list[BehaviorInfo],
    *,
    scoped: bool,
) -> PublishRoute:
    """The route of a notification type: behaviors around delivery to every handler."""
    type_name = message_type.__qualname__
    in_turn = deliver_in_turn(targets, type_name)

    async def deliver(
        notification: Any, concurrent: bool, stop_on_first_failure: bool
    ) -> None:
        if concurrent:
            await _deliver_concurrently(
                notification, targets, type_name, stop_on_first_failure
            )
        else:
            await in_turn(notification, concurrent, stop_on_first_failure)

    handles = [behavior.instance.handle for behavior in behaviors]
    return chain_publish(deliver, handles, scoped=scoped)


async def _deliver_concurrently(
    notification: Any, targets: list[NotificationTarget], type_name: str, stop: bool
) -> None:
    if stop:
        try:
            async with asyncio.TaskGroup() as group:
                for info, make in targets:
                    group.create_task(notify(info, make, notification))
        except ExceptionGroup as failures:
            raise failed(type_name, list(failures.exceptions), len(targets)) from None
        return
    tasks = [
        asyncio.ensure_future(notify(info, make, notification))
        for info, make in targets
    ]
    outcomes = await asyncio.gather(*tasks, return_exceptions=True)
    errors: list[Exception] = []
    for outcome in outcomes:
        if isinstance(outcome, Exception):
            errors.append(outcome)
        elif isinstance(outcome, BaseException):
            raise outcome  # cancellation and exits are never collected or swallowed
    if errors:
        raise failed(type_name, errors, len(targets))


def sync_publish_route(
    message_type: type[Any],
    targets: list[NotificationTarget],
    behaviors: list[BehaviorInfo],
    *,
    scoped: bool,
) -> SyncPublishRoute:
    """The `publish_sync` route; refuses on use if a handler or behavior is async.

    It takes ``concurrent`` as the async route does, and ignores it.
    """
    type_name = message_type.__qualname__
    for info, _ in targets:
        if info.is_async:
            return refuse(
                f"{describe(info.handler)} handles {type_name} with async def, so "
                "publish_sync cannot run it: await mediator.publish(...) instead, "
                "or make handle() a plain def"
            )
    handles = sync_handles(behaviors)
    if isinstance(handles, BehaviorInfo):
        return refuse(
            f"behavior {handles.name} applies to {type_name} but has no "
            "handle_sync, so publish_sync cannot run it"
        )
    return chain_publish_sync(
        deliver_in_turn_sync(targets, type_name), handles, scoped=scoped
    )
