"""The breaker and the limiter inside `AsyncResilientTransport`, on a fake clock."""

from __future__ import annotations

import asyncio
import traceback
from typing import Any

import httpx
import pytest
from anyio.lowlevel import checkpoint

from http_resilience import (
    BreakerEvent,
    BrokenCircuitError,
    HttpEvent,
    RateLimitedError,
    RejectionEvent,
    ResilientTransport,
)
from http_resilience._strategies.breaker.registry import HostRegistry
from http_resilience._strategies.breaker.strategy import AsyncBreaker, SyncBreaker
from http_resilience.testing import EventRecorder, FakeClock
from tests.http_resilience._support.scripted import (
    URL,
    async_transport,
    script,
    sync_transport,
)

pytestmark = pytest.mark.anyio

# The scenario: retries off, minimum throughput 5, ratio 0.5, break 3 s.
SCENARIO: dict[str, Any] = {
    "max_retry_attempts": 0,
    "attempt_timeout": 1,
    "sampling_duration": 10,
    "minimum_throughput": 5,
    "failure_ratio": 0.5,
    "break_duration": 3,
}


async def get(transport: httpx.AsyncBaseTransport, url: str = URL) -> httpx.Response:
    return await transport.handle_async_request(httpx.Request("GET", url))


def transitions(events: EventRecorder[HttpEvent]) -> list[tuple[str, str, str]]:
    return [(e.host, e.previous, e.current) for e in events.of(BreakerEvent)]


async def test_the_breaker_opens_fails_fast_then_a_probe_closes_it() -> None:
    clock, events = FakeClock(), EventRecorder[HttpEvent]()
    server = script(503, 503, 503, 503, 503, 200)
    transport = async_transport(server, clock, events=events, **SCENARIO)
    statuses = [(await get(transport)).status_code for _ in range(5)]
    assert statuses == [503] * 5
    assert server.hits == 5
    for _ in range(3):
        with pytest.raises(BrokenCircuitError, match="circuit open, request not sent"):
            await get(transport)
    assert server.hits == 5
    clock.advance(3.0)
    assert (await get(transport)).status_code == 200  # the probe
    assert (await get(transport)).status_code == 200
    assert server.hits == 7
    host = "http://api.example:80"
    assert transitions(events) == [
        (host, "closed", "open"),
        (host, "open", "half_open"),
        (host, "half_open", "closed"),
    ]
    assert (
        events.of(RejectionEvent)
        == [RejectionEvent("orders", "GET", host, "circuit_open")] * 3
    )


async def test_a_failed_probe_opens_it_again() -> None:
    clock, events = FakeClock(), EventRecorder[HttpEvent]()
    server = script(503)
    transport = async_transport(server, clock, events=events, **SCENARIO)
    for _ in range(5):
        await get(transport)
    clock.advance(3.0)
    assert (await get(transport)).status_code == 503  # the probe fails
    with pytest.raises(BrokenCircuitError):
        await get(transport)
    assert [t[2] for t in transitions(events)] == ["open", "half_open", "open"]


async def test_each_rejection_is_a_fresh_exception_whose_traceback_does_not_grow() -> (
    None
):
    clock = FakeClock()
    transport = async_transport(script(503), clock, **SCENARIO)
    for _ in range(5):
        await get(transport)
    raised: list[BrokenCircuitError] = []
    for _ in range(50):
        clock.advance(0.01)
        with pytest.raises(BrokenCircuitError) as caught:
            await get(transport)
        raised.append(caught.value)
    assert len({id(error) for error in raised}) == 50
    depths = {len(traceback.extract_tb(error.__traceback__)) for error in raised}
    assert len(depths) == 1
    assert raised[0].retry_after == pytest.approx(2.99)
    assert raised[-1].retry_after == pytest.approx(2.5)


