"""The request side of SharedState, without Redis: leases, news, the fleet gate."""

from __future__ import annotations

import pytest

from http_resilience import BrokenCircuitError
from http_resilience._core.call import Call
from http_resilience._core.events import CLOSED, HALF_OPEN, OPEN
from http_resilience._core.telemetry import Telemetry
from http_resilience._fleet.budget import SharedRetryBudget
from http_resilience._fleet.link import ClientShare, FleetBreak


class Wakes:
    def __init__(self) -> None:
        self.count = 0

    def __call__(self) -> None:
        self.count += 1


def make_share(wall: list[float], wakes: Wakes) -> ClientShare:
    share = ClientShare(
        "inventory",
        wall=lambda: wall[0],
        wake=wakes,
        interval=0.1,
        detach=lambda share: None,
    )
    share.break_duration = 5.0
    return share


def make_budget(share: ClientShare) -> SharedRetryBudget:
    return SharedRetryBudget(
        ratio=0.0, min_per_second=10, window=10.0, now=0.0, share=share
    )


def test_unsynced_or_down_the_local_budget_decides() -> None:
    share = make_share([0.0], Wakes())
    budget = make_budget(share)
    assert all(budget.withdraw(0.0) for _ in range(10))  # one second's floor
    assert not budget.withdraw(0.0)
    assert budget.spent == 0


def test_synced_and_up_a_retry_needs_a_lease() -> None:
    wakes = Wakes()
    share = make_share([0.0], wakes)
    budget = make_budget(share)
    share.up = budget.synced = True
    budget.granted = 2
    assert budget.withdraw(0.0)
    assert budget.withdraw(0.0)
    assert not budget.withdraw(0.0)  # the lease is spent: refused, thread woken
    assert (budget.spent, budget.refused, wakes.count) == (2, 1, 1)
    assert budget.usage(0.0)[1] == 2  # the refused one was given back locally
    budget.refund(0.0)
    assert budget.spent == 1
    assert budget.withdraw(0.0)


def test_deposits_are_counted_for_the_next_sync() -> None:
    budget = make_budget(make_share([0.0], Wakes()))
    budget.deposit(0.0)
    budget.deposit_in_loop(0.0)
    assert budget.deposited == 2
    assert budget.first_attempts == 2


def test_an_opening_is_news_at_once() -> None:
    wakes = Wakes()
    share = make_share([100.0], wakes)
    share.moved("http://a:80", CLOSED, OPEN)
    share.moved("http://a:80", HALF_OPEN, CLOSED)
    share.moved("(overflow)", CLOSED, OPEN)
    assert list(share.outbox) == [
        ("o", "http://a:80", 105.0),
        ("c", "http://a:80", 0.0),
    ]
    assert wakes.count == 2


def call() -> Call:
    return Call("inventory", "GET", "http://a:80")


def test_the_fleet_gate_refuses_during_the_break_then_lets_one_probe() -> None:
    wall = [100.0]
    wakes = Wakes()
    share = make_share(wall, wakes)
    telemetry = Telemetry("inventory", ())
    fleet = FleetBreak(until=103.0, claim_until=0.0, mine=False)
    with pytest.raises(BrokenCircuitError) as refused:
        share.admit("http://a:80", fleet, call(), telemetry)
    assert refused.value.retry_after == pytest.approx(3.0)
    assert not share.outbox

    wall[0] = 104.0
    with pytest.raises(BrokenCircuitError):
        share.admit("http://a:80", fleet, call(), telemetry)
    assert list(share.outbox) == [("p", "http://a:80", 0.0)]

    share.probes["http://a:80"] = 109.0  # the thread won the claim
    assert share.admit("http://a:80", fleet, call(), telemetry)
    with pytest.raises(BrokenCircuitError):
        share.admit("http://a:80", fleet, call(), telemetry)  # one probe only


def test_a_probe_that_answers_closes_the_host_for_all() -> None:
    share = make_share([100.0], Wakes())
    share.open_hosts = {"http://a:80": FleetBreak(99.0, 0.0, True)}
    share.probed("http://a:80", failed=False)
    assert share.open_hosts == {}
    assert list(share.outbox) == [("c", "http://a:80", 0.0)]
    share.probed("http://a:80", failed=True)
    assert share.outbox[-1] == ("o", "http://a:80", 105.0)


def test_falling_back_forgets_the_fleet() -> None:
    share = make_share([0.0], Wakes())
    share.up = True
    share.open_hosts = {"http://a:80": FleetBreak(1.0, 0.0, False)}
    share.probes = {"http://a:80": 1.0}
    share.fall_back()
    assert (share.up, share.open_hosts, share.probes) == (False, {}, {})
