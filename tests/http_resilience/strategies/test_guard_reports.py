"""What the adaptive rules report: a baseline arming, a trip and its rule, a move.

First on plain numbers (the breaker told the time, as in `test_host_baseline`),
then through a client: its events, its log, `health()` and its OpenTelemetry
gauges, on a fake clock.
"""

from __future__ import annotations

import itertools
import logging

import httpx
import pytest

from http_resilience import (
    AdaptiveLimiterOptions,
    BaselineEvent,
    BreakerEvent,
    ConcurrencyLimitEvent,
    HttpEvent,
    HttpResilienceOptions,
    ResiliencePipeline,
    TripRule,
    create_async_client,
    create_client,
    health,
)
from http_resilience._strategies.breaker.state import CircuitBreaker
from http_resilience.otel import HttpMetrics
from http_resilience.testing import EventRecorder, FakeClock
from tests.http_resilience.strategies.test_host_baseline import (
    GUARDS,
    MEDIAN,
    RATE,
    run,
)
from tests.support.otel import recorded

HOST = "http://catalog.local:80"
URL = "http://catalog.local/items"

Report = tuple[bool, TripRule | None, bool, float | None]


def reporting(minimum_throughput: int = 100) -> tuple[CircuitBreaker, list[Report]]:
    """A breaker with the standard rules, and what its baseline reports."""
    reports: list[Report] = []

    def told(moved: CircuitBreaker, tripped: TripRule | None, only_cap: bool) -> None:
        assert moved.baseline is not None
        reports.append((moved.baseline.armed, tripped, only_cap, moved.cap))

    host = CircuitBreaker(
        failure_ratio=0.1,
        minimum_throughput=minimum_throughput,
        sampling_duration=30.0,
        break_duration=5.0,
        guards=GUARDS,
        on_baseline=told,
    )
    return host, reports


def test_a_steady_host_reports_once_when_its_baseline_arms() -> None:
    host, reports = reporting()
    run(host, 0.0, 12_000, 0.2, MEDIAN, seed=1)
    # A 30 ms host's cap stays at the floor: nothing moves after arming.
    assert reports == [(True, None, False, 1.0)]


@pytest.mark.parametrize(
    ("before", "after", "median", "rule"),
    [
        (0.2, 1.0, MEDIAN, "baseline"),  # above the fixed ratio, by its own rate
        (0.0, 1.0, MEDIAN, "failure_ratio"),  # a quiet host: the fixed ratio
        (0.0, 0.0, 5 * MEDIAN, "slow_calls"),
    ],
)
def test_a_trip_disarms_the_baseline_and_names_its_rule(
    before: float, after: float, median: float, rule: TripRule
) -> None:
    host, reports = reporting()
    now, _ = run(host, 0.0, 4_000, before, MEDIAN, seed=2)
    _, refused = run(host, now + RATE, 2_000, after, median, seed=3)
    assert refused is not None
    assert reports[0] == (True, None, False, 1.0)
    assert reports[1] == (False, rule, False, None)


def test_a_host_that_never_armed_trips_without_a_report() -> None:
    host, reports = reporting(minimum_throughput=20)
    _, refused = run(host, 0.0, 150, 1.0, MEDIAN, seed=4)
    assert refused is not None  # at the fixed ratio, after 20 calls
    assert reports == []


def test_a_slower_host_moves_its_cap_and_says_so() -> None:
    host, reports = reporting()
    now, _ = run(host, 0.0, 400, 0.0, 0.5, seed=5)
    run(host, now + RATE, 4_000, 0.0, 0.9, seed=6)
    assert reports[0][:3] == (True, None, False)
    moves = reports[1:]
    assert moves
    assert all(report[:3] == (True, None, True) for report in moves)
    caps = [report[3] for report in reports]
    assert all(cap is not None for cap in caps)
    assert caps[-1] == host.cap
    first, last = reports[0][3], reports[-1][3]
    assert first is not None
    assert last is not None
    assert last > first


class Catalog:
    """A host answering in 30 ms that fails one call in `every` (0: never)."""

    def __init__(self, clock: FakeClock, every: int) -> None:
        self.clock = clock
        self.every = every
        self.calls = 0

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.calls += 1
        self.clock.advance(0.03)
        failed = self.every and self.calls % self.every == 0
        return httpx.Response(503 if failed else 200)


