"""The retry budget: the account on plain numbers, then the pipeline on a `FakeClock`.

Within a window, retries (and hedged copies) are at most ``ratio`` times the
calls plus ``min_per_second`` for each second the budget has lived (one second
of it up front), at most a window's worth. A refused retry is neither waited
for nor sent; a retry refused in this process is given back.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import httpx
import pytest
from anyio.lowlevel import checkpoint
from hypothesis import given, settings
from hypothesis import strategies as st

from http_resilience import (
    AsyncResilientTransport,
    BrokenCircuitError,
    HedgeEvent,
    HttpEvent,
    HttpResilienceOptions,
    RejectionEvent,
    ResiliencePipeline,
    ResilientTransport,
    RetryBudgetOptions,
    RetryEvent,
)
from http_resilience._pipelines.standard import standard_steps
from http_resilience._strategies.budget.budget import (
    BUCKETS,
    BudgetRegistry,
    RetryBudget,
)
from http_resilience.testing import EventRecorder, FakeClock
from tests.http_resilience._support.scripted import (
    URL,
    async_transport,
    no_jitter,
    script,
    sync_transport,
)
from tests.http_resilience.strategies.test_hedging import Hedged

pytestmark = pytest.mark.anyio


def account(ratio: float, per_second: float, window: float = 10.0) -> RetryBudget:
    return RetryBudget(ratio=ratio, min_per_second=per_second, window=window, now=0.0)


def withdrawn(budget: RetryBudget, now: float, tries: int) -> int:
    return sum(budget.withdraw(now) for _ in range(tries))


# --- the account ----------------------------------------------------------------


def test_retries_are_a_share_of_the_first_attempts() -> None:
    budget = account(ratio=0.2, per_second=0)
    for _ in range(10):
        budget.deposit(1.0)
    assert withdrawn(budget, 1.0, 5) == 2
    budget.deposit(1.0)
    assert not budget.withdraw(1.0)  # 11 calls: still 2.2
    for _ in range(4):
        budget.deposit(1.0)
    assert budget.withdraw(1.0)  # 15 calls: 3
    assert (budget.first_attempts, budget.retries) == (15, 3)


def test_five_calls_buy_one_retry_at_a_fifth_whatever_the_rounding() -> None:
    budget = account(ratio=0.2, per_second=0)
    for _ in range(5):
        budget.deposit(0.0)
    assert withdrawn(budget, 0.0, 2) == 1


def test_the_floor_starts_with_one_second_and_accrues_up_to_a_window() -> None:
    budget = account(ratio=0.0, per_second=10, window=10.0)
    assert withdrawn(budget, 0.0, 20) == 10  # one second's worth up front
    assert withdrawn(budget, 0.5, 20) == 5  # 15 in all by then
    # At 9.5 s the floor is the window's 100; the 15 spent are still in it.
    assert withdrawn(budget, 9.5, 200) == 85


def test_the_floor_never_exceeds_a_window_however_long_the_budget_lived() -> None:
    budget = account(ratio=0.0, per_second=10, window=10.0)
    assert withdrawn(budget, 1_000.0, 500) == 100


def test_first_attempts_and_retries_leave_the_window() -> None:
    budget = account(ratio=1.0, per_second=0, window=10.0)
    for _ in range(3):
        budget.deposit(0.5)
    assert withdrawn(budget, 0.5, 5) == 3
    # 9.5 s later the same bucket is still in the window: nothing more.
    assert withdrawn(budget, 9.9, 5) == 0
    # Once it slid out, calls and retries count afresh.
    assert withdrawn(budget, 10.5, 5) == 0
    budget.deposit(10.5)
    assert withdrawn(budget, 10.5, 5) == 1
    assert (budget.first_attempts, budget.retries) == (1, 1)


def test_the_window_slides_bucket_by_bucket() -> None:
    budget = account(ratio=1.0, per_second=0, window=10.0)
    for second in range(10):
        budget.deposit(second + 0.5)  # one call in each bucket
    assert budget.first_attempts == BUCKETS
    assert withdrawn(budget, 10.5, 20) == 9  # the first bucket left
    assert budget.first_attempts == 9


def test_a_refund_gives_a_retry_back() -> None:
    budget = account(ratio=1.0, per_second=0)
    budget.deposit(0.0)
    assert budget.withdraw(0.0)
    assert not budget.withdraw(0.0)
    budget.refund(2.0)  # a later bucket: the refund finds the retry's
    assert budget.retries == 0
    assert budget.withdraw(2.0)
    budget.refund(2.0)
    budget.refund(2.0)  # nothing left to refund: no credit appears
    assert budget.retries == 0
    assert budget.withdraw(2.0)
    assert not budget.withdraw(2.0)


def test_a_clock_that_goes_back_counts_in_the_current_bucket() -> None:
    budget = account(ratio=1.0, per_second=0)
    budget.deposit(5.0)
    budget.deposit(4.0)  # the clock went back: still counted
    assert withdrawn(budget, 3.0, 5) == 2


@settings(max_examples=300, deadline=None)
@given(
    ratio=st.sampled_from([0.0, 0.1, 0.2, 0.5, 1.0, 3.0]),
    per_second=st.integers(min_value=0, max_value=20),
    events=st.lists(
        st.tuples(st.floats(min_value=0.0, max_value=0.7), st.booleans()),
        max_size=300,
    ),
)
def test_within_one_window_retries_never_exceed_the_rule(
    ratio: float, per_second: int, events: list[tuple[float, bool]]
) -> None:
    window = 10.0
    budget = account(ratio=ratio, per_second=per_second, window=window)
    now, calls, retries = 0.0, 0, 0
    for step, is_call in events:
        if now + step >= window - window / BUCKETS:
            break  # nothing has left the window yet: the whole run is in it
        now += step
        if is_call:
            budget.deposit(now)
            calls += 1
        elif budget.withdraw(now):
            retries += 1
        floor = min(per_second * (now + 1.0), per_second * window)
        assert retries <= ratio * calls + floor + 1e-6
    # And the rule is not stricter than it says: one more is refused only at it.
    if not budget.withdraw(now):
        floor = min(per_second * (now + 1.0), per_second * window)
        assert retries + 1 > ratio * calls + floor - 1e-6


@settings(max_examples=200, deadline=None)
@given(
    gaps=st.lists(st.floats(min_value=0.0, max_value=3.0), min_size=1, max_size=400),
)
def test_over_any_run_retries_stay_near_the_share_plus_the_floor(
    gaps: list[float],
) -> None:
    # Every call fails and asks for a retry: the budget alone decides.
    budget = account(ratio=0.2, per_second=10, window=10.0)
    now, calls, retries = 0.0, 0, 0
    for gap in gaps:
        now += gap
        budget.deposit(now)
        calls += 1
        retries += withdrawn(budget, now, 3)
    # A call counts for up to a window and a bucket: over a long run the share
    # is at most 10% above the ratio; the floor at most one window above time.
    assert retries <= 0.2 * 1.1 * calls + 10 * (now + 1.0 + 10.0) + 1


# --- the registry -----------------------------------------------------------------


def test_the_registry_keeps_at_most_maximum_hosts_least_recent_out() -> None:
    made: list[RetryBudget] = []

    def new() -> RetryBudget:
        made.append(account(0.2, 10))
        return made[-1]

    registry = BudgetRegistry(2, new)
    first = registry.budget("http://a:80")
    registry.budget("http://b:80")
    assert registry.budget("http://a:80") is first  # a is now the most recent
    registry.budget("http://c:80")
    assert registry.keys() == ["http://a:80", "http://c:80"]
    assert len(registry) == 2
    assert len(made) == 3
    with pytest.raises(ValueError, match="maximum_hosts must be at least 1"):
        BudgetRegistry(0, new)


# --- the pipeline -----------------------------------------------------------------

SCARCE: dict[str, Any] = {"retry_budget_ratio": 0.2, "retry_budget_min_per_second": 0}


def test_an_outage_gets_a_fifth_more_requests_not_four_times_as_many() -> None:
    clock, server, events = FakeClock(), script(503), EventRecorder[HttpEvent]()
    transport = sync_transport(server, clock, events=events, **SCARCE)
    statuses = [transport.handle_request(httpx.Request("GET", URL)) for _ in range(20)]
    assert {response.status_code for response in statuses} == {503}
    # 20 calls buy 4 retries; without the budget it would be 80 requests.
    assert server.hits == 24
    refusals = events.of(RejectionEvent)
    assert {event.reason for event in refusals} == {"retry_budget"}
    assert len(refusals) == 20  # one per call: its first refused retry
    assert len(events.of(RetryEvent)) == 4


async def test_the_async_transport_spends_the_same_budget() -> None:
    clock, server, events = FakeClock(), script(503), EventRecorder[HttpEvent]()
    transport = async_transport(server, clock, events=events, **SCARCE)
    for _ in range(20):
        response = await transport.handle_async_request(httpx.Request("GET", URL))
        assert response.status_code == 503
    assert server.hits == 24
    assert len(events.of(RetryEvent)) == 4


def test_a_refused_retry_is_not_waited_for_and_returns_the_last_answer() -> None:
    clock, server = FakeClock(), script(503, 200)
    transport = sync_transport(server, clock, **SCARCE)
    response = transport.handle_request(httpx.Request("GET", URL))
    assert response.status_code == 503
    assert server.hits == 1
    assert clock.sleeps == []


def test_a_refused_retry_after_a_transport_error_raises_it() -> None:
    clock = FakeClock()
    server = script(httpx.ConnectError("refused"), 200)
    transport = sync_transport(server, clock, **SCARCE)
    with pytest.raises(httpx.ConnectError):
        transport.handle_request(httpx.Request("GET", URL))
    assert (server.hits, clock.sleeps) == (1, [])


def test_a_quiet_clients_first_failure_is_retried_by_the_floor() -> None:
    # The defaults: 0.2 per call and 10 a second, one second of it up front.
    clock, server = FakeClock(), script(503, 503, 200)
    transport = sync_transport(server, clock)
    assert transport.handle_request(httpx.Request("GET", URL)).status_code == 200
    assert server.hits == 3


def test_each_host_has_its_own_budget_unless_shared() -> None:
    def outage(**values: Any) -> int:
        clock, server = FakeClock(), script(503)
        transport = sync_transport(server, clock, **SCARCE, **values)
        for _ in range(4):
            transport.handle_request(httpx.Request("GET", "http://a.example/"))
        transport.handle_request(httpx.Request("GET", "http://b.example/"))
        return server.hits

    # Per host: a's four calls buy 0.8 of a retry, b's one call 0.2: none.
    assert outage() == 4 + 1
    # Shared: b's call is the fifth, and 5 x 0.2 buys a retry.
    assert outage(budget_per_host=False) == 4 + 1 + 1


def test_without_a_budget_every_call_gets_its_retries() -> None:
    clock, server = FakeClock(), script(503)
    transport = sync_transport(
        server, clock, retry_budget_ratio=None, retry_budget_min_per_second=0
    )
    for _ in range(5):
        transport.handle_request(httpx.Request("GET", URL))
    assert server.hits == 20


def test_a_retry_an_open_breaker_refuses_is_given_back() -> None:
    clock, server, events = FakeClock(), script(503), EventRecorder[HttpEvent]()
    pipeline = (
        ResiliencePipeline()
        .add_retry_budget(retry_budget_ratio=2.0, retry_budget_min_per_second=0)
        .add_retry(max_retry_attempts=3, base_delay=0)
        .add_breaker(minimum_throughput=2, failure_ratio=0.5, break_duration=60)
    )
    transport = ResilientTransport(
        httpx.MockTransport(server),
        pipeline=pipeline,
        clock=clock,
        listeners=[events],
        random=no_jitter,
    )
    # Attempt 1 fails, attempt 2 (charged) fails and opens the breaker; the
    # third is charged by the retry and refused by the breaker: given back.
    with pytest.raises(BrokenCircuitError):
        transport.handle_request(httpx.Request("GET", URL))
    assert server.hits == 2
    budget = transport_budget(transport)
    assert (budget.first_attempts, budget.retries) == (1, 1)


def transport_budget(transport: ResilientTransport) -> RetryBudget:
    from http_resilience._strategies.budget.strategy import SyncRetryBudget

    built = transport._built  # pyright: ignore[reportPrivateUsage]
    step = built.find(SyncRetryBudget)
    assert step is not None
    return step.strategy.budget("http://api.example:80")


async def test_hedged_copies_are_charged_as_retries() -> None:
    clock, events = FakeClock(), EventRecorder[HttpEvent]()
    server = Hedged(clock, [503])
    pipeline = (
        ResiliencePipeline()
        .add_retry_budget(retry_budget_ratio=1.0, retry_budget_min_per_second=0)
        .add_hedging(max_hedged_attempts=3)
    )
    transport = AsyncResilientTransport(
        httpx.MockTransport(server), pipeline=pipeline, clock=clock, listeners=[events]
    )
    response = await transport.handle_async_request(httpx.Request("GET", URL))
    assert response.status_code == 503
    # One call buys one copy beside the first; the second copy is refused.
    assert len(server.arrived) == 2
    assert len(events.of(HedgeEvent)) == 1
    assert [event.reason for event in events.of(RejectionEvent)] == ["retry_budget"]


@pytest.mark.asyncio_only("the test itself uses asyncio.ensure_future")
async def test_hedging_goes_on_with_the_copies_in_flight_when_the_budget_refuses() -> (
    None
):
    clock, events = FakeClock(), EventRecorder[HttpEvent]()
    server = Hedged(clock, [None])  # the first copy hangs until released
    pipeline = (
        ResiliencePipeline()
        .add_retry_budget(retry_budget_ratio=0.0, retry_budget_min_per_second=0)
        .add_hedging(delay=1, max_hedged_attempts=2)
    )
    transport = AsyncResilientTransport(
        httpx.MockTransport(server), pipeline=pipeline, clock=clock, listeners=[events]
    )
    call = asyncio.ensure_future(
        transport.handle_async_request(httpx.Request("GET", URL))
    )
    for _ in range(20):
        await checkpoint()
    server.release.set()
    response = await call
    assert response.status_code == 200
    assert len(server.arrived) == 1
    assert [event.reason for event in events.of(RejectionEvent)] == ["retry_budget"]


def test_a_budget_must_come_before_the_retry_it_governs() -> None:
    with pytest.raises(ValueError, match="came before; add the budget first"):
        ResiliencePipeline().add_retry().add_retry_budget()
    with pytest.raises(ValueError, match="hedging"):
        ResiliencePipeline().add_hedging().add_retry_budget()
    assert repr(ResiliencePipeline().add_retry_budget().add_retry()) == (
        "ResiliencePipeline(retry budget, retry)"
    )


def test_the_options_and_their_defaults() -> None:
    options = RetryBudgetOptions()
    assert options.model_dump() == {
        "retry_budget_ratio": 0.2,
        "retry_budget_min_per_second": 10,
        "retry_budget_window": timedelta(seconds=10),
        "budget_per_host": True,
        "maximum_hosts": 1024,
    }


def test_the_environment_turns_the_budget_off_or_sets_it() -> None:
    off = HttpResilienceOptions.from_config(
        environ={"RESILIENCE__HTTP__RETRY_BUDGET_RATIO": "none"}
    )
    assert off.retry_budget_ratio is None
    assert "retry budget" not in [step.label for step in standard_steps(off)]
    tuned = HttpResilienceOptions.from_config(
        {"resilience": {"http": {"clients": {"pay": {"retry_budget_window": "1m"}}}}},
        client="pay",
        environ={"RESILIENCE__HTTP__CLIENTS__PAY__RETRY_BUDGET_RATIO": "0.05"},
    )
    assert tuned.retry_budget_ratio == 0.05
    assert tuned.retry_budget_window.total_seconds() == 60
