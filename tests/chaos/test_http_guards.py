"""Chaos: the HTTP guards hold under 200-way concurrency against a real server.

The breaker, the concurrency limiter and hedging each promise a bound on what
reaches a host: an open breaker sends nothing, a half-open one one probe, the
limiter at most its permits, hedging at most ``max_hedged_attempts + 1``
copies of one call, the losers cancelled. Every scenario here checks its bound
where it matters, at the fault server (uvicorn on 127.0.0.1, counting per
``?key=``), with a real `httpx.AsyncClient` of at most 16 connections and 200
callers released together.

Every scenario also ends with nothing left behind (asyncio tasks, file
descriptors and sockets back to where they were before the client existed) and
with two planted secrets, a bearer token in ``Authorization`` and a
``?token=`` query parameter, in none of the logs, events and exceptions it
produced: `tests.chaos.http_guards_harness` holds that frame, and the helpers
the scenarios share.

The breaker's break runs on a `FakeClock`, advanced by the test: no test waits
for time to pass. Real time passes only at the server (``/sleep``, ``/hedge``)
and in hedging's delay, which is the behaviour under test.
"""

from __future__ import annotations

import asyncio
from collections import Counter

import httpx
import pytest

from http_resilience import (
    BrokenCircuitError,
    HedgeEvent,
    HttpResilienceOptions,
    RateLimitedError,
    RejectionEvent,
    ResiliencePipeline,
)
from tests.chaos.http_guards_harness import (
    BREAK,
    CALLERS,
    CLOCK,
    HEDGED_CALLS,
    HEDGES,
    SkippingClock,
    all_refused,
    all_through,
    hedged_calls,
    hedging,
    key,
    kinds,
    opened_breaker,
    scenario,
    transitions,
    until,
)
from tests.support.fault_server import FaultServer
from tests.support.figures import record
from tests.support.load import run_load

pytestmark = pytest.mark.anyio


# --- 4. the breaker -----------------------------------------------------------------


async def test_an_open_breaker_lets_no_request_reach_its_host(
    fault_server: FaultServer,
) -> None:
    async with opened_breaker(fault_server) as (run, clock):
        started = CLOCK.monotonic()
        outcomes = await all_refused(run, "open")
        elapsed = CLOCK.monotonic() - started
        waits = {
            error.retry_after
            for error in outcomes
            if isinstance(error, BrokenCircuitError)
        }
        assert waits == {BREAK}
        rejections = [e.reason for e in run.of(RejectionEvent)]
        assert rejections == ["circuit_open"] * CALLERS
        # Half-way through the break, still nothing gets through.
        clock.advance(BREAK / 2)
        await all_refused(run, "still-open")
        assert transitions(run) == [("closed", "open")]
    record(
        "breaker_open",
        callers=CALLERS,
        reached_server=0,
        rejected=CALLERS,
        batch_ms=round(elapsed * 1000, 1),
    )


async def test_a_half_open_breaker_lets_exactly_one_probe_through(
    fault_server: FaultServer,
) -> None:
    async with opened_breaker(fault_server) as (run, clock):
        clock.advance(BREAK)
        probe = key("probe")
        outcomes = await run.wave("/healthy", probe)
        assert kinds(outcomes) == {"200": 1, "BrokenCircuitError": CALLERS - 1}
        await fault_server.wait_idle(probe)
        assert fault_server.hits(probe) == 1
        assert fault_server.max_in_flight(probe) == 1
        assert transitions(run) == [
            ("closed", "open"),
            ("open", "half_open"),
            ("half_open", "closed"),
        ]
        # Closed again: all 200 go through.
        after = await all_through(run, "after")
        assert fault_server.hits(after) == CALLERS
    record(
        "breaker_half_open",
        probe="fast",
        callers=CALLERS,
        probes_at_server=fault_server.hits(probe),
        probe_max_in_flight=fault_server.max_in_flight(probe),
        rejected=CALLERS - 1,
        after_close_at_server=fault_server.hits(after),
    )


