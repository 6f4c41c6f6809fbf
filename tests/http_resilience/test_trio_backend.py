"""The async pipeline on trio: a real `httpx.AsyncClient`, a real server on loopback.

Each test runs on trio alone (the rest of the suite covers asyncio): retries,
the attempt timeout's cut, the total timeout, the limiter's queue and refusal,
the pool's refusal, hedging, a cancellation from outside, and stream retry. The
server (tests/support/fault_server.py) runs uvicorn in a thread of its own; each
test counts under keys of its own. Timeouts are short, bounded by generous
margins; nothing asserts how long a call took.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import anyio
import httpx
import pytest

from http_resilience import (
    AsyncResilientTransport,
    AttemptTimeoutError,
    Clock,
    PartialStreamPolicy,
    RateLimitedError,
    ResiliencePipeline,
    StreamRetryContext,
    StreamRetryOptions,
    SystemClock,
    TotalTimeoutError,
    with_retry,
)
from http_resilience._core.backend import asyncio_loop, current_library, current_task
from http_resilience.testing import FakeClock
from tests.http_resilience._support.scripted import options
from tests.support.fault_server import FaultServer

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    """Trio only: what this module is about."""
    return "trio"


def key(name: str) -> str:
    """A counter key no other run of the session shares."""
    return f"trio-{name}-{uuid.uuid4().hex[:8]}"


def transport(
    inner: httpx.AsyncBaseTransport | None = None,
    clock: Clock | None = None,
    **values: Any,
) -> AsyncResilientTransport:
    return AsyncResilientTransport(
        inner or httpx.AsyncHTTPTransport(),
        options=options(**values),
        name="trio",
        clock=clock or FakeClock(),  # the retry's backoff costs no time
    )


async def test_the_backend_seam_tells_trio() -> None:
    assert current_library() == "trio"
    assert asyncio_loop() is None
    assert current_task() == current_task()


async def test_a_flaky_endpoint_is_retried_until_it_answers(
    fault_server: FaultServer,
) -> None:
    name = key("retry")
    async with httpx.AsyncClient(transport=transport(max_retry_attempts=3)) as client:
        response = await client.get(f"{fault_server.url}/flaky/2/503?key={name}")
    assert response.status_code == 200
    assert response.headers["x-fault-hit"] == "3"


async def test_a_slow_attempt_is_cut_at_its_attempt_timeout(
    fault_server: FaultServer,
) -> None:
    name = key("attempt")
    resilient = transport(
        max_retry_attempts=1, attempt_timeout=0.2, total_request_timeout=5
    )
    async with httpx.AsyncClient(transport=resilient) as client:
        with pytest.raises(AttemptTimeoutError, match="attempt 2 timed out"):
            await client.get(f"{fault_server.url}/sleep/5?key={name}")
    await fault_server.wait_idle(name)
    assert fault_server.hits(name) == 2


async def test_the_total_timeout_ends_the_call(fault_server: FaultServer) -> None:
    name = key("total")
    # The system clock: the attempts' cuts and the total's share its time.
    resilient = transport(
        clock=SystemClock(),
        max_retry_attempts=5,
        base_delay=0,
        attempt_timeout=0.25,
        total_request_timeout=0.6,
    )
    async with httpx.AsyncClient(transport=resilient) as client:
        with pytest.raises(TotalTimeoutError):
            await client.get(f"{fault_server.url}/sleep/5?key={name}")
    await fault_server.wait_idle(name)
    assert 2 <= fault_server.hits(name) <= 3  # cut in its third attempt at most


async def test_the_limiter_queues_one_caller_and_refuses_the_next(
    fault_server: FaultServer,
) -> None:
    name = key("limiter")
    url = f"{fault_server.url}/sleep/0.3?key={name}"
    resilient = transport(concurrency_limit=1, queue_limit=1)
    outcomes: list[str] = []

    async def call(client: httpx.AsyncClient) -> None:
        try:
            outcomes.append(str((await client.get(url)).status_code))
        except RateLimitedError:
            outcomes.append("refused")

    async with (
        httpx.AsyncClient(transport=resilient) as client,
        anyio.create_task_group() as group,
    ):
        for _ in range(3):
            group.start_soon(call, client)
    assert sorted(outcomes) == ["200", "200", "refused"]
    assert fault_server.hits(name) == 2


async def test_a_wait_for_the_pool_cut_by_the_total_timeout_is_refused_locally(
    fault_server: FaultServer,
) -> None:
    name = key("pool")
    url = f"{fault_server.url}/healthy?key={name}"
    resilient = transport(
        httpx.AsyncHTTPTransport(limits=httpx.Limits(max_connections=1)),
        attempt_timeout=0.3,
        total_request_timeout=0.5,
    )
    async with (
        httpx.AsyncClient(transport=resilient) as client,
        client.stream("GET", url) as holding,
    ):
        assert holding.status_code == 200
        with pytest.raises(RateLimitedError) as raised:
            await client.get(url)
    assert raised.value.reason == "concurrency_limit"
    assert "the request was not sent" in str(raised.value)
    await fault_server.wait_idle(name)
    assert fault_server.hits(name) == 1


async def test_hedging_takes_the_first_good_answer_and_cancels_the_slow_one(
    fault_server: FaultServer,
) -> None:
    name = key("hedge")
    resilient = AsyncResilientTransport(
        httpx.AsyncHTTPTransport(),
        pipeline=ResiliencePipeline().add_hedging(delay=0.1),
        name="trio",
    )
    async with httpx.AsyncClient(transport=resilient) as client:
        response = await client.get(f"{fault_server.url}/hedge/5?key={name}")
    assert response.status_code == 200
    assert response.headers["x-fault-hit"] == "2"  # the hedge, not the first
    await fault_server.wait_idle(name)  # the first was cancelled, not awaited
    assert fault_server.hits(name) == 2


async def test_a_cancellation_from_outside_wins_over_the_timeouts(
    fault_server: FaultServer,
) -> None:
    name = key("outside")
    resilient = transport(
        max_retry_attempts=3, attempt_timeout=0.3, total_request_timeout=5
    )
    async with httpx.AsyncClient(transport=resilient) as client:
        with anyio.move_on_after(0.3) as scope:  # the same moment as the cut
            await client.get(f"{fault_server.url}/sleep/5?key={name}")
        assert scope.cancelled_caught
        with anyio.CancelScope() as scope:
            scope.cancel()
            await client.get(f"{fault_server.url}/healthy?key={name}")
        assert scope.cancelled_caught
    await fault_server.wait_idle(name)
    assert fault_server.hits(name) <= 2


async def test_a_broken_stream_is_asked_again_on_the_fake_clock() -> None:
    clock = FakeClock()
    calls: list[int] = []

    async def source(context: StreamRetryContext) -> AsyncIterator[int]:
        calls.append(context.attempt_number)
        yield 1
        if context.attempt_number == 1:
            raise ConnectionResetError("broken")
        yield 2

    retry = StreamRetryOptions(
        max_retry_attempts=2,
        use_jitter=False,
        clock=clock,
        partial_stream_policy=PartialStreamPolicy.RESTART_FROM_START,
    )
    items = [item async for item in with_retry(source, retry)]
    assert items == [1, 1, 2]
    assert calls == [1, 2]
    assert clock.sleeps == [0.2]
