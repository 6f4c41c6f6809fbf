"""The adaptive limit's controller, on plain numbers, against a scripted host.

The host serves `capacity` calls at once in `base` seconds each; beyond that
they queue, so every call takes ``base * max(1, inflight / capacity)``. A
closed loop of `demand` callers keeps as many calls in flight as the limit
lets through. Time is the test's own number: nothing sleeps.
"""

from __future__ import annotations

import random

import pytest

from http_resilience._strategies.adaptive.limit import (
    GRANTED,
    QUEUED,
    REFUSED,
    AdaptiveLimit,
)


class Host:
    """A queueing host with fixed capacity, driven step by step."""

    def __init__(self, base: float, capacity: int) -> None:
        self.base = base
        self.capacity = capacity
        self.failing = False

    def rtt(self, inflight: int) -> float:
        return self.base * max(1.0, inflight / self.capacity)


def make(seed: int = 1, **values: int) -> AdaptiveLimit:
    bounds = {"min_limit": 1, "max_limit": 1000, "initial_limit": 20, "queue_limit": 0}
    bounds.update(values)
    return AdaptiveLimit(now=0.0, random=random.Random(seed).random, **bounds)


def run(
    limit: AdaptiveLimit, host: Host, now: float, seconds: float, demand: int = 10_000
) -> tuple[float, list[tuple[float, int, float]]]:
    """Run the loop for `seconds`; each round (time, limit, rtt), and the end."""
    rounds: list[tuple[float, int, float]] = []
    end = now + seconds
    while now < end:
        inside = 0
        while inside < demand and limit.enter() is GRANTED:
            inside += 1
        assert limit.min_limit <= limit.limit <= limit.max_limit
        rtt = host.rtt(inside)
        now += rtt
        for _ in range(inside):
            limit.leave()
            if not host.failing:  # a failed call is no RTT sample
                limit.sample(rtt, now)
        rounds.append((now, limit.limit, rtt))
    return now, rounds


def test_the_limit_converges_near_the_capacity_and_stays() -> None:
    limit, host = make(), Host(base=0.1, capacity=20)
    now, rounds = run(limit, host, 0.0, 60.0)
    assert limit.limit >= 20  # grown from below
    now, rounds = run(limit, host, now, 300.0)
    limits = [seen for _, seen, _ in rounds]
    # At the capacity to 1.25x it, and the latency within 1.25x of the base,
    # for five minutes on end: no drift upward. Below it only in the probes
    # (one window in 20 to 40, 2 x sqrt(limit) lower).
    assert max(limits) <= 25
    assert sum(seen >= 20 for seen in limits) >= 0.9 * len(limits)
    assert min(limits) >= 12
    assert max(rtt for _, _, rtt in rounds) <= 1.25 * host.base
    assert limit.baseline_rtt == pytest.approx(host.base, rel=0.05)


