"""`ResilientTransport`: the same rules on the sync driver, and across threads."""

from __future__ import annotations

import io
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest

from http_resilience import (
    AttemptTimeoutError,
    BreakerEvent,
    BrokenCircuitError,
    HttpEvent,
    RateLimitedError,
)
from http_resilience.testing import EventRecorder, FakeClock
from tests.http_resilience._support.scripted import URL, Reply, script, sync_transport

SCENARIO: dict[str, Any] = {
    "max_retry_attempts": 0,
    "attempt_timeout": 1,
    "sampling_duration": 10,
    "minimum_throughput": 5,
    "failure_ratio": 0.5,
    "break_duration": 3,
}


def get(transport: httpx.BaseTransport, url: str = URL) -> httpx.Response:
    return transport.handle_request(httpx.Request("GET", url))


def test_an_endpoint_that_always_fails_gets_four_attempts() -> None:
    clock, server = FakeClock(), script(503)
    with httpx.Client(transport=sync_transport(server, clock)) as client:
        response = client.get(URL)
    assert (response.status_code, server.hits) == (503, 4)
    assert clock.sleeps == [1.0, 2.0, 4.0]
    assert server.closed_before[-1] == [True, True, True]


def test_retry_after_is_honoured() -> None:
    clock, server = FakeClock(), script(Reply(429, {"Retry-After": "2"}), 200)
    assert get(sync_transport(server, clock, base_delay="100ms")).status_code == 200
    assert clock.sleeps == [2.0]


def test_a_retry_after_past_the_deadline_ends_the_call() -> None:
    clock, server = FakeClock(), script(Reply(503, {"Retry-After": "45"}))
    assert get(sync_transport(server, clock)).status_code == 503
    assert (server.hits, clock.sleeps) == (1, [])


def test_a_transport_failure_is_retried_then_raised() -> None:
    server = script(httpx.ConnectError("refused"))
    with pytest.raises(httpx.ConnectError):
        get(sync_transport(server, FakeClock()))
    assert server.hits == 4


def test_a_post_is_not_retried_unless_it_has_an_idempotency_key() -> None:
    server = script(503, 503, 200)
    transport = sync_transport(server, FakeClock())
    with httpx.Client(transport=transport) as client:
        assert client.post(URL, json={"item": "book"}).status_code == 503
        assert server.hits == 1
        keyed = client.post(
            URL, json={"item": "book"}, headers={"Idempotency-Key": "order-7"}
        )
    assert (keyed.status_code, server.hits) == (200, 3)


def test_a_file_like_body_is_sent_once_and_not_retried() -> None:
    server = script(503, 200)
    transport = sync_transport(server, FakeClock(), retry_unsafe_methods=True)
    with httpx.Client(transport=transport) as client:
        response = client.put(URL, content=io.BytesIO(b"file contents"))
    assert (response.status_code, server.hits) == (503, 1)
    assert server.bodies == [b"file contents"]


def test_an_attempt_past_its_deadline_on_the_clock_is_a_timeout() -> None:
    clock = FakeClock()
    server = script(200)

    def slow(request: httpx.Request) -> httpx.Response:
        clock.sleep_sync(10.5)
        return server(request)

    with pytest.raises(
        AttemptTimeoutError,
        match=r"attempt 2 timed out after 10\.5 s \(attempt timeout 10 s\)",
    ):
        get(sync_transport(slow, clock, max_retry_attempts=1, base_delay=0))
    assert all(stream.closed for stream in server.streams)


def test_httpx_phase_timeouts_are_the_time_left_and_an_early_one_stays_httpx_s() -> (
    None
):
    failure = httpx.ConnectTimeout("timed out")
    server = script(failure)
    with pytest.raises(httpx.ConnectTimeout) as raised:
        get(sync_transport(server, FakeClock(), max_retry_attempts=0))
    assert raised.value is failure
    assert server.extensions[0]["timeout"] == dict.fromkeys(
        ("connect", "read", "write"), 10.0
    ) | {"pool": 9.9}


def test_the_breaker_opens_and_a_probe_closes_it() -> None:
    clock, events = FakeClock(), EventRecorder[HttpEvent]()
    server = script(503, 503, 503, 503, 503, 200)
    transport = sync_transport(server, clock, events=events, **SCENARIO)
    assert [get(transport).status_code for _ in range(5)] == [503] * 5
    for _ in range(3):
        with pytest.raises(BrokenCircuitError):
            get(transport)
    clock.advance(3)
    assert get(transport).status_code == 200
    assert [e.current for e in events.of(BreakerEvent)] == [
        "open",
        "half_open",
        "closed",
    ]


def test_concurrent_threads_let_exactly_one_probe_through() -> None:
    clock = FakeClock()
    probe_in = threading.Event()
    release = threading.Event()
    reached: list[httpx.Request] = []
    failing = [True]

    def handler(request: httpx.Request) -> httpx.Response:
        reached.append(request)
        if failing[0]:
            return httpx.Response(503)
        probe_in.set()
        release.wait(timeout=10)
        return httpx.Response(200)

    transport = sync_transport(handler, clock, **SCENARIO)
    for _ in range(5):
        get(transport)
    clock.advance(3)
    failing[0] = False
    reached.clear()

    def call() -> int | str:
        try:
            return get(transport).status_code
        except BrokenCircuitError:
            return "rejected"

    with ThreadPoolExecutor(max_workers=64) as pool:
        first = pool.submit(call)
        assert probe_in.wait(timeout=10)
        others = [pool.submit(call) for _ in range(199)]
        rejected = [future.result(timeout=10) for future in others]
        release.set()
        assert first.result(timeout=10) == 200
    assert rejected == ["rejected"] * 199
    assert len(reached) == 1
    assert get(transport).status_code == 200


def test_the_limiter_refuses_a_thread_beyond_its_permits() -> None:
    release = threading.Event()
    inside = threading.Event()

    def handler(request: httpx.Request) -> httpx.Response:
        inside.set()
        release.wait(timeout=10)
        return httpx.Response(200)

    transport = sync_transport(handler, FakeClock(), concurrency_limit=1)
    with ThreadPoolExecutor(max_workers=1) as pool:
        held = pool.submit(get, transport)
        assert inside.wait(timeout=10)
        with pytest.raises(RateLimitedError):
            get(transport)
        release.set()
        assert held.result(timeout=10).status_code == 200
    assert get(transport).status_code == 200
