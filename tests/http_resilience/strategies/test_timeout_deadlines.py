"""`Deadlines`: one loop timer for every attempt in flight, on a fake loop."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, cast

import httpx
import pytest

from http_resilience._strategies.timeout.timer import Cut, Deadlines
from http_resilience.testing import FakeClock
from tests.http_resilience._support.scripted import URL, async_transport, script


class Timer:
    def __init__(self, when: float, callback: Callable[[], None]) -> None:
        self.when = when
        self.callback = callback
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class FakeLoop:
    """What `Deadlines` uses of a loop: `time()` and `call_at()`."""

    def __init__(self) -> None:
        self.now = 0.0
        self.timers: list[Timer] = []

    def time(self) -> float:
        return self.now

    def call_at(self, when: float, callback: Callable[[], None]) -> Timer:
        timer = Timer(when, callback)
        self.timers.append(timer)
        return timer

    def armed(self) -> list[float]:
        return [t.when for t in self.timers if not t.cancelled]

    def run_until(self, now: float) -> None:
        self.now = now
        for _ in range(100):
            due = [t for t in self.timers if not t.cancelled and t.when <= now]
            if not due:
                return
            for timer in due:
                timer.cancelled = True
                timer.callback()


class FakeTask:
    def __init__(self) -> None:
        self.cancels = 0

    def cancel(self) -> bool:
        self.cancels += 1
        return True


def setup() -> tuple[FakeLoop, Deadlines]:
    loop = FakeLoop()
    return loop, Deadlines(cast(asyncio.AbstractEventLoop, loop))


def cut(when: float) -> tuple[Cut, FakeTask]:
    task = FakeTask()
    return Cut(cast("asyncio.Task[Any]", task), when), task


def test_one_timer_serves_every_attempt_in_order() -> None:
    loop, deadlines = setup()
    cuts = [cut(10.0 + n) for n in range(3)]
    for each, _ in cuts:
        deadlines.add(each)
    assert loop.armed() == [10.0]
    loop.run_until(11.5)
    assert [task.cancels for _, task in cuts] == [1, 1, 0]
    assert [each.fired for each, _ in cuts] == [True, True, False]
    assert loop.armed() == [12.0]
    loop.run_until(12.0)
    assert cuts[2][1].cancels == 1
    assert loop.armed() == []
    assert len(deadlines) == 0


def test_a_finished_attempt_is_never_cut() -> None:
    loop, deadlines = setup()
    (first, first_task), (second, second_task) = cut(10.0), cut(11.0)
    deadlines.add(first)
    deadlines.add(second)
    first.finish()
    loop.run_until(10.0)  # the timer finds the head done and moves on
    assert first_task.cancels == 0
    assert loop.armed() == [11.0]
    second.finish()
    loop.run_until(20.0)
    assert second_task.cancels == 0
    assert not first.fired


def test_finished_heads_leave_the_queue_as_new_attempts_arrive() -> None:
    _, deadlines = setup()
    for n in range(1000):
        each, _ = cut(10.0 + n)
        deadlines.add(each)
        each.finish()
    assert len(deadlines) == 1


def test_an_earlier_deadline_than_the_last_gets_its_own_timer() -> None:
    loop, deadlines = setup()
    late, _ = cut(10.0)
    early, early_task = cut(2.0)
    deadlines.add(late)
    deadlines.add(early)
    assert loop.armed() == [10.0, 2.0]
    loop.run_until(2.0)
    assert early_task.cancels == 1
    assert early.fired
    other, _ = cut(1.0)
    deadlines.add(other)
    other.finish()
    assert loop.armed() == [10.0]


def test_a_drained_queue_rearms_for_an_earlier_head() -> None:
    loop, deadlines = setup()
    long, _ = cut(10.0)
    deadlines.add(long)
    long.finish()
    short, short_task = cut(3.0)  # a shorter timeout after the queue drained
    deadlines.add(short)
    assert loop.armed() == [3.0]
    loop.run_until(3.0)
    assert short_task.cancels == 1


def test_a_timer_that_fires_early_waits_for_the_deadline() -> None:
    loop, deadlines = setup()
    each, task = cut(10.0)
    deadlines.add(each)
    loop.timers[0].cancelled = True
    loop.now = 9.0
    loop.timers[0].callback()  # as if the loop ran it a second early
    assert task.cancels == 0
    assert loop.armed() == [10.0]


# --- on a real loop -----------------------------------------------------------

pytestmark = pytest.mark.anyio


@pytest.mark.asyncio_only("the test itself uses asyncio.run, asyncio.to_thread")
async def test_one_transport_serves_several_event_loops_in_turn() -> None:
    server = script(200)
    transport = async_transport(server, FakeClock())

    async def once() -> int:
        response = await transport.handle_async_request(httpx.Request("GET", URL))
        return response.status_code

    assert await once() == 200

    def in_a_new_loop() -> int:
        return asyncio.run(once())

    assert await asyncio.to_thread(in_a_new_loop) == 200
    assert server.hits == 2
