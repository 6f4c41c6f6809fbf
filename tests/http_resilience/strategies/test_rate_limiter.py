"""The time-based rate limiter: a token bucket on the pipeline's clock.

The bucket on plain numbers first (property: over any run, what is let
through never exceeds the burst plus the rate times the time elapsed), then
the strategy in a pipeline on a `FakeClock`: refusals, waits in the queue,
per-host buckets, and a wait that would pass a deadline.
"""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from http_resilience import (
    AsyncResilientTransport,
    HttpEvent,
    RateLimitedError,
    RateLimiterOptions,
    RejectionEvent,
    ResiliencePipeline,
    ResilientTransport,
)
from http_resilience._strategies.rate_limit.bucket import REFUSED, TokenBucket
from http_resilience.testing import EventRecorder, FakeClock
from tests.http_resilience._support.scripted import URL, script

pytestmark = pytest.mark.anyio


# --- the bucket ----------------------------------------------------------------------


def test_a_full_bucket_lets_the_burst_through_then_the_rate() -> None:
    bucket = TokenBucket(rate=10.0, burst=3, queue_limit=0, now=0.0)
    assert [bucket.take(0.0) for _ in range(4)] == [0.0, 0.0, 0.0, REFUSED]
    assert bucket.next_permit(0.0) == pytest.approx(0.1)
    assert bucket.take(0.1) == 0.0
    assert bucket.take(0.1) == REFUSED


def test_a_queue_reserves_permits_in_order() -> None:
    bucket = TokenBucket(rate=2.0, burst=1, queue_limit=2, now=0.0)
    assert bucket.take(0.0) == 0.0
    assert bucket.take(0.0) == pytest.approx(0.5)
    assert bucket.take(0.0) == pytest.approx(1.0)
    assert bucket.take(0.0) == REFUSED  # two already wait
    # A wait longer than the caller may wait reserves nothing.
    bucket = TokenBucket(rate=2.0, burst=1, queue_limit=2, now=0.0)
    bucket.take(0.0)
    assert bucket.take(0.0, limit=0.4) == REFUSED
    assert bucket.take(0.0, limit=0.5) == pytest.approx(0.5)


def test_a_permit_given_back_is_there_for_the_next() -> None:
    bucket = TokenBucket(rate=1.0, burst=1, queue_limit=1, now=0.0)
    bucket.take(0.0)
    assert bucket.take(0.0) == pytest.approx(1.0)
    bucket.give_back(0.0)  # that waiter was cancelled
    assert bucket.take(0.0) == pytest.approx(1.0)
    bucket.give_back(5.0)
    bucket.give_back(5.0)  # never above the burst
    assert [bucket.take(5.0) for _ in range(2)] == [0.0, pytest.approx(1.0)]


@settings(max_examples=500, deadline=None)
@given(
    rate=st.sampled_from([0.5, 1.0, 10.0, 250.0]),
    burst=st.integers(min_value=1, max_value=20),
    queue=st.integers(min_value=0, max_value=5),
    steps=st.lists(st.floats(min_value=0.0, max_value=0.3), max_size=300),
)
def test_over_any_run_the_bucket_never_lets_more_than_burst_plus_rate(
    rate: float, burst: int, queue: int, steps: list[float]
) -> None:
    bucket = TokenBucket(rate=rate, burst=burst, queue_limit=queue, now=0.0)
    now, starts = 0.0, list[float]()
    for step in steps:
        now += step
        wait = bucket.take(now)
        if wait != REFUSED:
            starts.append(now + wait)
    end = max([now, *starts])
    assert len(starts) <= burst + rate * end + 1e-6


# --- in a pipeline -------------------------------------------------------------------


def limited(
    server: Any, clock: FakeClock, events: EventRecorder[HttpEvent], **values: Any
) -> ResilientTransport:
    return ResilientTransport(
        httpx.MockTransport(server),
        pipeline=ResiliencePipeline().add_rate_limiter(**values),
        clock=clock,
        listeners=[events],
    )


