"""At most `THREAD_LIMIT` worker threads are busy at once; the next send waits.

The limit is lowered for a test by giving `mediator._core.threads` a fresh set of
slots. Nothing here measures time: handlers block on events the test sets,
and the queue of the slots says who waits. A send that waits for a thread it
can never get would hang: the waits are bounded (`WAIT`), so a broken limit
fails the test instead.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable

import pytest
from anyio.lowlevel import checkpoint
from injector import inject

from mediator import (
    Command,
    CommandHandler,
    Mediator,
    Notification,
    NotificationHandler,
    Query,
    QueryHandler,
    request_scope,
)
from mediator._core import threads as _threads
from mediator._core.threads import MAX_IDLE_LANES, THREAD_LIMIT, Slots
from tests.mediator._support.support import build

pytestmark = pytest.mark.anyio

WAIT = 30.0  # seconds anything waits: generous, on a busy machine


@pytest.fixture
def limit(monkeypatch: pytest.MonkeyPatch) -> Callable[[int], Slots]:
    """Lowers the limit for one test: the lanes it starts take these slots."""

    def lower(to: int) -> Slots:
        slots = Slots(to)
        monkeypatch.setattr(_threads, "_slots", slots)
        return slots

    return lower


class Room:
    """Who is inside the handler; each stays until the test lets it out."""

    def __init__(self) -> None:
        self.changed = threading.Condition()
        self.inside: set[str] = set()
        self.entered: list[str] = []
        self.most = 0
        self.leave: dict[str, threading.Event] = {}

    def gate(self, name: str) -> threading.Event:
        return self.leave.setdefault(name, threading.Event())

    def enter(self, name: str) -> None:
        gate = self.gate(name)
        with self.changed:
            self.inside.add(name)
            self.entered.append(name)
            self.most = max(self.most, len(self.inside))
            self.changed.notify_all()
        try:
            if not gate.wait(WAIT):
                raise AssertionError(f"{name} was never let out")
        finally:
            with self.changed:
                self.inside.discard(name)
                self.changed.notify_all()

    async def until(self, entered: int) -> None:
        def wait() -> bool:
            with self.changed:
                return self.changed.wait_for(lambda: len(self.entered) >= entered, WAIT)

        assert await asyncio.to_thread(wait), f"{entered} never entered"


async def turns_until(condition: Callable[[], bool]) -> None:
    """Let the loop run other tasks, a bounded number of turns, until `condition`."""
    for _ in range(100):
        if condition():
            return
        await checkpoint()
    raise AssertionError("the other tasks never got there")


class Held(Query[str]):
    name: str


def held_handler(room: Room) -> type[QueryHandler[Held, str]]:
    class HeldHandler(QueryHandler[Held, str]):
        def handle(self, request: Held) -> str:
            room.enter(request.name)
            return request.name

    return HeldHandler


def test_the_default_limit_is_anyios_forty() -> None:
    assert THREAD_LIMIT == 40
    assert _threads._slots.limit == THREAD_LIMIT  # pyright: ignore[reportPrivateUsage]
    assert MAX_IDLE_LANES == 16


async def test_with_a_limit_of_two_the_third_send_waits_until_one_leaves(
    limit: Callable[[int], Slots],
) -> None:
    slots = limit(2)
    room = Room()
    mediator = build(lambda m: m.add_handler(held_handler(room)))

    sends = [asyncio.ensure_future(mediator.send(Held(name=n))) for n in "abc"]
    await room.until(entered=2)

    # Every send has run up to its first wait: two in the handler, one queued.
    first, second = room.entered
    assert room.inside == {first, second}
    assert slots.busy == 2
    assert len(slots.queue) == 1
    (third,) = set("abc") - {first, second}
    assert not any(send.done() for send in sends)

    room.gate(first).set()
    await room.until(entered=3)
    assert room.entered == [first, second, third]
    room.gate(second).set()
    room.gate(third).set()

    assert await asyncio.gather(*sends) == ["a", "b", "c"]
    assert room.most == 2


async def test_a_send_waiting_for_a_thread_can_be_cancelled(
    limit: Callable[[int], Slots],
) -> None:
    slots = limit(1)
    room = Room()
    mediator = build(lambda m: m.add_handler(held_handler(room)))

    holding = asyncio.ensure_future(mediator.send(Held(name="holding")))
    await room.until(entered=1)
    waiting = asyncio.ensure_future(mediator.send(Held(name="waiting")))
    await turns_until(lambda: len(slots.queue) == 1)

    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting

    assert len(slots.queue) == 0
    assert slots.busy == 1  # the holding send's, nothing more
    room.gate("holding").set()
    assert await holding == "holding"
    # The cancelled send left no slot taken: the next one gets the only one.
    room.gate("next").set()
    assert await asyncio.wait_for(mediator.send(Held(name="next")), WAIT) == "next"
    assert room.entered == ["holding", "next"]


async def test_a_send_cancelled_as_it_is_handed_a_thread_gives_it_back(
    limit: Callable[[int], Slots],
) -> None:
    slots = limit(1)
    slots.busy = 1  # the test holds the only slot itself
    room = Room()
    mediator = build(lambda m: m.add_handler(held_handler(room)))
    waiting = asyncio.ensure_future(mediator.send(Held(name="waiting")))
    await turns_until(lambda: len(slots.queue) == 1)

    # The slot is handed to the waiting send, which is cancelled before it
    # runs again: nothing uses the slot, so it must be given back.
    slots.give()
    assert slots.busy == 1
    assert len(slots.queue) == 0
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting

    assert slots.busy == 0
    room.gate("next").set()
    assert await asyncio.wait_for(mediator.send(Held(name="next")), WAIT) == "next"
    assert room.entered == ["next"]


async def test_the_first_to_ask_is_the_first_to_get_a_thread(
    limit: Callable[[int], Slots],
) -> None:
    limit(1)
    room = Room()
    mediator = build(lambda m: m.add_handler(held_handler(room)))

    sends = [asyncio.ensure_future(mediator.send(Held(name=n))) for n in "abcd"]
    for count, name in enumerate("abcd", start=1):
        await room.until(entered=count)
        room.gate(name).set()

    assert await asyncio.gather(*sends) == list("abcd")
    assert room.entered == list("abcd")
    assert room.most == 1


@request_scope
class Basket:
    """A request-scoped service: the route that needs it opens a scope."""


class Shipped(Notification):
    pass


class Step(Command[int]):
    pass


class Order(Command[list[int]]):
    pass


async def test_nested_sends_in_a_scope_holding_a_thread_never_wait_for_another(
    limit: Callable[[int], Slots],
) -> None:
    # The scope holds the only thread from its first def handler to its end:
    # a nested send that asked for a second one would wait forever.
    slots = limit(1)

    class ShippedHandler(NotificationHandler[Shipped]):
        def handle(self, notification: Shipped) -> None:
            pass

    class StepHandler(CommandHandler[Step, int]):
        def handle(self, request: Step) -> int:
            return threading.get_ident()

    class OrderHandler(CommandHandler[Order, list[int]]):
        @inject
        def __init__(self, basket: Basket, mediator: Mediator) -> None:
            self.mediator = mediator

        async def handle(self, request: Order) -> list[int]:
            await self.mediator.publish(Shipped())
            assert slots.busy == 1
            return [await self.mediator.send(Step()) for _ in range(3)]

    mediator = build(lambda m: m.add_handler(OrderHandler, StepHandler, ShippedHandler))

    threads = await asyncio.wait_for(mediator.send(Order()), WAIT)

    assert len(set(threads)) == 1
    assert threading.get_ident() not in threads


class Outer(Query[str]):
    pass


class Inner(Query[str]):
    pass


async def test_a_send_from_a_blocked_thread_takes_a_thread_over_the_limit(
    limit: Callable[[int], Slots],
) -> None:
    # No scope here (the handler reaches the mediator without injection): the
    # inner send needs a thread of its own, and the only one is blocked waiting
    # for it. It takes one at once, over the limit, instead of waiting forever.
    slots = limit(1)
    loop = asyncio.get_running_loop()
    mediators: list[Mediator] = []
    busy: list[int] = []

    class InnerHandler(QueryHandler[Inner, str]):
        def handle(self, request: Inner) -> str:
            busy.append(slots.busy)
            return "inner"

    class OuterHandler(QueryHandler[Outer, str]):
        def handle(self, request: Outer) -> str:
            nested = asyncio.run_coroutine_threadsafe(mediators[0].send(Inner()), loop)
            return f"outer of {nested.result(WAIT)}"

    mediators.append(build(lambda m: m.add_handler(OuterHandler, InnerHandler)))

    assert await mediators[0].send(Outer()) == "outer of inner"
    assert busy == [2]


class Pair(Command[list[str]]):
    pass


async def test_concurrent_calls_of_one_scope_wait_for_one_thread_together(
    limit: Callable[[int], Slots],
) -> None:
    # Two def notification handlers of one scope, published concurrently while
    # the only thread is busy: both wait for it, one slot serves them both.
    slots = limit(1)
    room = Room()
    mediator = build(lambda m: m.add_handler(held_handler(room)))
    ran: list[int] = []

    class First(NotificationHandler[Shipped]):
        def handle(self, notification: Shipped) -> None:
            ran.append(threading.get_ident())

    class Second(NotificationHandler[Shipped]):
        def handle(self, notification: Shipped) -> None:
            ran.append(threading.get_ident())

    class PairHandler(CommandHandler[Pair, list[str]]):
        @inject
        def __init__(self, basket: Basket, mediator: Mediator) -> None:
            self.mediator = mediator

        async def handle(self, request: Pair) -> list[str]:
            await self.mediator.publish(Shipped(), concurrent=True)
            return ["published"]

    scoped = build(lambda m: m.add_handler(PairHandler, First, Second))

    holding = asyncio.ensure_future(mediator.send(Held(name="holding")))
    await room.until(entered=1)
    pair = asyncio.ensure_future(scoped.send(Pair()))
    # Both handlers wait, in one place in the queue: the scope's.
    await turns_until(lambda: len(slots.queue) == 1 and len(slots.queue[0].wakes) == 2)
    assert ran == []

    room.gate("holding").set()
    assert await holding == "holding"
    assert await asyncio.wait_for(pair, WAIT) == ["published"]
    assert len(ran) == 2
    assert len(set(ran)) == 1
