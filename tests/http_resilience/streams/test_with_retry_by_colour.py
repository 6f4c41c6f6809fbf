"""The stream retry where the colours differ, so no generated twin carries it.

The rules both colours share are in `test_with_retry`, whose sync twin is
generated. These are not the same in both: cancellation and async iterables
are the async side's alone, a built-in iterator as the source the sync side's.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from datetime import timedelta
from typing import Any

import anyio
import pytest

from http_resilience import (
    PartialStreamPolicy,
    StreamRetryContext,
    StreamRetryOptions,
    with_retry,
    with_retry_sync,
)
from http_resilience.testing import FakeClock

from .sources import Broken, async_factory, breaks
from .test_with_retry import ITEMS, collect, options

pytestmark = pytest.mark.anyio


async def test_a_factory_returning_no_async_iterable_fails_at_once() -> None:
    clock = FakeClock()

    def factory(context: StreamRetryContext) -> Any:
        return [1, 2, 3]

    with pytest.raises(TypeError):
        await collect(with_retry(factory, options(clock)), [])
    assert clock.sleeps == []


# --- cancellation ----------------------------------------------------------------


class CancellingClock(FakeClock):
    """Cancels a scope as the backoff starts, then sleeps as FakeClock does.

    The cancellation is requested while the task is running, so it can only be
    delivered at the next checkpoint: the sleep itself, for any delay.
    """

    def __init__(self) -> None:
        super().__init__()
        self.scope: anyio.CancelScope | None = None

    async def sleep(self, seconds: float) -> None:
        assert self.scope is not None
        self.scope.cancel()
        await super().sleep(seconds)


@pytest.mark.parametrize("base_delay", [0, 0.2])
async def test_cancellation_during_the_backoff_ends_the_stream(
    base_delay: float,
) -> None:
    clock = CancellingClock()
    factory = async_factory(ITEMS, breaks(0), breaks(0))
    with anyio.CancelScope() as scope:
        clock.scope = scope
        await collect(with_retry(factory, options(clock, base_delay=base_delay)), [])
    assert scope.cancelled_caught
    assert clock.sleeps == [base_delay]
    assert len(factory.contexts) == 1
    assert factory.closes == [1]


async def test_cancellation_is_observed_between_attempts_with_the_system_clock() -> (
    None
):
    # The source asks for the cancellation and fails without ever awaiting;
    # only the zero-length backoff can deliver it before the next attempt.
    contexts: list[StreamRetryContext] = []

    with anyio.CancelScope() as scope:

        async def source(context: StreamRetryContext) -> AsyncGenerator[int, None]:
            contexts.append(context)
            scope.cancel()
            raise Broken
            yield 0  # pragma: no cover - makes this an async generator

        await collect(
            with_retry(source, StreamRetryOptions(base_delay=timedelta(0))), []
        )
    assert scope.cancelled_caught
    assert len(contexts) == 1


async def test_cancellation_while_the_source_waits_is_not_retried() -> None:
    factory = async_factory(ITEMS)
    waiting = anyio.Event()
    closed: list[str] = []

    async def slow(context: StreamRetryContext) -> AsyncGenerator[int, None]:
        factory(context)
        try:
            yield 1
            waiting.set()
            await anyio.sleep_forever()
            yield 2  # pragma: no cover
        finally:
            closed.append("closed")

    received: list[int] = []
    async with anyio.create_task_group() as group:
        group.start_soon(collect, with_retry(slow, options(FakeClock())), received)
        await waiting.wait()
        group.cancel_scope.cancel()
    assert received == [1]
    assert len(factory.contexts) == 1
    assert closed == ["closed"]


# --- the sync side's own ---------------------------------------------------------


@pytest.mark.parametrize("policy", list(PartialStreamPolicy))
def test_a_built_in_iterator_is_a_sync_source(policy: PartialStreamPolicy) -> None:
    chosen = options(FakeClock(), partial_stream_policy=policy)
    assert list(with_retry_sync(lambda _: iter(ITEMS), chosen)) == ITEMS
