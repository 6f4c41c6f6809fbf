"""Publishing: every handler runs, failures come together, cancellation passes."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from mediator import Notification, NotificationHandler, SyncPathError
from tests.mediator._support.support import Journal, build

pytestmark = pytest.mark.anyio

LOG: list[str] = []


class OrderPlaced(Notification):
    order: str


class Shipped(OrderPlaced):
    """A subclass: handlers of OrderPlaced receive it too."""


class Email(NotificationHandler[OrderPlaced]):
    async def handle(self, notification: OrderPlaced) -> None:
        LOG.append(f"email {notification.order}")


class Fails(NotificationHandler[OrderPlaced]):
    async def handle(self, notification: OrderPlaced) -> None:
        LOG.append("fails")
        raise RuntimeError(f"smtp down for {notification.order}")


class AlsoFails(NotificationHandler[OrderPlaced]):
    def handle(self, notification: OrderPlaced) -> None:
        LOG.append("also fails")
        raise KeyError("no template")


class Audit(NotificationHandler[OrderPlaced]):
    def handle(self, notification: OrderPlaced) -> None:
        LOG.append(f"audit {notification.order}")


class ShippedOnly(NotificationHandler[Shipped]):
    async def handle(self, notification: Shipped) -> None:
        LOG.append(f"shipped {notification.order}")


@pytest.fixture(autouse=True)
def _clear_log() -> None:
    LOG.clear()


async def test_sequential_delivery_runs_every_handler_in_registration_order() -> None:
    mediator = build(lambda m: m.add_handler(Email, Audit))

    await mediator.publish(OrderPlaced(order="o1"))

    assert LOG == ["email o1", "audit o1"]


async def test_handlers_of_base_notifications_receive_subclasses() -> None:
    mediator = build(lambda m: m.add_handler(Email, ShippedOnly))

    await mediator.publish(Shipped(order="o2"))
    await mediator.publish(OrderPlaced(order="o3"))

    assert LOG == ["email o2", "shipped o2", "email o3"]


async def test_a_notification_without_handlers_reaches_nobody() -> None:
    class Nobody(Notification):
        pass

    mediator = build(lambda m: m.add_handler(Email))

    await mediator.publish(Nobody())
    build(lambda m: None).publish_sync(Nobody())

    assert LOG == []


@pytest.mark.parametrize("concurrent", [False, True])
async def test_one_failure_still_runs_every_handler_and_raises_a_group(
    concurrent: bool,
) -> None:
    mediator = build(lambda m: m.add_handler(Fails, Email, Audit))

    with pytest.raises(ExceptionGroup) as caught:
        await mediator.publish(OrderPlaced(order="o4"), concurrent=concurrent)

    assert sorted(LOG) == ["audit o4", "email o4", "fails"]
    assert [str(e) for e in caught.value.exceptions] == ["smtp down for o4"]
    assert str(caught.value).startswith("1 of 3 handlers of OrderPlaced failed")


@pytest.mark.parametrize("concurrent", [False, True])
async def test_several_failures_are_raised_together_for_except_star(
    concurrent: bool,
) -> None:
    mediator = build(lambda m: m.add_handler(Fails, Email, AlsoFails))
    caught: list[type[BaseException]] = []

    try:
        await mediator.publish(OrderPlaced(order="o5"), concurrent=concurrent)
    except* RuntimeError as group:
        caught.extend(type(e) for e in group.exceptions)
    except* KeyError as group:
        caught.extend(type(e) for e in group.exceptions)

    assert sorted(c.__name__ for c in caught) == ["KeyError", "RuntimeError"]
    assert "email o5" in LOG


async def test_stop_on_first_failure_skips_the_rest_in_turn() -> None:
    mediator = build(lambda m: m.add_handler(Email, Fails, Audit))

    with pytest.raises(ExceptionGroup) as caught:
        await mediator.publish(OrderPlaced(order="o6"), stop_on_first_failure=True)

    assert LOG == ["email o6", "fails"]
    assert [type(e) for e in caught.value.exceptions] == [RuntimeError]


async def test_stop_on_first_failure_concurrently_cancels_the_others() -> None:
    started = asyncio.Event()
    cancelled: list[bool] = []

    class Slow(NotificationHandler[OrderPlaced]):
        async def handle(self, notification: OrderPlaced) -> None:
            started.set()
            try:
                await asyncio.Event().wait()  # never set: only cancellation ends it
            except asyncio.CancelledError:
                cancelled.append(True)
                raise

    class FailsAfterStart(NotificationHandler[OrderPlaced]):
        async def handle(self, notification: OrderPlaced) -> None:
            await started.wait()
            raise RuntimeError("late failure")

    mediator = build(lambda m: m.add_handler(Slow, FailsAfterStart))

    with pytest.raises(ExceptionGroup) as caught:
        await mediator.publish(
            OrderPlaced(order="o7"), concurrent=True, stop_on_first_failure=True
        )

    assert cancelled == [True]
    assert [str(e) for e in caught.value.exceptions] == ["late failure"]


async def test_concurrent_delivery_really_overlaps() -> None:
    both_inside = asyncio.Barrier(2)

    class Meets(NotificationHandler[OrderPlaced]):
        async def handle(self, notification: OrderPlaced) -> None:
            await both_inside.wait()  # would hang if run one after another
            LOG.append("met")

    class MeetsToo(Meets):
        pass

    mediator = build(lambda m: m.add_handler(Meets, MeetsToo))

    async with asyncio.timeout(5):
        await mediator.publish(OrderPlaced(order="o8"), concurrent=True)

    assert LOG == ["met", "met"]


@pytest.mark.parametrize("concurrent", [False, True])
async def test_cancellation_is_never_collected(concurrent: bool) -> None:
    class Cancels(NotificationHandler[OrderPlaced]):
        async def handle(self, notification: OrderPlaced) -> None:
            raise asyncio.CancelledError

    mediator = build(lambda m: m.add_handler(Cancels, Email))

    with pytest.raises(asyncio.CancelledError):
        await mediator.publish(OrderPlaced(order="o9"), concurrent=concurrent)


async def test_cancelling_a_publish_cancels_its_handlers() -> None:
    entered = asyncio.Event()
    cancelled: list[str] = []

    class Waits(NotificationHandler[OrderPlaced]):
        async def handle(self, notification: OrderPlaced) -> None:
            entered.set()
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                cancelled.append("waits")
                raise

    mediator = build(lambda m: m.add_handler(Waits))
    task = asyncio.create_task(
        mediator.publish(OrderPlaced(order="o10"), concurrent=True)
    )
    await entered.wait()
    task.cancel()

    with pytest.raises(asyncio.CancelledError):
        await task
    assert cancelled == ["waits"]


def test_publish_sync_runs_plain_handlers_and_groups_failures() -> None:
    mediator = build(lambda m: m.add_handler(Audit, AlsoFails))

    with pytest.raises(ExceptionGroup) as caught:
        mediator.publish_sync(OrderPlaced(order="o11"))

    assert LOG == ["audit o11", "also fails"]
    assert [type(e) for e in caught.value.exceptions] == [KeyError]

    LOG.clear()
    reordered = build(lambda m: m.add_handler(AlsoFails, Audit))
    with pytest.raises(ExceptionGroup):
        reordered.publish_sync(OrderPlaced(order="o12"), stop_on_first_failure=True)
    assert LOG == ["also fails"]


def test_publish_sync_refuses_an_async_handler_by_name() -> None:
    mediator = build(lambda m: m.add_handler(Audit, Email))

    with pytest.raises(
        SyncPathError, match=r"Email \(module tests\.mediator\.test_publish\)"
    ):
        mediator.publish_sync(OrderPlaced(order="o13"))
    assert LOG == []  # refused before any handler ran


async def test_behaviors_wrap_the_whole_delivery_once() -> None:
    journal = Journal()

    class Around:
        async def handle(self, notification: Any, next: Any) -> Any:
            journal.add("around>")
            await next()
            journal.add("<around")

    mediator = build(lambda m: m.add_handler(Email, Audit).add_behavior(Around))

    await mediator.publish(OrderPlaced(order="o14"))

    assert journal.entries == ["around>", "<around"]
    assert LOG == ["email o14", "audit o14"]


async def test_stop_on_first_failure_concurrently_without_failures_runs_all() -> None:
    mediator = build(lambda m: m.add_handler(Email, Audit))

    await mediator.publish(
        OrderPlaced(order="o15"), concurrent=True, stop_on_first_failure=True
    )

    assert sorted(LOG) == ["audit o15", "email o15"]


def test_publish_sync_refuses_an_async_only_behavior_by_name() -> None:
    class AsyncOnly:
        async def handle(self, notification: Any, next: Any) -> Any:
            return await next()

    mediator = build(lambda m: m.add_handler(Audit).add_behavior(AsyncOnly))

    with pytest.raises(
        SyncPathError,
        match=r"AsyncOnly \(module .*\) applies to OrderPlaced but has no handle_sync",
    ):
        mediator.publish_sync(OrderPlaced(order="o16"))


async def test_publish_routes_are_compiled_when_the_mediator_is_built() -> None:
    asked: list[type[Any]] = []

    class Watching:
        def applies_to(self, message_type: type[Any]) -> bool:
            asked.append(message_type)
            return True

        async def handle(self, notification: Any, next: Any) -> Any:
            return await next()

        def handle_sync(self, notification: Any, next: Any) -> Any:
            return next()

    mediator = build(lambda m: m.add_handler(Email, ShippedOnly).add_behavior(Watching))
    at_build = list(asked)

    await mediator.publish(OrderPlaced(order="o16"))
    with pytest.raises(SyncPathError):  # its handlers are async
        mediator.publish_sync(Shipped(order="o17"))

    # Both handled types, each for publish and publish_sync, and nothing later.
    assert sorted(t.__name__ for t in at_build) == [
        "OrderPlaced",
        "OrderPlaced",
        "Shipped",
        "Shipped",
    ]
    assert asked == at_build
    assert LOG == ["email o16"]
    LOG.clear()

    # A subclass nobody handles by name reaches its bases' handlers, as before.
    class Express(Shipped):
        pass

    await mediator.publish(Express(order="o18"))
    assert LOG == ["email o18", "shipped o18"]
