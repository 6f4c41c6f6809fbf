"""A hedge refused inside the hedging (breaker, limiter) leaves the copies in flight.

Regression: a hedged copy refused by a half-open breaker, whose one probe was
the call's own first copy in flight, ended the call with `BrokenCircuitError`
and cancelled the probe. Against a host slower than the hedge delay the
breaker then never closed: every probe was cancelled by its own hedge.
"""

from __future__ import annotations

import asyncio

import httpx
import pytest
from anyio.lowlevel import checkpoint

from http_resilience import (
    AsyncResilientTransport,
    BreakerEvent,
    BrokenCircuitError,
    HttpEvent,
    RejectionEvent,
    ResiliencePipeline,
)
from http_resilience.testing import EventRecorder, FakeClock
from tests.http_resilience._support.scripted import URL

pytestmark = pytest.mark.anyio

BREAK = 3.0


class Host:
    """Answers 503 while `failing`, else `status` once `release` is set."""

    def __init__(self) -> None:
        self.failing = True
        self.status = 200
        self.release = asyncio.Event()
        self.arrived = 0
        self.cancelled = 0

    async def __call__(self, request: httpx.Request) -> httpx.Response:
        self.arrived += 1
        if self.failing:
            return httpx.Response(503)
        try:
            await self.release.wait()
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        return httpx.Response(self.status)


def transport(
    host: Host,
    pipeline: ResiliencePipeline,
    clock: FakeClock,
    events: EventRecorder[HttpEvent],
) -> AsyncResilientTransport:
    return AsyncResilientTransport(
        httpx.MockTransport(host),
        pipeline=pipeline,
        name="catalog",
        clock=clock,
        listeners=[events],
    )


async def get(resilient: AsyncResilientTransport) -> httpx.Response:
    return await resilient.handle_async_request(httpx.Request("GET", URL))


def refusals(events: EventRecorder[HttpEvent]) -> list[str]:
    return [event.reason for event in events.of(RejectionEvent)]


async def until_refused(
    events: EventRecorder[HttpEvent], count: int, call: asyncio.Task[httpx.Response]
) -> None:
    """Let the loop run until `count` copies were refused; the call goes on."""
    for _ in range(100):
        if len(refusals(events)) >= count:
            break
        await checkpoint()
        assert not call.done(), call
    assert len(refusals(events)) == count


def breaker_pipeline() -> ResiliencePipeline:
    return (
        ResiliencePipeline()
        .add_hedging(delay=0.2, max_hedged_attempts=2)
        .add_breaker(minimum_throughput=3, failure_ratio=0.5, break_duration=BREAK)
    )


def limiter_pipeline() -> ResiliencePipeline:
    return (
        ResiliencePipeline()
        .add_hedging(delay=0.2, max_hedged_attempts=1)
        .add_limiter(concurrency_limit=1, queue_limit=0)
    )


@pytest.mark.asyncio_only("the test itself uses asyncio.create_task")
async def test_a_probe_is_not_cancelled_by_its_own_refused_hedges() -> None:
    clock, host, events = FakeClock(), Host(), EventRecorder[HttpEvent]()
    resilient = transport(host, breaker_pipeline(), clock, events)
    assert (await get(resilient)).status_code == 503  # three copies open it
    assert host.arrived == 3
    clock.advance(BREAK)
    host.failing = False
    probe = asyncio.create_task(get(resilient))
    # The probe hangs; both hedges go (the fake clock spends each delay at
    # once) and are refused, since the probe is in flight.
    await until_refused(events, 2, probe)
    assert refusals(events) == ["circuit_open", "circuit_open"]
    host.release.set()
    response = await probe
    assert response.status_code == 200
    assert (host.arrived, host.cancelled) == (4, 0)
    transitions = [(e.previous, e.current) for e in events.of(BreakerEvent)]
    assert transitions == [
        ("closed", "open"),
        ("open", "half_open"),
        ("half_open", "closed"),
    ]


async def test_a_copy_refused_with_nothing_in_flight_still_ends_the_call() -> None:
    clock, host, events = FakeClock(), Host(), EventRecorder[HttpEvent]()
    resilient = transport(host, breaker_pipeline(), clock, events)
    await get(resilient)
    with pytest.raises(BrokenCircuitError, match="circuit open"):
        await get(resilient)
    assert host.arrived == 3
    assert clock.sleeps == []  # refused at once: no hedge was waited for


@pytest.mark.asyncio_only("the test itself uses asyncio.create_task")
async def test_a_hedge_refused_by_a_full_limiter_leaves_the_first_copy_to_answer() -> (
    None
):
    clock, host, events = FakeClock(), Host(), EventRecorder[HttpEvent]()
    host.failing = False
    resilient = transport(host, limiter_pipeline(), clock, events)
    call = asyncio.create_task(get(resilient))
    await until_refused(events, 1, call)
    assert refusals(events) == ["concurrency_limit"]
    host.release.set()
    assert (await call).status_code == 200
    assert (host.arrived, host.cancelled) == (1, 0)


@pytest.mark.asyncio_only("the test itself uses asyncio.create_task")
async def test_a_copy_in_flight_that_fails_after_a_refusal_decides_the_call() -> None:
    clock, host, events = FakeClock(), Host(), EventRecorder[HttpEvent]()
    host.failing = False
    host.status = 503
    resilient = transport(host, limiter_pipeline(), clock, events)
    call = asyncio.create_task(get(resilient))
    await until_refused(events, 1, call)
    host.release.set()
    assert (await call).status_code == 503
    assert (host.arrived, host.cancelled) == (1, 0)
