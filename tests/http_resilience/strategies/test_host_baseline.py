"""Each host's baseline and the breaker rules that read it, on plain numbers.

Simulated hosts at 20 calls a second, their time told to the breaker: no
clock, no sleeping. Each scenario is one the issue names.
"""

from __future__ import annotations

import math
import random

import pytest

from http_resilience._strategies.breaker.baseline import (
    ADAPTIVE_TIMEOUT_FLOOR,
    BUCKETS,
    STEP,
    Baseline,
    Guards,
)
from http_resilience._strategies.breaker.state import REJECTED, CircuitBreaker

GUARDS = Guards(
    half_life=600.0,
    min_samples=100,
    error_factor=5.0,
    slow_factor=3.0,
    slow_ratio=0.5,
    timeout_factor=3.0,
)
RATE = 0.05  # seconds between calls
MEDIAN = 0.03


def breaker(guards: Guards | None = GUARDS) -> CircuitBreaker:
    return CircuitBreaker(
        failure_ratio=0.1,
        minimum_throughput=100,
        sampling_duration=30.0,
        break_duration=5.0,
        guards=guards,
    )


def run(
    host: CircuitBreaker,
    start: float,
    calls: int,
    fails: float,
    median: float,
    seed: int,
) -> tuple[float, float | None]:
    """Send `calls`; the time after them, and when the breaker first refused."""
    draw = random.Random(seed)
    refused: float | None = None
    now = start
    for index in range(calls):
        now = start + index * RATE
        ticket = host.acquire(now)
        if ticket == REJECTED:
            refused = now if refused is None else refused
            continue
        failed = draw.random() < fails
        host.record(ticket, failed, now, draw.lognormvariate(math.log(median), 0.3))
    return now, refused


def test_quantiles_are_within_one_bucket_of_the_sample() -> None:
    draw = random.Random(3)
    baseline = Baseline(half_life=600.0, min_samples=100)
    sample = sorted(draw.lognormvariate(math.log(MEDIAN), 0.5) for _ in range(5000))
    for index, seconds in enumerate(sample):
        baseline.learn(seconds, failed=False, now=index * RATE)
    p50, p95 = baseline.quantiles(0.5, 0.95)
    assert sample[2500] <= p50 <= sample[2500] * STEP
    assert sample[4750] <= p95 <= sample[4750] * STEP


def test_it_arms_at_min_samples_and_a_disarm_waits_for_as_many_again() -> None:
    baseline = Baseline(half_life=600.0, min_samples=3)
    for now in (0.0, 1.0):
        baseline.learn(0.01, failed=False, now=now)
    assert not baseline.armed
    baseline.learn(0.01, failed=False, now=2.0)
    assert baseline.armed
    baseline.disarm()
    assert not baseline.armed
    for now in (3.0, 4.0):
        baseline.learn(0.01, failed=False, now=now)
    assert not baseline.armed
    baseline.learn(0.01, failed=False, now=5.0)
    assert baseline.armed
    assert baseline.p50 > 0.0  # what it learned before the disarm stayed


def test_an_older_attempt_weighs_half_after_one_half_life() -> None:
    baseline = Baseline(half_life=600.0, min_samples=1)
    baseline.learn(None, failed=True, now=0.0)
    baseline.learn(0.01, failed=False, now=600.0)
    assert baseline.error_rate == pytest.approx(1 / 3)


def test_weights_stay_finite_across_many_half_lives() -> None:
    baseline = Baseline(half_life=0.001, min_samples=1)
    baseline.learn(None, failed=True, now=0.0)
    baseline.learn(0.01, failed=False, now=1_000.0)  # a million half-lives on
    assert baseline.error_rate == 0.0
    (median,) = baseline.quantiles(0.5)
    assert 0.01 <= median <= 0.01 * STEP


@pytest.mark.parametrize(("half_life", "samples"), [(0.0, 1), (-1.0, 1), (1.0, 0)])
def test_bad_settings_are_refused(half_life: float, samples: int) -> None:
    with pytest.raises(ValueError, match=r"half_life|min_samples"):
        Baseline(half_life=half_life, min_samples=samples)


