"""The concurrency limiter: its counts, and both drivers' queues."""

from __future__ import annotations

import asyncio
import threading

import pytest
from anyio.lowlevel import checkpoint
from hypothesis import given, settings
from hypothesis import strategies as st

from http_resilience._strategies.concurrency.limit import (
    GRANTED,
    QUEUED,
    REFUSED,
    ConcurrencyLimit,
)
from http_resilience._strategies.concurrency.strategy import (
    AsyncConcurrencyLimiter,
    ConcurrencyLimiter,
)


def test_permits_then_queue_then_refusal() -> None:
    limit = ConcurrencyLimit(permits=2, queue_limit=1)
    assert [limit.enter() for _ in range(4)] == [GRANTED, GRANTED, QUEUED, REFUSED]
    assert (limit.in_use, limit.queued) == (2, 1)


def test_a_permit_passes_to_the_queue_before_it_frees() -> None:
    limit = ConcurrencyLimit(permits=1, queue_limit=1)
    limit.enter()
    limit.enter()
    assert limit.leave() is True
    assert (limit.in_use, limit.queued) == (1, 0)
    assert limit.leave() is False
    assert (limit.in_use, limit.queued) == (0, 0)


def test_an_abandoned_place_in_the_queue_is_free_again() -> None:
    limit = ConcurrencyLimit(permits=1, queue_limit=1)
    limit.enter()
    limit.enter()
    limit.abandon()
    assert (limit.in_use, limit.queued) == (1, 0)
    assert limit.enter() is QUEUED


@settings(max_examples=300, deadline=None)
@given(
    permits=st.integers(min_value=1, max_value=5),
    queue_limit=st.integers(min_value=0, max_value=5),
    steps=st.lists(st.sampled_from(["enter", "leave", "abandon"]), max_size=60),
)
def test_the_counts_never_leave_their_bounds(
    permits: int, queue_limit: int, steps: list[str]
) -> None:
    limit = ConcurrencyLimit(permits=permits, queue_limit=queue_limit)
    inside = waiting = 0
    for step in steps:
        if step == "enter":
            entry = limit.enter()
            if entry is GRANTED:
                inside += 1
            elif entry is QUEUED:
                waiting += 1
            else:
                assert inside == permits or waiting > 0
                assert waiting == queue_limit
        elif step == "leave" and inside:
            if limit.leave():
                waiting -= 1
            else:
                inside -= 1
        elif step == "abandon" and waiting:
            limit.abandon()
            waiting -= 1
        assert (limit.in_use, limit.queued) == (inside, waiting)
        assert 0 <= inside <= permits
        assert 0 <= waiting <= queue_limit


# --- the async driver ------------------------------------------------------------

pytestmark = pytest.mark.anyio


@pytest.mark.asyncio_only("the test itself uses asyncio.create_task, asyncio.gather")
async def test_queued_coroutines_get_permits_in_order() -> None:
    limiter = AsyncConcurrencyLimiter(permits=1, queue_limit=3)
    assert limiter.try_enter() is GRANTED
    order: list[int] = []

    async def queued(number: int) -> None:
        assert limiter.try_enter() is QUEUED
        await limiter.wait()
        order.append(number)
        limiter.leave()

    tasks = [asyncio.create_task(queued(number)) for number in range(3)]
    await checkpoint()
    assert limiter.try_enter() is REFUSED
    limiter.leave()
    await asyncio.gather(*tasks)
    assert order == [0, 1, 2]
    assert limiter.in_use == 0


@pytest.mark.asyncio_only(
    "the test itself uses asyncio.CancelledError, asyncio.create_task"
)
async def test_a_waiter_cancelled_before_its_turn_gives_up_its_place() -> None:
    limiter = AsyncConcurrencyLimiter(permits=1, queue_limit=1)
    limiter.try_enter()
    assert limiter.try_enter() is QUEUED
    waiter = asyncio.create_task(limiter.wait())
    await checkpoint()
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    assert limiter.try_enter() is QUEUED  # the place is free again
    second = asyncio.create_task(limiter.wait())
    await checkpoint()
    limiter.leave()
    await second
    assert limiter.in_use == 1


@pytest.mark.asyncio_only(
    "the test itself uses asyncio.CancelledError, asyncio.create_task"
)
async def test_a_waiter_cancelled_as_its_permit_arrives_passes_it_on() -> None:
    limiter = AsyncConcurrencyLimiter(permits=1, queue_limit=2)
    limiter.try_enter()
    limiter.try_enter()
    first = asyncio.create_task(limiter.wait())
    limiter.try_enter()
    second = asyncio.create_task(limiter.wait())
    await checkpoint()
    limiter.leave()  # the permit goes to `first`...
    first.cancel()  # ...which is cancelled before it runs
    with pytest.raises(asyncio.CancelledError):
        await first
    await second
    assert limiter.in_use == 1


@pytest.mark.asyncio_only(
    "the test itself uses asyncio.CancelledError, asyncio.create_task"
)
async def test_a_cancelled_waiter_at_the_front_is_skipped() -> None:
    limiter = AsyncConcurrencyLimiter(permits=1, queue_limit=2)
    limiter.try_enter()
    limiter.try_enter()
    first = asyncio.create_task(limiter.wait())
    limiter.try_enter()
    second = asyncio.create_task(limiter.wait())
    await checkpoint()
    first.cancel()  # cancelled, but it has not run its handler yet
    limiter.leave()
    await second
    with pytest.raises(asyncio.CancelledError):
        await first
    assert limiter.in_use == 1
    limiter.leave()
    assert limiter.in_use == 0
    assert limiter.try_enter() is GRANTED


# --- the sync driver -------------------------------------------------------------


def test_queued_threads_wait_for_a_permit() -> None:
    limiter = ConcurrencyLimiter(permits=1, queue_limit=1)
    assert limiter.enter() is True
    entered = threading.Event()

    def waiter() -> None:
        limiter.enter()
        entered.set()

    thread = threading.Thread(target=waiter)
    thread.start()
    deadline = 100
    while limiter._limit.queued == 0 and deadline:  # pyright: ignore[reportPrivateUsage]
        deadline -= 1
        threading.Event().wait(0.001)
    assert limiter.enter() is False  # the queue is full
    assert not entered.is_set()
    limiter.leave()
    thread.join(timeout=5)
    assert entered.is_set()
    assert limiter.in_use == 1
    limiter.leave()
    assert limiter.in_use == 0