async def test_callers_that_arrive_while_a_slow_probe_is_in_flight_are_refused(
    fault_server: FaultServer,
) -> None:
    async with opened_breaker(fault_server) as (run, clock):
        clock.advance(BREAK)
        probe = key("slow-probe")
        first = asyncio.create_task(run.wave("/sleep/0.5", probe))
        try:
            # The probe reaches the server and sleeps there; meanwhile the
            # other 199 of the first wave were refused, and a second wave comes.
            await until(lambda: fault_server.hits(probe) == 1, "the probe arrives")
            second = await run.wave("/sleep/0.5", probe)
            probe_in_flight = not first.done()
        finally:
            outcomes = await first  # the probe's 0.5 s, at most
        assert probe_in_flight, "the probe ended before the second wave came"
        assert kinds(second) == {"BrokenCircuitError": CALLERS}
        assert kinds(outcomes) == {"200": 1, "BrokenCircuitError": CALLERS - 1}
        await fault_server.wait_idle(probe)
        assert fault_server.hits(probe) == 1
        assert fault_server.max_in_flight(probe) == 1
        assert transitions(run)[-1] == ("half_open", "closed")
        after = await all_through(run, "after-slow")
        assert fault_server.hits(after) == CALLERS
    record(
        "breaker_half_open",
        probe="slow (0.5 s at the server)",
        callers=2 * CALLERS,
        probes_at_server=fault_server.hits(probe),
        probe_max_in_flight=fault_server.max_in_flight(probe),
        rejected=2 * CALLERS - 1,
        after_close_at_server=fault_server.hits(after),
    )


async def test_a_failed_probe_opens_the_breaker_again(
    fault_server: FaultServer,
) -> None:
    async with opened_breaker(fault_server) as (run, clock):
        clock.advance(BREAK)
        probe = key("failing-probe")
        outcomes = await run.wave("/status/503", probe)
        # The probe's 503 is the answer (returned, as any failed last attempt).
        assert kinds(outcomes) == {"503": 1, "BrokenCircuitError": CALLERS - 1}
        assert fault_server.hits(probe) == 1
        assert transitions(run) == [
            ("closed", "open"),
            ("open", "half_open"),
            ("half_open", "open"),
        ]
        # A fresh break: nothing through until it is over, then one probe again.
        refused = await all_refused(run, "reopened")
        waits = {e.retry_after for e in refused if isinstance(e, BrokenCircuitError)}
        assert waits == {BREAK}
        clock.advance(BREAK)
        second = key("second-probe")
        outcomes = await run.wave("/healthy", second)
        assert kinds(outcomes) == {"200": 1, "BrokenCircuitError": CALLERS - 1}
        assert fault_server.hits(second) == 1
        assert transitions(run)[-1] == ("half_open", "closed")
    record(
        "breaker_probe_failed",
        callers=CALLERS,
        probes_at_server=fault_server.hits(probe),
        reopened_at_server=0,
        second_probes_at_server=fault_server.hits(second),
    )


# --- 5. the concurrency limiter -----------------------------------------------------

LIMIT = 8
QUEUE = 32
LIMITER = HttpResilienceOptions(
    max_retry_attempts=0, concurrency_limit=LIMIT, queue_limit=QUEUE
)
WORK = 0.05  # seconds each limited request spends at the server
LOAD_RATE = 300.0  # arrivals per second
LOAD_DURATION = 2.0  # seconds


