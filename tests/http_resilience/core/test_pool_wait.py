"""A wait for a slot of the client's own pool is never evidence against the host.

httpcore starts its pool timeout afresh each time a queued request is woken and
finds the connection taken, so behind a busy pool nothing of httpx's ends the
wait. The attempt timeout bounds the host's time only: its clock starts when the
attempt leaves the pool's queue. The wait itself is bounded by the deadline
around the attempt's (the total timeout), and a wait cut there is a local
refusal: `RateLimitedError` with reason ``"concurrency_limit"``, a
`RejectionEvent`, no breaker evidence, no retry into the same full pool, and no
request sent.

A real uvicorn server on 127.0.0.1 and real httpx pools of one or two
connections; the real clock, bounded by counts and generous margins. The sync
tests, in `test_pool_wait_sync`, are generated from these by
``tools/unasync.py``: edit this module and run the script; what differs by
colour (tasks or threads) is in `pool_callers`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from http_resilience import (
    AsyncResilientTransport,
    AttemptTimeoutError,
    BreakerEvent,
    HttpEvent,
    RateLimitedError,
    RejectionEvent,
    ResiliencePipeline,
    RetryEvent,
    TimeoutEvent,
    TotalTimeoutError,
)
from http_resilience.testing import EventRecorder
from tests.http_resilience._support.scripted import options
from tests.support.fault_server import FaultServer

from .pool_callers import CALLERS, gather, started

pytestmark = pytest.mark.anyio  # unasync: async-only

# The server's counts are per key, for the whole session: each colour its own.
SIDE = "async"
TWO = httpx.Limits(max_connections=2)
ONE = httpx.Limits(max_connections=1)
# A breaker that opens on 2 failures in 2: any evidence at all would open it.
TOUCHY: dict[str, Any] = {
    "minimum_throughput": 2,
    "failure_ratio": 0.5,
    "break_duration": 30,
}


def no_host_evidence(events: EventRecorder[HttpEvent]) -> None:
    assert events.of(BreakerEvent) == []
    assert events.of(RetryEvent) == []
    assert [e.kind for e in events.of(TimeoutEvent) if e.kind == "attempt"] == []


# --- twenty callers on two connections, a slow but healthy host -----------------
# 20 answers of 0.2 s on 2 connections take 2 s at least: the queue outlasts the
# 1 s attempt timeout, never the 30 s total timeout.


@pytest.mark.asyncio_only(  # unasync: async-only
    "its helpers use asyncio.gather"
)
async def test_twenty_callers_on_a_pool_of_two_all_get_their_answer(
    fault_server: FaultServer,
) -> None:
    events = EventRecorder[HttpEvent]()
    transport = AsyncResilientTransport(
        httpx.AsyncHTTPTransport(limits=TWO),
        options=options(attempt_timeout=1.0, **TOUCHY),
        name="inventory",
        listeners=[events],
    )
    key = f"pool-wait-healthy-{SIDE}"
    url = f"{fault_server.url}/sleep/0.2?key={key}"
    async with httpx.AsyncClient(transport=transport) as client:
        outcomes = await gather(client, url)
        after = await client.get(url)
    assert outcomes == {"200": CALLERS}
    assert after.status_code == 200
    no_host_evidence(events)
    assert events.of(TimeoutEvent) == []
    assert fault_server.max_in_flight(key) <= 2


# --- a queue longer than the total timeout: refused here, never sent ------------
# 20 answers of 0.5 s on 1 connection take 10 s, each caller has 3 s: most are
# still queued when their wait runs out. One that got a connection too late to
# be answered in time ends in the total timeout, which is no evidence either.
# The attempt timeout leaves a slow machine 1.5 s beyond each answer's 0.5 s.

SHORT_TOTAL: dict[str, Any] = {
    "attempt_timeout": 2.0,
    "total_request_timeout": 3.0,
    **TOUCHY,
}


def check_refusals(
    outcomes: Counter[str], events: EventRecorder[HttpEvent], hits: Callable[[], int]
) -> None:
    assert set(outcomes) <= {"200", "refused", "total"}, outcomes
    assert sum(outcomes.values()) == CALLERS
    assert outcomes["refused"] >= 1
    refusals = [event.reason for event in events.of(RejectionEvent)]
    assert refusals == ["concurrency_limit"] * outcomes["refused"]
    no_host_evidence(events)
    # A refused request never reached the server.
    assert hits() <= CALLERS - outcomes["refused"]


@pytest.mark.asyncio_only(  # unasync: async-only
    "its helpers use asyncio.gather"
)
async def test_a_queue_past_the_total_timeout_is_refused_locally(
    fault_server: FaultServer,
) -> None:
    events = EventRecorder[HttpEvent]()
    transport = AsyncResilientTransport(
        httpx.AsyncHTTPTransport(limits=ONE),
        options=options(**SHORT_TOTAL),
        name="inventory",
        listeners=[events],
    )
    key = f"pool-wait-refused-{SIDE}"
    url = f"{fault_server.url}/sleep/0.5?key={key}"
    async with httpx.AsyncClient(transport=transport) as client:
        outcomes = await gather(client, url)
        await fault_server.wait_idle(key)
        check_refusals(outcomes, events, lambda: fault_server.hits(key))
        # The breaker stayed closed: the host is called as before.
        after = await client.get(url)
    assert after.status_code == 200


# --- the attempt's clock starts when it leaves the queue ------------------------
# One connection: the first call holds it 1.5 s, the second waits that long for
# it and then takes 1 s on the host. 2.5 s from its start, but the host had it
# for 1 s of its 2 s attempt timeout: an answer, not an AttemptTimeoutError.

LATE_SLOT: dict[str, Any] = {
    "attempt_timeout": 2.0,
    "max_retry_attempts": 0,
    **TOUCHY,
}


@pytest.mark.asyncio_only(  # unasync: async-only
    "its helpers use asyncio.Event, asyncio.ensure_future"
)
async def test_the_attempt_timeout_runs_from_when_the_attempt_got_a_connection(
    fault_server: FaultServer,
) -> None:
    events = EventRecorder[HttpEvent]()
    transport = AsyncResilientTransport(
        httpx.AsyncHTTPTransport(limits=ONE),
        options=options(**LATE_SLOT),
        name="inventory",
        listeners=[events],
    )
    base = f"{fault_server.url}/sleep"
    key = f"late-slot-{SIDE}"
    async with (
        httpx.AsyncClient(transport=transport) as client,
        started(client, f"{base}/1.5?key={key}") as first,
    ):
        second = await client.get(f"{base}/1.0?key={key}")
        answer = await first()
    assert answer.status_code == 200
    assert second.status_code == 200
    assert events.of(TimeoutEvent) == []
    no_host_evidence(events)


async def test_the_host_still_has_only_the_attempt_timeout(
    fault_server: FaultServer,
) -> None:
    # The attempt timeout still bounds the host's time: a host that takes
    # longer than it is cut, and that is evidence, as it always was.
    transport = AsyncResilientTransport(
        httpx.AsyncHTTPTransport(limits=ONE),
        options=options(attempt_timeout=0.3, max_retry_attempts=0),
        name="inventory",
    )
    async with httpx.AsyncClient(transport=transport) as client:
        with pytest.raises(
            AttemptTimeoutError,
            match=r"attempt 1 timed out after [\d.]+ s \(attempt timeout 0\.3 s\)",
        ):
            await client.get(f"{fault_server.url}/sleep/5?key=pool-wait-host-slow")


# --- the refusal's message -------------------------------------------------------
# One connection, held by a streamed answer: the next call can only wait.

WAIT_OPTIONS: dict[str, Any] = {"attempt_timeout": 0.3, "total_request_timeout": 0.5}


def refused_message(host: str) -> str:
    return (
        f"GET {host} (client 'inventory'): no connection of the client's own "
        "pool came free within the total timeout of 0.5 s; the request was not sent"
    )


@pytest.mark.asyncio_only(  # unasync: async-only
    "counts under a fixed key of the session's one server"
)
async def test_the_refusal_names_the_client_and_the_timeout_that_bounded_the_wait(
    fault_server: FaultServer,
) -> None:
    events = EventRecorder[HttpEvent]()
    transport = AsyncResilientTransport(
        httpx.AsyncHTTPTransport(limits=ONE),
        options=options(**WAIT_OPTIONS),
        name="inventory",
        listeners=[events],
    )
    key = f"pool-wait-message-{SIDE}"
    url = f"{fault_server.url}/healthy?key={key}"
    async with (
        httpx.AsyncClient(transport=transport) as client,
        client.stream("GET", url) as holding,
    ):
        assert holding.status_code == 200
        with pytest.raises(RateLimitedError) as raised:
            await client.get(url)
    assert str(raised.value) == refused_message(fault_server.url)
    assert raised.value.reason == "concurrency_limit"
    assert [event.reason for event in events.of(RejectionEvent)] == [
        "concurrency_limit"
    ]
    assert events.of(TimeoutEvent) == []
    await fault_server.wait_idle(key)
    assert fault_server.hits(key) == 1


@pytest.mark.asyncio_only(  # unasync: async-only
    "its helpers use asyncio.Event, asyncio.ensure_future"
)
async def test_a_total_timeout_bounds_the_whole_call_pool_wait_included(
    fault_server: FaultServer,
) -> None:
    # A total timeout (around the retry) that cuts with no attempt timeout inside:
    # the caller's whole time, so the wait for the connection counts. 1 s queued
    # and 1 s on the host pass its 1.5 s.
    pipeline = ResiliencePipeline().add_timeout(1.5).add_retry(max_retry_attempts=1)
    events = EventRecorder[HttpEvent]()
    transport = AsyncResilientTransport(
        httpx.AsyncHTTPTransport(limits=ONE),
        pipeline=pipeline,
        name="inventory",
        listeners=[events],
    )
    base = f"{fault_server.url}/sleep"
    key = f"lone-total-{SIDE}"
    async with (
        httpx.AsyncClient(transport=transport) as client,
        started(client, f"{base}/1.0?key={key}") as first,
    ):
        with pytest.raises(TotalTimeoutError, match=r"\(total timeout 1\.5 s\)"):
            await client.get(f"{base}/1.0?key={key}")
        answer = await first()
    assert answer.status_code == 200
    assert [event.kind for event in events.of(TimeoutEvent)] == ["total"]