@pytest.mark.asyncio_only("the test itself uses asyncio.Event, asyncio.Task")
async def test_two_hundred_concurrent_callers_let_exactly_one_probe_through() -> None:
    clock = FakeClock()
    release, probing = asyncio.Event(), asyncio.Event()
    reached: list[asyncio.Task[object] | None] = []
    failing = True

    async def handler(request: httpx.Request) -> httpx.Response:
        reached.append(asyncio.current_task())
        if failing:
            return httpx.Response(503)
        probing.set()
        await release.wait()
        return httpx.Response(200)

    transport = async_transport(handler, clock, **SCENARIO)
    for _ in range(5):
        await get(transport)
    clock.advance(3.0)
    failing = False
    reached.clear()
    tasks = [asyncio.create_task(get(transport)) for _ in range(200)]
    await probing.wait()
    # Every other caller has its answer while the probe is still out.
    await asyncio.wait([task for task in tasks if task not in reached])
    release.set()
    results = await asyncio.gather(*tasks, return_exceptions=True)
    passed = [r for r in results if isinstance(r, httpx.Response)]
    rejected = [r for r in results if isinstance(r, BrokenCircuitError)]
    assert (len(reached), len(passed), len(rejected)) == (1, 1, 199)
    assert (await get(transport)).status_code == 200  # closed by the probe


async def test_the_breaker_sees_physical_attempts_inside_the_retry() -> None:
    clock, events = FakeClock(), EventRecorder[HttpEvent]()
    server = script(503)
    transport = async_transport(
        server,
        clock,
        events=events,
        minimum_throughput=4,
        failure_ratio=1.0,
        base_delay=0,
    )
    response = await get(transport)  # one logical call: four attempts
    assert (response.status_code, server.hits) == (503, 4)
    assert [t[2] for t in transitions(events)] == ["open"]
    with pytest.raises(BrokenCircuitError):
        await get(transport)
    assert server.hits == 4


async def test_a_breaker_that_opens_during_a_retry_ends_the_call() -> None:
    clock = FakeClock()
    server = script(503)
    transport = async_transport(
        server, clock, minimum_throughput=2, failure_ratio=1.0, base_delay=0
    )
    with pytest.raises(BrokenCircuitError):
        await get(transport)
    assert server.hits == 2
    assert all(stream.closed for stream in server.streams)


async def test_a_failing_host_leaves_another_host_alone() -> None:
    clock, events = FakeClock(), EventRecorder[HttpEvent]()

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(503 if request.url.host == "127.0.0.1" else 200)

    transport = async_transport(handler, clock, events=events, **SCENARIO)
    for _ in range(5):
        await get(transport, "http://127.0.0.1:8000/status")
    with pytest.raises(BrokenCircuitError):
        await get(transport, "http://127.0.0.1:8000/other")
    assert (await get(transport, "http://localhost:8000/x")).status_code == 200
    assert transitions(events) == [("http://127.0.0.1:8000", "closed", "open")]


async def test_hosts_are_normalised_before_they_are_told_apart() -> None:
    clock = FakeClock()
    transport = async_transport(script(503), clock, **SCENARIO)
    spellings = [
        "http://API.example/a",
        "http://api.example.:80/b",
        "HTTP://api.EXAMPLE:80/c?x=1",
        "http://user:pw@api.example/d",
        "http://api.example/e",
    ]
    for url in spellings:
        await get(transport, url)
    with pytest.raises(BrokenCircuitError):
        await get(transport, "http://api.example/")
    assert (await get(transport, "https://api.example/")).status_code == 503
    assert (await get(transport, "http://api.example:8080/")).status_code == 503


async def test_one_shared_breaker_when_breakers_are_not_per_host() -> None:
    clock, events = FakeClock(), EventRecorder[HttpEvent]()
    transport = async_transport(
        script(503), clock, events=events, breaker_per_host=False, **SCENARIO
    )
    for index in range(5):
        await get(transport, f"http://host-{index}.example/")
    with pytest.raises(BrokenCircuitError):
        await get(transport, "http://healthy.example/")
    assert transitions(events) == [("*", "closed", "open")]


async def test_the_registry_stays_bounded_by_maximum_hosts() -> None:
    clock = FakeClock()
    transport = async_transport(script(200), clock, maximum_hosts=16)
    for index in range(3000):
        await get(transport, f"http://host-{index}.example/")
    built = transport._built  # pyright: ignore[reportPrivateUsage]
    breaker = built.find(AsyncBreaker)
    assert breaker is not None
    registry = breaker.strategy.registry
    assert registry is not None
    assert len(registry) == 16