async def test_the_limiter_keeps_the_server_within_its_limit(
    fault_server: FaultServer,
) -> None:
    route = f"/sleep/{WORK}"
    async with scenario(fault_server, options=LIMITER) as run:
        burst = key("burst")
        outcomes = await run.wave(route, burst)
        counted = kinds(outcomes)
        # 200 at once: the permits and the queue are taken, the rest refused.
        assert counted == {
            "200": LIMIT + QUEUE,
            "RateLimitedError": CALLERS - LIMIT - QUEUE,
        }
        refusals = [e for e in outcomes if isinstance(e, RateLimitedError)]
        assert all("concurrency limit" in str(e) for e in refusals)
        await fault_server.wait_idle(burst)
        assert fault_server.hits(burst) == counted["200"]
        assert fault_server.max_in_flight(burst) <= LIMIT
        burst_peak = fault_server.max_in_flight(burst)

        load = key("load")

        async def call(index: int) -> None:
            response = await run.get(route, load)
            assert response.status_code == 200

        result = await run_load(call, rate=LOAD_RATE, duration=LOAD_DURATION)
        await fault_server.wait_idle(load)
        assert result.abandoned == 0
        assert set(result.failed) == {"RateLimitedError"}
        assert fault_server.hits(load) == result.completed
        assert fault_server.max_in_flight(load) <= LIMIT
        rejections = run.of(RejectionEvent)
        assert {e.reason for e in rejections} == {"concurrency_limit"}
        assert len(rejections) == len(refusals) + result.failed["RateLimitedError"]
    record(
        "limiter",
        limit=LIMIT,
        queue=QUEUE,
        burst_callers=CALLERS,
        burst_admitted=counted["200"],
        burst_rejected=len(refusals),
        burst_max_in_flight_at_server=burst_peak,
        load_rate=LOAD_RATE,
        load_seconds=LOAD_DURATION,
        load_arrivals=result.arrivals,
        load_completed=result.completed,
        rejected=result.failed["RateLimitedError"],
        dropped_arrivals=result.dropped,
        max_in_flight_at_server=fault_server.max_in_flight(load),
        p50_ms=round(result.p50 * 1000, 1),
        p99_ms=round(result.p99 * 1000, 1),
    )


# --- 6. hedging -----------------------------------------------------------------------


async def test_hedging_keeps_each_call_within_its_copies_and_cancels_the_losers(
    fault_server: FaultServer,
) -> None:
    # The first copy answers after 0.12 s; the hedges go after 0.03 and 0.06 s,
    # while it is still at the server, and would take 5 s: both lose.
    delay, work, later = 0.03, 0.12, "/sleep/5"
    pipeline = hedging(delay)
    async with scenario(fault_server, pipeline=pipeline, later_copies_to=later) as run:
        started = CLOCK.monotonic()
        keys, _ = await hedged_calls(run, f"/sleep/{work}")
        elapsed = CLOCK.monotonic() - started
        peaks = Counter(fault_server.max_in_flight(name) for name in keys)
        hits = {name: fault_server.hits(name) for name in keys}
        aborted = {name: fault_server.aborted(name) for name in keys}
        assert max(peaks) <= HEDGES + 1
        assert max(hits.values()) <= HEDGES + 1
        # One copy answered each call; every other was cancelled at the server.
        answered = {name: hits[name] - aborted[name] for name in keys}
        assert set(answered.values()) == {1}
        # The bound was reached, not just respected.
        assert peaks[HEDGES + 1] > 0
        # No copy reached the server but the first and the hedges reported.
        hedges = run.of(HedgeEvent)
        assert sum(hits.values()) <= CALLERS + len(hedges)
    record(
        "hedging",
        route=f"/sleep/{work}, later copies {later}",
        hedges=HEDGES,
        delay_ms=delay * 1000,
        calls=CALLERS,
        calls_in_flight=HEDGED_CALLS,
        max_in_flight_per_call=max(peaks),
        calls_by_peak=dict(sorted(peaks.items())),
        copies_at_server=sum(hits.values()),
        losers_aborted=sum(aborted.values()),
        hedge_events=len(hedges),
        seconds=round(elapsed, 2),
    )