def test_a_client_reports_its_baselines_by_event_log_health_and_gauges(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = FakeClock()
    catalog = Catalog(clock, every=5)
    events: EventRecorder[HttpEvent] = EventRecorder()
    caplog.set_level(logging.INFO, logger="http_resilience")
    with recorded() as otel:
        metrics = HttpMetrics(meter_provider=otel.meter_provider)
        with create_client(
            "catalog",
            HttpResilienceOptions(max_retry_attempts=0),
            transport=httpx.MockTransport(catalog),
            clock=clock,
            listeners=[events, metrics],
        ) as client:
            for _ in range(400):
                client.get(URL)
            (armed,) = events.of(BaselineEvent)
            assert (armed.client, armed.host, armed.armed) == ("catalog", HOST, True)
            assert armed.tripped is None
            assert armed.attempt_timeout == 1.0
            assert 0.15 < armed.error_rate < 0.25
            assert armed.p50 >= 0.03
            (learned,) = health(client).hosts
            assert learned.baseline is not None
            assert learned.baseline.armed
            assert armed.failure_threshold > 0.1  # above the fixed ratio
            where = {"http_resilience.client": "catalog", "server.port": 80}
            assert otel.total("http_resilience.adaptive.attempt_timeout", where) == 1.0
            threshold = otel.total("http_resilience.adaptive.failure_threshold", where)
            assert threshold == armed.failure_threshold

            catalog.every = 1  # down
            for _ in range(400):
                if health(client).hosts[0].refusing:
                    break
                client.get(URL)
        assert health(client).hosts[0].refusing
        tripped = events.of(BaselineEvent)[-1]
        assert (tripped.armed, tripped.tripped, tripped.attempt_timeout) == (
            False,
            "baseline",
            None,
        )
        # The baseline's report comes before the breaker's, with its rule.
        order = [
            type(event)
            for event in events.events
            if isinstance(event, BaselineEvent | BreakerEvent)
        ]
        assert order == [BaselineEvent, BaselineEvent, BreakerEvent]
        assert events.of(BreakerEvent)[0].current == "open"
        rule = {**where, "http_resilience.breaker.rule": "baseline"}
        assert otel.total("http_resilience.adaptive.trips", rule) == 1
        assert otel.total("http_resilience.adaptive.attempt_timeout", where) == 0.0
    said = [
        record.getMessage()
        for record in caplog.records
        if "baseline" in record.getMessage()
    ]
    assert said[0].startswith(f"{HOST} (client 'catalog'): baseline armed: p50 ")
    assert "baseline disarmed (baseline opened the breaker)" in said[-1]


def limited(initial: int) -> ResiliencePipeline:
    return ResiliencePipeline().add_adaptive_limiter(
        AdaptiveLimiterOptions(min_limit=1, max_limit=10, initial_limit=initial)
    )


def test_a_sync_limit_that_moves_reports_each_move() -> None:
    clock = FakeClock()
    events: EventRecorder[HttpEvent] = EventRecorder()
    with recorded() as otel:
        metrics = HttpMetrics(meter_provider=otel.meter_provider)
        with create_client(
            "catalog",
            pipeline=limited(1),
            transport=httpx.MockTransport(Catalog(clock, every=0)),
            clock=clock,
            listeners=[events, metrics],
        ) as client:
            # One caller at a time keeps a limit of 1 busy at a steady 30 ms:
            # it grows by a fifth of its square root per window, about 1 s.
            for _ in range(600):
                client.get(URL)
            (limit,) = health(client).adaptive_limits
        moves = events.of(ConcurrencyLimitEvent)
        assert moves, "18 s of busy windows grew the limit"
        assert moves[0].previous == 1
        for earlier, later in itertools.pairwise(moves):
            assert later.previous == earlier.limit
        assert all(move.host == HOST for move in moves)
        assert limit.host == HOST
        assert limit.limit == moves[-1].limit > 1
        assert (limit.min_limit, limit.max_limit, limit.in_use) == (1, 10, 0)
        assert limit.baseline_rtt == pytest.approx(0.03)
        where = {"http_resilience.client": "catalog", "server.port": 80}
        gauge = otel.total("http_resilience.adaptive.concurrency_limit", where)
        assert gauge == limit.limit


@pytest.mark.anyio
async def test_an_async_limit_shared_by_every_host_reports_as_star() -> None:
    clock = FakeClock()
    events: EventRecorder[HttpEvent] = EventRecorder()
    pipeline = ResiliencePipeline().add_adaptive_limiter(
        AdaptiveLimiterOptions(
            min_limit=1, max_limit=10, initial_limit=1, per_host=False
        )
    )
    catalog = Catalog(clock, every=0)

    async def answer(request: httpx.Request) -> httpx.Response:
        return catalog(request)

    async with create_async_client(
        "catalog",
        pipeline=pipeline,
        transport=httpx.MockTransport(answer),
        clock=clock,
        listeners=[events],
    ) as client:
        for _ in range(600):
            await client.get(URL)
        (limit,) = health(client).adaptive_limits
    moves = events.of(ConcurrencyLimitEvent)
    assert moves
    assert all(move.host == "*" for move in moves)
    assert limit.host == "*"
    assert limit.limit == moves[-1].limit > 1


def test_a_pipeline_without_an_adaptive_limiter_reports_no_limit() -> None:
    with create_client(
        transport=httpx.MockTransport(lambda request: httpx.Response(200))
    ) as client:
        client.get(URL)
        assert health(client).adaptive_limits == ()