def test_a_limit_that_starts_above_the_capacity_comes_down_to_it() -> None:
    # The first window's baseline is a queue (20 calls on a host of 5): the
    # probes find it out.
    limit, host = make(), Host(base=0.1, capacity=5)
    now, _ = run(limit, host, 0.0, 200.0)
    now, rounds = run(limit, host, now, 300.0)
    limits = sorted(seen for _, seen, _ in rounds)
    # The allowance, sqrt(limit), is a large share of a small limit: 1.6x.
    assert 5 <= limits[len(limits) // 2] <= 8
    assert limit.baseline_rtt == pytest.approx(host.base, rel=0.1)


@pytest.mark.parametrize("seed", range(1, 11))
def test_the_first_probe_finds_a_queue_learned_at_the_start(seed: int) -> None:
    # Started at 20 on a host of 8 (benchmarks/adaptive_load.py's cold start):
    # the first baseline is 2.5x the host's. The first probe comes within 3
    # to 6 windows, not 20 to 40, so the queue is found within 20 s (a second
    # probe may be on its way down: the baseline within 1.25x, not 2.5x).
    limit, host = make(seed), Host(base=0.05, capacity=8)
    now, _ = run(limit, host, 0.0, 20.0)
    assert limit.baseline_rtt <= 1.25 * host.base
    _, rounds = run(limit, host, now, 60.0)
    latencies = sorted(rtt for _, _, rtt in rounds)
    assert latencies[len(latencies) // 2] <= 1.5 * host.base


@pytest.mark.parametrize("when", [120.0 + 1.3 * step for step in range(30)])
def test_the_limit_falls_fast_when_latency_jumps(when: float) -> None:
    # At 30 moments, so that some fall in or next to a probe window.
    limit, host = make(), Host(base=0.1, capacity=40)
    now, _ = run(limit, host, 0.0, when)
    before = limit.estimate
    assert 30 <= before <= 50
    host.capacity = 10  # the host lost three quarters of itself: 4x latency
    now, rounds = run(limit, host, now, 4.0)
    assert limit.limit <= before / 2  # halved, or more, within 4 s
    now, rounds = run(limit, host, now, 60.0)
    settled = sorted(seen for _, seen, _ in rounds)
    assert 10 <= settled[len(settled) // 2] <= 15  # near the new capacity


def test_a_host_that_is_slower_by_itself_is_relearned() -> None:
    limit, host = make(), Host(base=0.1, capacity=40)
    now, _ = run(limit, host, 0.0, 120.0)
    host.base = 0.3  # three times slower at any concurrency
    now, _ = run(limit, host, now, 10.0)
    assert limit.limit <= 20  # cut first: it looks like queueing
    now, _ = run(limit, host, now, 300.0)
    # A probe found latency that fewer calls do not lower: the new baseline.
    assert limit.baseline_rtt == pytest.approx(0.3, rel=0.1)
    assert limit.limit >= 40


def test_the_limit_grows_slowly() -> None:
    limit, host = make(), Host(base=0.1, capacity=1000)
    now, _rounds = run(limit, host, 0.0, 10.0)
    # About a fifth of sqrt(limit) a window: 20 to 28 in ten windows, not 1000.
    assert 22 <= limit.limit <= 30
    run(limit, host, now, 60.0)
    assert limit.limit <= 150


def test_the_limit_stays_within_its_bounds() -> None:
    capped, host = make(max_limit=30), Host(base=0.1, capacity=1000)
    run(capped, host, 0.0, 200.0)  # `run` checks the bounds every round
    assert capped.limit == 30
    floored = make(min_limit=5, initial_limit=5)
    host = Host(base=0.1, capacity=2)
    run(floored, host, 0.0, 100.0)
    assert floored.limit <= 6  # pressed to the floor (above it in a probe's wake)


def test_an_outage_moves_neither_the_limit_nor_the_baseline() -> None:
    limit, host = make(min_limit=3), Host(base=0.1, capacity=20)
    now, _ = run(limit, host, 0.0, 120.0)
    learned, baseline = limit.limit, limit.baseline_rtt
    host.failing, host.base = True, 5.0  # every call fails, and slowly
    now, rounds = run(limit, host, now, 600.0)
    assert {seen for _, seen, _ in rounds} == {learned}
    assert limit.baseline_rtt == baseline
    host.failing, host.base = False, 0.1
    run(limit, host, now, 30.0)
    assert 20 <= limit.limit <= 25


def test_two_replicas_do_not_move_in_step() -> None:
    host = Host(base=0.1, capacity=1000)
    changes: list[list[float]] = []
    for seed in (1, 2):
        limit = make(seed=seed)
        _, rounds = run(limit, host, 0.0, 30.0)
        changes.append(
            [
                when
                for (when, seen, _), (_, was, _) in zip(
                    rounds[1:], rounds[:-1], strict=True
                )
                if seen != was
            ]
        )
    first, second = changes
    assert len(first) >= 10
    assert len(second) >= 10
    # Their windows close at different moments: most changes land apart.
    assert len(set(first) & set(second)) <= len(first) // 3


def test_the_counts_grant_queue_and_refuse() -> None:
    limit = make(initial_limit=1, queue_limit=1)
    assert [limit.enter() for _ in range(3)] == [GRANTED, QUEUED, REFUSED]
    assert limit.leave() is True  # handed to the queued caller
    assert (limit.in_use, limit.queued) == (1, 0)
    assert limit.leave() is False
    limit.enter()
    limit.enter()
    limit.abandon()
    assert (limit.in_use, limit.queued) == (1, 0)