async def test_a_hedge_that_answers_first_cancels_the_slow_first_copy(
    fault_server: FaultServer,
) -> None:
    # The first copy would take 8 s; the hedge, sent after the delay, answers
    # at once. Had the first copy been left running, wait_idle would time out.
    delay = 0.03
    async with scenario(fault_server, pipeline=hedging(delay)) as run:
        started = CLOCK.monotonic()
        keys, outcomes = await hedged_calls(run, "/hedge/8")
        elapsed = CLOCK.monotonic() - started
        winners = Counter(
            outcome.json()["hit"]
            for outcome in outcomes
            if isinstance(outcome, httpx.Response)
        )
        hits = {name: fault_server.hits(name) for name in keys}
        aborted = {name: fault_server.aborted(name) for name in keys}
        assert max(fault_server.max_in_flight(name) for name in keys) <= HEDGES + 1
        # The slow first copy never answered: a hedge did, every time.
        assert 1 not in winners
        assert all(aborted[name] >= 1 for name in keys)
        assert all(hits[name] - aborted[name] >= 1 for name in keys)
        delays = [e for e in run.of(HedgeEvent) if e.reason == "delay"]
        assert len(delays) >= CALLERS
    record(
        "hedging_first_copy_slow",
        route="/hedge/8",
        hedges=HEDGES,
        delay_ms=delay * 1000,
        calls=CALLERS,
        max_in_flight_per_call=max(fault_server.max_in_flight(name) for name in keys),
        winners_by_copy=dict(sorted(winners.items())),
        copies_at_server=sum(hits.values()),
        losers_aborted=sum(aborted.values()),
        seconds=round(elapsed, 2),
    )


# --- 4 and 6 together: hedged reads through a half-open breaker ----------------------


async def test_hedged_reads_through_a_half_open_breaker_send_one_probe_and_keep_it(
    fault_server: FaultServer,
) -> None:
    clock = SkippingClock()
    pipeline = (
        ResiliencePipeline()
        .add_hedging(delay=0.05, max_hedged_attempts=HEDGES)
        .add_breaker(
            minimum_throughput=HEDGES + 1,
            failure_ratio=0.5,
            sampling_duration=10,
            break_duration=BREAK,
        )
        # Generous: the last wave's 200 callers and their hedges share 16
        # connections, and on a slow 2-core machine the last copies wait in
        # the pool well over 2 s. The probe's 0.3 s is far inside it.
        .add_timeout("10s")
    )
    async with scenario(fault_server, pipeline=pipeline, clock=clock) as run:
        # One call's three failing copies open it.
        failing = key("hedged-failing")
        assert (await run.get("/status/503", failing)).status_code == 503
        assert fault_server.hits(failing) == HEDGES + 1
        assert transitions(run) == [("closed", "open")]
        await all_refused(run, "hedged-open")
        clock.advance(BREAK)
        # The probe takes 0.3 s at the server: its own hedges go after 0.05 s
        # and 0.1 s, and are refused, since the probe is in flight.
        probe = key("hedged-probe")
        before = len(run.events)
        outcomes = await run.wave("/sleep/0.3", probe)
        await fault_server.wait_idle(probe)
        assert fault_server.hits(probe) == 1
        assert fault_server.max_in_flight(probe) == 1
        # The probe was not cancelled by its own refused hedges: it answered,
        # and closed the breaker.
        assert fault_server.aborted(probe) == 0
        assert kinds(outcomes) == {"200": 1, "BrokenCircuitError": CALLERS - 1}
        assert transitions(run)[-1] == ("half_open", "closed")
        phase = run.events[before:]
        probe_hedges = [e for e in phase if isinstance(e, HedgeEvent)]
        refusals = [e for e in phase if isinstance(e, RejectionEvent)]
        assert probe_hedges, "the probe answered before its first hedge went"
        # Every caller but the probe's refused, and every hedge of the probe.
        assert len(refusals) == CALLERS - 1 + len(probe_hedges)
        after = await all_through(run, "hedged-after")
    record(
        "hedging_half_open_breaker",
        hedges=HEDGES,
        callers=CALLERS,
        probes_at_server=fault_server.hits(probe),
        probe_aborted=fault_server.aborted(probe),
        rejected=CALLERS - 1,
        probe_hedges_refused=len(probe_hedges),
        after_close_at_server=fault_server.hits(after),
    )