def test_a_steady_twenty_percent_never_trips_over_ten_minutes() -> None:
    host = breaker()
    _, refused = run(host, 0.0, 12_000, 0.2, MEDIAN, seed=1)
    assert refused is None
    assert 0.5 < host.threshold() < 0.61
    # The fixed ratio alone trips on the same host.
    fixed = breaker(None)
    _, refused = run(fixed, 0.0, 12_000, 0.2, MEDIAN, seed=1)
    assert refused is not None


def test_twenty_then_a_hundred_percent_trips_within_the_window_unpoisoned() -> None:
    host = breaker()
    now, _ = run(host, 0.0, 6_000, 0.2, MEDIAN, seed=2)
    _, refused = run(host, now + RATE, 2_000, 1.0, MEDIAN, seed=3)
    assert refused is not None
    assert refused - now < 30.0
    assert host.baseline is not None
    assert 0.15 < host.baseline.error_rate < 0.25
    assert not host.baseline.armed  # measured again once it recovers


def test_a_quiet_host_trips_as_it_would_without_the_rules() -> None:
    opened: list[float | None] = []
    for guards in (GUARDS, None):
        host = breaker(guards)
        now, _ = run(host, 0.0, 2_000, 0.0, MEDIAN, seed=4)
        opened.append(run(host, now + RATE, 500, 1.0, MEDIAN, seed=5)[1])
    assert opened[0] is not None
    assert opened[0] == opened[1]


def test_a_fivefold_slower_host_trips_on_slow_calls_within_a_window() -> None:
    for guards, trips in ((GUARDS, True), (None, False)):
        host = breaker(guards)
        now, _ = run(host, 0.0, 4_000, 0.0, MEDIAN, seed=6)
        _, refused = run(host, now + RATE, 1_000, 0.0, 5 * MEDIAN, seed=7)
        assert (refused is not None) is trips
        if refused is not None:
            assert refused - now < 30.0


def test_a_cut_attempt_counts_as_slow() -> None:
    host = breaker()
    now, _ = run(host, 0.0, 2_000, 0.0, MEDIAN, seed=8)
    for index in range(1, 1_000):
        at = now + index * RATE
        ticket = host.acquire(at)
        if ticket == REJECTED:
            break
        host.record(ticket, True, at, math.inf)  # its attempt timeout cut it
    assert host.state == "open"


def test_an_outage_does_not_become_the_hosts_normal() -> None:
    host = breaker()
    now, _ = run(host, 0.0, 6_000, 0.2, MEDIAN, seed=9)
    assert host.baseline is not None
    before = host.baseline.error_rate
    # A minute down: the breaker opens, its probes fail, then the host is back.
    now, _ = run(host, now + RATE, 1_200, 1.0, MEDIAN, seed=10)
    now, _ = run(host, now + RATE, 6_000, 0.2, MEDIAN, seed=11)
    assert host.state == "closed"
    assert host.baseline.armed
    assert abs(host.baseline.error_rate - before) < 0.05


def test_the_attempt_cap_is_a_few_p95_never_below_the_floor() -> None:
    host = breaker()
    assert host.attempt_cap() is None  # not armed
    run(host, 0.0, 200, 0.0, 0.5, seed=12)
    assert host.baseline is not None
    assert host.attempt_cap() == pytest.approx(3 * host.baseline.p95)
    fast = breaker()
    run(fast, 0.0, 200, 0.0, 0.002, seed=13)
    assert fast.attempt_cap() == ADAPTIVE_TIMEOUT_FLOOR


def test_a_fast_host_jittering_below_the_floor_has_no_slow_calls() -> None:
    host = breaker()
    draw = random.Random(14)
    for index in range(6_000):
        now = index * RATE
        ticket = host.acquire(now)
        host.record(ticket, False, now, 0.001 if index < 200 else draw.uniform(0, 0.04))
    assert host.state == "closed"


def test_a_thousand_hosts_hold_a_bounded_histogram_each() -> None:
    hosts = [breaker() for _ in range(1_024)]
    for index, host in enumerate(hosts):
        run(host, 0.0, 20, 0.0, MEDIAN, seed=index)
    for host in hosts:
        assert host.baseline is not None
        counts = host.baseline._counts  # pyright: ignore[reportPrivateUsage]
        assert counts is not None
        assert len(counts) == BUCKETS
