"""Per-host keys and the bounded registry of breakers."""

from __future__ import annotations

import tracemalloc

import httpx
import pytest

from http_resilience._core.events import BreakerState
from http_resilience._core.host_registry import OVERFLOW_HOST
from http_resilience._core.hosts import host_key
from http_resilience._strategies.breaker.registry import HostRegistry
from http_resilience._strategies.breaker.state import CircuitBreaker, TransitionListener


@pytest.mark.parametrize(
    ("url", "key"),
    [
        ("http://example.com/", "http://example.com:80"),
        ("HTTP://EXAMPLE.COM/", "http://example.com:80"),
        ("http://example.com.:80/a/b", "http://example.com:80"),
        ("https://Example.com:443/", "https://example.com:443"),
        ("https://example.com:8443/", "https://example.com:8443"),
        ("http://user:secret@example.com/?token=abc#frag", "http://example.com:80"),
        ("http://127.0.0.1:8000/x", "http://127.0.0.1:8000"),
        ("http://[::1]:8000/x", "http://[::1]:8000"),
        ("http://[::1]/x", "http://[::1]:80"),
        ("ws://chat.example/", "ws://chat.example:80"),
        ("wss://chat.example/", "wss://chat.example:443"),
        ("ftp://files.example/", "ftp://files.example"),
        ("http://xn--mnchen-3ya.de/", "http://münchen.de:80"),
        ("http://MÜNCHEN.de/", "http://münchen.de:80"),
    ],
)
def test_host_keys_are_normalised(url: str, key: str) -> None:
    assert host_key(httpx.URL(url)) == key


def test_127_0_0_1_and_localhost_are_different_hosts() -> None:
    assert host_key(httpx.URL("http://127.0.0.1:8000")) != host_key(
        httpx.URL("http://localhost:8000")
    )


def new_breaker(on_transition: TransitionListener) -> CircuitBreaker:
    return CircuitBreaker(
        failure_ratio=0.5,
        minimum_throughput=1,
        sampling_duration=10,
        break_duration=5,
        on_transition=on_transition,
    )


def trip(subject: CircuitBreaker, now: float = 0.0) -> None:
    subject.record(subject.acquire(now), failed=True, now=now)


def registry(
    maximum: int, seen: list[tuple[str, BreakerState, BreakerState]] | None = None
) -> HostRegistry:
    def told(key: str, previous: BreakerState, current: BreakerState) -> None:
        if seen is not None:
            seen.append((key, previous, current))

    return HostRegistry(maximum, new_breaker, told)


def test_a_host_keeps_its_breaker() -> None:
    hosts = registry(4)
    assert hosts.breaker("http://a:80") is hosts.breaker("http://a:80")
    assert hosts.breaker("http://a:80") is not hosts.breaker("http://b:80")
    assert len(hosts) == 2


def test_the_least_recently_used_closed_host_is_evicted() -> None:
    hosts = registry(3)
    first = hosts.breaker("http://a:80")
    hosts.breaker("http://b:80")
    hosts.breaker("http://c:80")
    assert hosts.breaker("http://a:80") is first  # a is now the most recent
    hosts.breaker("http://d:80")
    assert hosts.keys() == ["http://c:80", "http://a:80", "http://d:80"]


def test_an_open_breaker_is_never_evicted() -> None:
    seen: list[tuple[str, BreakerState, BreakerState]] = []
    hosts = registry(2, seen)
    failing = hosts.breaker("http://failing:80")
    trip(failing)
    assert seen == [("http://failing:80", "closed", "open")]
    for index in range(50):
        hosts.breaker(f"http://host-{index}:80")
    assert hosts.breaker("http://failing:80") is failing
    assert failing.state == "open"
    assert len(hosts) == 2


def test_a_half_open_breaker_is_not_evicted_either() -> None:
    hosts = registry(1)
    failing = hosts.breaker("http://failing:80")
    trip(failing)
    failing.acquire(5.0)
    assert failing.state == "half_open"
    hosts.breaker("http://other:80")
    assert hosts.breaker("http://failing:80") is failing


def test_a_closed_breaker_becomes_evictable_again() -> None:
    hosts = registry(1)
    failing = hosts.breaker("http://failing:80")
    trip(failing)
    failing.record(failing.acquire(5.0), failed=False, now=5.0)
    assert failing.state == "closed"
    other = hosts.breaker("http://other:80")
    assert hosts.keys() == ["http://other:80"]
    assert hosts.breaker("http://other:80") is other


def test_when_every_slot_holds_an_open_breaker_new_hosts_share_the_overflow() -> None:
    seen: list[tuple[str, BreakerState, BreakerState]] = []
    hosts = registry(2, seen)
    for key in ("http://a:80", "http://b:80"):
        trip(hosts.breaker(key))
    overflow = hosts.breaker("http://c:80")
    assert hosts.breaker("http://d:80") is overflow
    assert len(hosts) == 2
    trip(overflow)
    assert seen[-1] == (OVERFLOW_HOST, "closed", "open")
    # a closes: a slot frees, and the next new host gets its own breaker.
    a = hosts.breaker("http://a:80")
    a.record(a.acquire(5.0), failed=False, now=5.0)
    fresh = hosts.breaker("http://e:80")
    assert fresh is not overflow
    assert hosts.keys() == ["http://e:80", "http://b:80"]


def test_a_breaker_evicted_while_in_flight_that_opens_is_kept() -> None:
    hosts = registry(1)
    evicted = hosts.breaker("http://a:80")
    ticket = evicted.acquire(0.0)
    hosts.breaker("http://b:80")  # evicts a, whose attempt is still in flight
    assert hosts.keys() == ["http://b:80"]
    evicted.record(ticket, failed=True, now=0.1)
    assert hosts.breaker("http://a:80") is evicted
    assert evicted.state == "open"
    assert hosts.keys() == ["http://a:80"]


def test_a_replaced_evicted_breaker_does_not_displace_its_successor() -> None:
    hosts = registry(1)
    evicted = hosts.breaker("http://a:80")
    ticket = evicted.acquire(0.0)
    hosts.breaker("http://b:80")
    successor = hosts.breaker("http://a:80")
    evicted.record(ticket, failed=True, now=0.1)
    assert hosts.breaker("http://a:80") is successor


def test_the_bound_must_be_positive() -> None:
    with pytest.raises(ValueError, match="maximum_hosts must be at least 1, got 0"):
        registry(0)


@pytest.mark.chaos  # load: 100,000 hosts (make chaos)
def test_memory_stays_bounded_over_100_000_hosts() -> None:
    hosts = registry(1024)
    tracemalloc.start()
    try:
        for index in range(2_000):
            subject = hosts.breaker(f"http://host-{index}.example:80")
            subject.record(subject.acquire(0.0), failed=False, now=0.0)
        warm, _ = tracemalloc.get_traced_memory()
        for index in range(2_000, 100_000):
            subject = hosts.breaker(f"http://host-{index}.example:80")
            subject.record(subject.acquire(0.0), failed=False, now=0.0)
        after, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(hosts) == 1024
    # Once full, the registry only replaces hosts: no growth beyond noise.
    assert after - warm < 64 * 1024