async def test_an_open_breaker_survives_a_flood_of_other_hosts() -> None:
    clock = FakeClock()

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(503 if request.url.host == "failing.example" else 200)

    transport = async_transport(handler, clock, maximum_hosts=4, **SCENARIO)
    for _ in range(5):
        await get(transport, "http://failing.example/")
    for index in range(100):
        await get(transport, f"http://host-{index}.example/")
    with pytest.raises(BrokenCircuitError):
        await get(transport, "http://failing.example/")


# --- the limiter ----------------------------------------------------------------------


@pytest.mark.asyncio_only("the test itself uses asyncio.Event, asyncio.create_task")
async def test_the_limiter_refuses_beyond_its_permits_and_queue() -> None:
    clock, events = FakeClock(), EventRecorder[HttpEvent]()
    release, both_in = asyncio.Event(), asyncio.Event()
    reached: list[httpx.Request] = []

    async def handler(request: httpx.Request) -> httpx.Response:
        reached.append(request)
        if len(reached) == 2:
            both_in.set()
        await release.wait()
        return httpx.Response(200)

    transport = async_transport(
        handler, clock, events=events, concurrency_limit=2, queue_limit=1
    )
    first = [asyncio.create_task(get(transport)) for _ in range(3)]
    await both_in.wait()
    with pytest.raises(RateLimitedError, match="concurrency limit") as raised:
        await get(transport)
    assert raised.value.retry_after is None
    assert len(reached) == 2  # the third waits in the queue
    release.set()
    assert [r.status_code for r in await asyncio.gather(*first)] == [200] * 3
    assert len(reached) == 3
    assert events.of(RejectionEvent)[0].reason == "concurrency_limit"


@pytest.mark.asyncio_only("the test itself uses asyncio.Event, asyncio.create_task")
async def test_a_limiter_refusal_is_not_retried_nor_held_against_the_host() -> None:
    # One failure in the window would open this breaker: refusals are none.
    clock = FakeClock()
    release = asyncio.Event()

    async def handler(request: httpx.Request) -> httpx.Response:
        await release.wait()
        return httpx.Response(200)

    transport = async_transport(
        handler, clock, concurrency_limit=1, minimum_throughput=1, failure_ratio=1.0
    )
    held = asyncio.create_task(get(transport))
    await checkpoint()
    for _ in range(10):
        with pytest.raises(RateLimitedError):
            await get(transport)
    assert clock.sleeps == []
    release.set()
    assert (await held).status_code == 200
    assert (await get(transport)).status_code == 200


# --- the sync breaker: one lock per call while closed -------------------------------


def sync_get(transport: httpx.BaseTransport, url: str = URL) -> httpx.Response:
    return transport.handle_request(httpx.Request("GET", url))


def sync_registry(transport: ResilientTransport) -> HostRegistry:
    built = transport._built  # pyright: ignore[reportPrivateUsage]
    breaker = built.find(SyncBreaker)
    assert breaker is not None
    registry = breaker.strategy.registry
    assert registry is not None
    return registry


def test_the_sync_breaker_seen_closed_still_opens_rejects_and_probes() -> None:
    clock, events = FakeClock(), EventRecorder[HttpEvent]()
    server = script(200, 503, 503, 503, 503, 200)
    transport = sync_transport(server, clock, events=events, **SCENARIO)
    assert sync_get(transport).status_code == 200  # the host is seen closed
    for _ in range(4):  # 4 failures of 5 outcomes: open
        assert sync_get(transport).status_code == 503
    with pytest.raises(BrokenCircuitError):
        sync_get(transport)  # seen before, but no longer closed
    clock.advance(3)
    assert sync_get(transport).status_code == 200  # the probe
    assert transitions(events) == [
        ("http://api.example:80", "closed", "open"),
        ("http://api.example:80", "open", "half_open"),
        ("http://api.example:80", "half_open", "closed"),
    ]


def test_a_busy_sync_host_stays_recently_used_while_new_hosts_arrive() -> None:
    transport = sync_transport(script(200), FakeClock(), maximum_hosts=4)
    sync_get(transport, "http://busy.example/")
    registry = sync_registry(transport)
    busy = registry.breaker("http://busy.example:80")
    for index in range(40):
        sync_get(transport, f"http://host-{index}.example/")
        sync_get(transport, "http://busy.example/")
    assert len(registry) == 4
    assert "http://busy.example:80" in set(registry.keys())
    assert registry.breaker("http://busy.example:80") is busy
