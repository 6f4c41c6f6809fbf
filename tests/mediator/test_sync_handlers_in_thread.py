"""A plain-def handler under `send` (and `publish`, `stream`) runs in a worker thread.

Nothing here measures time: a handler that blocks on a `threading.Barrier`
proves that several sends are inside it at once, which they never could be on
the event-loop thread; events say when a thread got somewhere.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from contextvars import ContextVar
from typing import Any

import pytest
from injector import Injector, inject

from mediator import (
    Command,
    CommandHandler,
    Mediator,
    Next,
    Notification,
    NotificationHandler,
    Principal,
    Query,
    QueryHandler,
    Stage,
    StreamHandler,
    StreamQuery,
    SyncPathError,
    acting_as,
    correlation_id,
    current_correlation_id,
    current_idempotency_key,
    current_principal,
    idempotency_key,
    request_scope,
)
from tests.mediator._support.support import build

pytestmark = pytest.mark.anyio

WAIT = 30.0  # seconds a thread waits for the others: generous, on a busy machine

deadline: ContextVar[float | None] = ContextVar("test_deadline", default=None)


class Blocking(Query[int]):
    pass


async def test_five_concurrent_sends_are_inside_a_def_handler_at_once() -> None:
    # On the loop thread the first would block in wait() and the others never
    # start: the barrier would break after WAIT and every send would fail.
    barrier = threading.Barrier(5, timeout=WAIT)

    class BlockingHandler(QueryHandler[Blocking, int]):
        def handle(self, request: Blocking) -> int:
            barrier.wait()
            return threading.get_ident()

    mediator = build(lambda m: m.add_handler(BlockingHandler))

    threads = await asyncio.gather(*(mediator.send(Blocking()) for _ in range(5)))

    assert len(set(threads)) == 5
    assert threading.get_ident() not in threads


@request_scope
class Basket:
    """A request-scoped service: one instance per top-level send."""


class Seen:
    def __init__(self) -> None:
        self.by_behavior: list[Basket] = []


class Inspect(Command[dict[str, Any]]):
    pass


async def test_the_thread_sees_the_context_of_the_send() -> None:
    seen = Seen()

    class SeesBasket:
        stage = Stage.AUDIT

        @inject
        def __init__(self, injector: Injector) -> None:
            self.injector = injector

        async def handle(self, request: Any, next: Next[Any]) -> Any:
            seen.by_behavior.append(self.injector.get(Basket))
            return await next()

    class InspectHandler(CommandHandler[Inspect, dict[str, Any]]):
        @inject
        def __init__(self, basket: Basket) -> None:
            self.basket = basket

        def handle(self, request: Inspect) -> dict[str, Any]:
            principal = current_principal()
            return {
                "thread": threading.get_ident(),
                "correlation": current_correlation_id(),
                "principal": principal.id if principal else None,
                "key": current_idempotency_key(),
                "deadline": deadline.get(),
                "basket": self.basket,
            }

    mediator = build(lambda m: m.add_handler(InspectHandler).add_behavior(SeesBasket))

    token = deadline.set(12.5)
    try:
        with (
            correlation_id("order-7"),
            acting_as(Principal("u-1")),
            idempotency_key("key-1"),
        ):
            seen_in_thread = await mediator.send(Inspect())
    finally:
        deadline.reset(token)

    assert seen_in_thread["thread"] != threading.get_ident()
    assert seen_in_thread["correlation"] == "order-7"
    assert seen_in_thread["principal"] == "u-1"
    assert seen_in_thread["key"] == "key-1"
    assert seen_in_thread["deadline"] == 12.5
    assert seen.by_behavior == [seen_in_thread["basket"]]
    assert seen.by_behavior[0] is seen_in_thread["basket"]


class Hold(Command[str]):
    pass


async def test_a_cancelled_send_returns_at_once_and_the_result_is_dropped() -> None:
    entered, release = threading.Event(), threading.Event()
    finished: list[str] = []
    loop_failures: list[dict[str, Any]] = []
    asyncio.get_running_loop().set_exception_handler(
        lambda _, context: loop_failures.append(context)
    )

    class HoldHandler(CommandHandler[Hold, str]):
        def handle(self, request: Hold) -> str:
            entered.set()
            try:
                if not release.wait(WAIT):
                    raise AssertionError("never released")
                raise RuntimeError("the dropped failure of a cancelled send")
            finally:
                finished.append("done")

    mediator = build(lambda m: m.add_handler(HoldHandler))
    send = asyncio.ensure_future(mediator.send(Hold()))
    assert await asyncio.to_thread(entered.wait, WAIT)

    send.cancel()
    with pytest.raises(asyncio.CancelledError):
        await send

    assert not release.is_set()
    assert finished == []
    release.set()
    # The thread finishes on its own; a later send still works.
    release.clear()
    entered.clear()
    again = asyncio.ensure_future(mediator.send(Hold()))
    assert await asyncio.to_thread(entered.wait, WAIT)
    release.set()
    with pytest.raises(RuntimeError, match="dropped failure"):
        await again
    assert finished == ["done", "done"]
    assert loop_failures == []


class Outer(Command[str]):
    pass


class Inner(Command[str]):
    pass


async def test_a_def_handler_waiting_on_an_async_send_of_its_scope_is_refused() -> None:
    # The nested send joins the scope and needs its thread, which is blocked
    # waiting for it: refused with a message, instead of waiting forever.
    loop = asyncio.get_running_loop()

    class InnerHandler(CommandHandler[Inner, str]):
        def handle(self, request: Inner) -> str:
            return "inner"

    class OuterHandler(CommandHandler[Outer, str]):
        @inject
        def __init__(self, basket: Basket, mediator: Mediator) -> None:
            self.mediator = mediator

        def handle(self, request: Outer) -> str:
            nested = asyncio.run_coroutine_threadsafe(self.mediator.send(Inner()), loop)
            return nested.result(WAIT)

    mediator = build(lambda m: m.add_handler(OuterHandler, InnerHandler))

    with pytest.raises(SyncPathError, match=r"send_sync\(\.\.\.\) from the handler"):
        await mediator.send(Outer())


class OuterSync(Command[str]):
    pass


async def test_a_def_handler_may_send_sync_in_its_thread() -> None:
    class InnerHandler(CommandHandler[Inner, str]):
        @inject
        def __init__(self, basket: Basket) -> None:
            self.basket = basket

        def handle(self, request: Inner) -> str:
            return f"inner {threading.get_ident()} {id(self.basket)}"

    class OuterHandler(CommandHandler[OuterSync, str]):
        @inject
        def __init__(self, basket: Basket, mediator: Mediator) -> None:
            self.basket = basket
            self.mediator = mediator

        def handle(self, request: OuterSync) -> str:
            inner = self.mediator.send_sync(Inner())
            assert inner == f"inner {threading.get_ident()} {id(self.basket)}"
            return "outer"

    mediator = build(lambda m: m.add_handler(OuterHandler, InnerHandler))

    assert await mediator.send(OuterSync()) == "outer"


class Shipped(Notification):
    pass


async def test_def_notification_handlers_run_in_threads_concurrently() -> None:
    barrier = threading.Barrier(2, timeout=WAIT)
    threads: list[int] = []

    class First(NotificationHandler[Shipped]):
        def handle(self, notification: Shipped) -> None:
            barrier.wait()
            threads.append(threading.get_ident())

    class Second(NotificationHandler[Shipped]):
        def handle(self, notification: Shipped) -> None:
            barrier.wait()
            threads.append(threading.get_ident())

    mediator = build(lambda m: m.add_handler(First, Second))

    await mediator.publish(Shipped(), concurrent=True)

    assert len(set(threads)) == 2
    assert threading.get_ident() not in threads


async def test_def_notification_handlers_in_turn_run_off_the_loop() -> None:
    threads: list[int] = []

    class Only(NotificationHandler[Shipped]):
        def handle(self, notification: Shipped) -> None:
            threads.append(threading.get_ident())

    class Failing(NotificationHandler[Shipped]):
        def handle(self, notification: Shipped) -> None:
            raise ValueError("kept")

    mediator = build(lambda m: m.add_handler(Only, Failing))

    with pytest.raises(ExceptionGroup) as raised:
        await mediator.publish(Shipped())

    assert [str(e) for e in raised.value.exceptions] == ["kept"]
    assert len(threads) == 1
    assert threads[0] != threading.get_ident()


class Numbers(StreamQuery[int]):
    pass


async def test_a_plain_generator_is_advanced_and_closed_in_one_thread() -> None:
    threads: list[tuple[str, int]] = []

    class NumbersHandler(StreamHandler[Numbers, int]):
        def handle(self, query: Numbers) -> Iterator[int]:
            try:
                for number in range(100):
                    threads.append(("item", threading.get_ident()))
                    yield number
            finally:
                threads.append(("closed", threading.get_ident()))

    mediator = build(lambda m: m.add_handler(NumbersHandler))

    stream = mediator.stream(Numbers())
    assert [await anext(stream) for _ in range(3)] == [0, 1, 2]
    await stream.aclose()

    assert [what for what, _ in threads] == ["item", "item", "item", "closed"]
    assert len({thread for _, thread in threads}) == 1
    assert threads[0][1] != threading.get_ident()


async def test_a_def_stream_handler_returning_a_list_is_called_in_a_thread() -> None:
    threads: list[int] = []

    class ListHandler(StreamHandler[Numbers, int]):
        def handle(self, query: Numbers) -> list[int]:
            threads.append(threading.get_ident())
            return [1, 2]

    mediator = build(lambda m: m.add_handler(ListHandler))

    assert [n async for n in mediator.stream(Numbers())] == [1, 2]
    assert threads != [threading.get_ident()]
    assert len(threads) == 1


async def test_an_async_handler_still_runs_on_the_loop_thread() -> None:
    class AsyncHandler(QueryHandler[Blocking, int]):
        async def handle(self, request: Blocking) -> int:
            return threading.get_ident()

    mediator = build(lambda m: m.add_handler(AsyncHandler))

    assert await mediator.send(Blocking()) == threading.get_ident()


async def test_send_sync_still_runs_a_def_handler_in_the_caller_thread() -> None:
    class SyncHandler(QueryHandler[Blocking, int]):
        def handle(self, request: Blocking) -> int:
            return threading.get_ident()

    mediator = build(lambda m: m.add_handler(SyncHandler))

    assert mediator.send_sync(Blocking()) == threading.get_ident()