def get(transport: httpx.BaseTransport, url: str = URL) -> httpx.Response:
    return transport.handle_request(httpx.Request("GET", url))


def test_beyond_the_rate_a_request_is_refused_with_the_wait() -> None:
    clock, events, server = FakeClock(), EventRecorder[HttpEvent](), script(200)
    transport = limited(server, clock, events, permits_per_second=4, burst=2)
    get(transport)
    get(transport)
    with pytest.raises(RateLimitedError) as refused:
        get(transport)
    assert refused.value.reason == "rate_limit"
    assert refused.value.retry_after == pytest.approx(0.25)
    assert server.hits == 2
    assert [e.reason for e in events.of(RejectionEvent)] == ["rate_limit"]
    clock.advance(0.25)
    assert get(transport).status_code == 200


def test_a_queued_request_waits_on_the_clock_for_its_permit() -> None:
    clock, events, server = FakeClock(), EventRecorder[HttpEvent](), script(200)
    transport = limited(server, clock, events, permits_per_second=2, queue_limit=1)
    get(transport)
    assert get(transport).status_code == 200  # waited half a second
    assert clock.sleeps == [pytest.approx(0.5)]
    assert server.hits == 2


def test_a_wait_past_the_deadline_is_refused_at_once() -> None:
    clock, server = FakeClock(), script(200)
    pipeline = (
        ResiliencePipeline()
        .add_timeout("300ms")
        .add_rate_limiter(permits_per_second=2, queue_limit=5)
    )
    transport = ResilientTransport(
        httpx.MockTransport(server), pipeline=pipeline, clock=clock
    )
    get(transport)
    with pytest.raises(RateLimitedError):
        get(transport)  # the permit comes in 0.5 s; the call has 0.3 s
    assert clock.sleeps == []


def test_each_host_has_its_own_bucket_unless_shared() -> None:
    clock, events, server = FakeClock(), EventRecorder[HttpEvent](), script(200)
    transport = limited(server, clock, events, permits_per_second=1)
    get(transport, "http://a.example/")
    get(transport, "http://b.example/")
    with pytest.raises(RateLimitedError):
        get(transport, "http://a.example/")
    shared = limited(server, FakeClock(), events, permits_per_second=1, per_host=False)
    get(shared, "http://a.example/")
    with pytest.raises(RateLimitedError):
        get(shared, "http://b.example/")


@pytest.mark.asyncio_only("the test itself uses asyncio.CancelledError, asyncio.Event")
async def test_a_cancelled_wait_gives_its_permit_back() -> None:
    clock, server = FakeClock(), script(200)
    pipeline = ResiliencePipeline().add_rate_limiter(
        permits_per_second=1, queue_limit=1
    )
    transport = AsyncResilientTransport(
        httpx.MockTransport(server), pipeline=pipeline, clock=clock
    )
    await transport.handle_async_request(httpx.Request("GET", URL))

    started = asyncio.Event()
    sleep = clock.sleep

    async def held(seconds: float) -> None:
        started.set()
        await asyncio.Event().wait()  # a wait that only a cancel ends
        await sleep(seconds)  # pragma: no cover

    clock.sleep = held  # type: ignore[method-assign]
    waiting = asyncio.ensure_future(
        transport.handle_async_request(httpx.Request("GET", URL))
    )
    await started.wait()
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    clock.sleep = sleep  # type: ignore[method-assign]
    # The reservation was handed back: the next caller may reserve it.
    response = await transport.handle_async_request(httpx.Request("GET", URL))
    assert response.status_code == 200
    assert server.hits == 2


def test_the_options_and_the_label() -> None:
    options = RateLimiterOptions(permits_per_second=20, burst=5)
    assert (options.per_host, options.queue_limit, options.maximum_hosts) == (
        True,
        0,
        1024,
    )
    assert repr(ResiliencePipeline().add_rate_limiter(options)) == (
        "ResiliencePipeline(rate limiter 20/s)"
    )
    with pytest.raises(ValueError, match="permits_per_second"):
        ResiliencePipeline().add_rate_limiter()
