"""The standard pipeline against a real fault server on 127.0.0.1 (uvicorn).

Each test reproduces a measurement users of the .NET standard resilience
handler made against their own failing server. Delays are tiny where the wait
is not the point; the Retry-After and timeout scenarios wait for real, because
real time is what they are about. The breaker's break runs on a `FakeClock`.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

import httpx
import pytest

from http_resilience import (
    AttemptEvent,
    AttemptTimeoutError,
    BreakerEvent,
    BrokenCircuitError,
    HedgeEvent,
    HttpEvent,
    HttpResilienceOptions,
    ResiliencePipeline,
    TotalTimeoutError,
    create_async_client,
    create_client,
)
from http_resilience.testing import EventRecorder, FakeClock
from tests.support.fault_server import FaultServer

pytestmark = pytest.mark.anyio


@pytest.fixture
def key() -> str:
    return uuid.uuid4().hex


def options(**values: Any) -> HttpResilienceOptions:
    return HttpResilienceOptions.model_validate(values)


TINY = options(base_delay="1ms")


async def test_an_endpoint_that_always_fails_gets_four_requests_and_its_503(
    fault_server: FaultServer, key: str
) -> None:
    async with create_async_client("orders", TINY) as client:
        response = await client.get(f"{fault_server.url}/status/503?key={key}")
    assert response.status_code == 503
    assert response.json()["hit"] == 4
    assert fault_server.hits(key) == 4


def test_the_sync_client_makes_the_same_four_requests(
    fault_server: FaultServer, key: str
) -> None:
    with create_client("orders", TINY) as client:
        response = client.get(f"{fault_server.url}/status/503?key={key}")
    assert (response.status_code, fault_server.hits(key)) == (503, 4)


async def test_two_failures_then_success_returns_200_after_three_requests(
    fault_server: FaultServer, key: str
) -> None:
    async with create_async_client("orders", TINY) as client:
        response = await client.get(f"{fault_server.url}/flaky/2/503?key={key}")
    assert response.status_code == 200
    assert fault_server.hits(key) == 3


async def test_a_429_with_retry_after_2_waits_about_two_seconds(
    fault_server: FaultServer, key: str
) -> None:
    async with create_async_client("orders", options(base_delay="100ms")) as client:
        started = time.perf_counter()
        response = await client.get(f"{fault_server.url}/retry-after/429/2?key={key}")
        elapsed = time.perf_counter() - started
    assert response.status_code == 200
    assert fault_server.hits(key) == 2
    assert 2.0 <= elapsed < 3.0


async def test_a_post_is_sent_once_unless_retries_are_allowed(
    fault_server: FaultServer, key: str
) -> None:
    body = {"item": "book"}
    async with create_async_client("orders", TINY) as client:
        refused = await client.post(
            f"{fault_server.url}/flaky/2/503?key={key}", json=body
        )
        keyed = await client.post(
            f"{fault_server.url}/flaky/2/503?key={key}-keyed",
            json=body,
            headers={"Idempotency-Key": "order-7"},
        )
    assert (refused.status_code, fault_server.hits(key)) == (503, 1)
    assert (keyed.status_code, fault_server.hits(f"{key}-keyed")) == (200, 3)
    allowed = options(base_delay="1ms", retry_unsafe_methods=True)
    async with create_async_client("orders", allowed) as client:
        response = await client.post(
            f"{fault_server.url}/flaky/2/503?key={key}-allowed", json=body
        )
    assert (response.status_code, fault_server.hits(f"{key}-allowed")) == (200, 3)


async def test_attempt_timeouts_end_the_call_and_each_attempt_is_aborted(
    fault_server: FaultServer, key: str
) -> None:
    timing = options(
        attempt_timeout="300ms",
        max_retry_attempts=2,
        total_request_timeout=5,
        base_delay="100ms",
    )
    async with create_async_client("orders", timing) as client:
        started = time.perf_counter()
        with pytest.raises(AttemptTimeoutError, match="attempt 3 timed out"):
            await client.get(f"{fault_server.url}/sleep/5?key={key}")
        elapsed = time.perf_counter() - started
    await fault_server.wait_idle(key)
    assert fault_server.hits(key) == 3
    assert fault_server.aborted(key) == 3
    # Three attempts of 0.3 s and two jittered waits of 50-100 and 100-200 ms.
    assert 1.0 <= elapsed < 2.0


def test_a_sync_attempt_timeout_is_bounded_by_the_httpx_timeouts_it_sets(
    fault_server: FaultServer, key: str
) -> None:
    timing = options(attempt_timeout="300ms", max_retry_attempts=0)
    with create_client("orders", timing) as client:
        started = time.perf_counter()
        with pytest.raises(AttemptTimeoutError, match="attempt 1 timed out"):
            client.get(f"{fault_server.url}/sleep/5?key={key}")
        elapsed = time.perf_counter() - started
    fault_server.wait_idle_sync(key)
    assert fault_server.aborted(key) == 1
    assert 0.3 <= elapsed < 1.0


async def test_the_pipeline_owns_time_and_httpx_timeouts_do_not_cut_an_attempt(
    fault_server: FaultServer, key: str
) -> None:
    url = f"{fault_server.url}/sleep/0.4?key={key}"
    owning = options(attempt_timeout=2, max_retry_attempts=0)
    async with create_async_client("orders", owning, timeout=0.2) as client:
        assert (await client.get(url)).status_code == 200
    with create_client("orders", owning, timeout=0.2) as client:
        assert client.get(url).status_code == 200
    leaving = options(
        attempt_timeout=2, max_retry_attempts=0, own_transport_timeout=False
    )
    async with create_async_client("orders", leaving, timeout=0.2) as client:
        with pytest.raises(httpx.ReadTimeout):
            await client.get(url)


async def test_the_breaker_opens_fails_fast_and_a_probe_closes_it(
    fault_server: FaultServer, key: str
) -> None:
    clock, events = FakeClock(), EventRecorder[HttpEvent]()
    breaking = options(
        max_retry_attempts=0,
        attempt_timeout=1,
        sampling_duration=10,
        minimum_throughput=5,
        failure_ratio=0.5,
        break_duration=3,
    )
    failing = f"{fault_server.url}/status/503?key={key}"
    healthy = f"{fault_server.url}/healthy?key={key}-healthy"
    async with create_async_client(
        "orders", breaking, clock=clock, listeners=[events]
    ) as client:
        for call in range(1, 6):
            assert (await client.get(failing)).status_code == 503
            assert fault_server.hits(key) == call
        for _ in range(3):
            with pytest.raises(BrokenCircuitError):
                await client.get(failing)
        assert fault_server.hits(key) == 5
        with pytest.raises(BrokenCircuitError):
            await client.get(healthy)  # the same host: still open
        clock.advance(3)
        assert (await client.get(healthy)).status_code == 200  # the probe
        assert (await client.get(healthy)).status_code == 200
    assert fault_server.hits(f"{key}-healthy") == 2
    changes = [
        (e.previous, e.current) for e in events.events if isinstance(e, BreakerEvent)
    ]
    assert changes == [
        ("closed", "open"),
        ("open", "half_open"),
        ("half_open", "closed"),
    ]


async def test_a_failing_hosts_open_breaker_leaves_another_host_alone(
    fault_server: FaultServer, key: str
) -> None:
    breaking = options(max_retry_attempts=0, minimum_throughput=2, failure_ratio=0.5)
    by_name = fault_server.url.replace("127.0.0.1", "localhost")
    async with create_async_client("orders", breaking) as client:
        for _ in range(2):
            await client.get(f"{fault_server.url}/status/503?key={key}")
        with pytest.raises(BrokenCircuitError, match=r"http://127\.0\.0\.1:"):
            await client.get(f"{fault_server.url}/healthy?key={key}")
        response = await client.get(f"{by_name}/healthy?key={key}-localhost")
    assert response.status_code == 200
    assert fault_server.hits(f"{key}-localhost") == 1


async def test_a_refused_connection_is_retried_then_raised(
    fault_server: FaultServer,
) -> None:
    events = EventRecorder[HttpEvent]()
    async with create_async_client("orders", TINY, listeners=[events]) as client:
        with pytest.raises(httpx.ConnectError):
            await client.get(f"{fault_server.refused_url}/healthy")
    attempts = [e for e in events.events if isinstance(e, AttemptEvent)]
    assert [e.outcome for e in attempts] == ["ConnectError"] * 4


# --- hedging and custom pipelines --------------------------------------------------


async def test_a_hedge_answers_after_the_delay_and_the_slow_first_is_aborted(
    fault_server: FaultServer, key: str
) -> None:
    events = EventRecorder[HttpEvent]()
    pipeline = ResiliencePipeline().add_hedging(delay="200ms")
    async with create_async_client(
        "catalog", pipeline=pipeline, listeners=[events]
    ) as client:
        started = time.perf_counter()
        response = await client.get(f"{fault_server.url}/hedge/3?key={key}")
        elapsed = time.perf_counter() - started
    assert response.status_code == 200
    assert response.json()["hit"] == 2  # the second attempt's answer
    assert 0.2 <= elapsed < 1.5
    await fault_server.wait_idle(key)
    assert fault_server.hits(key) == 2
    assert fault_server.aborted(key) == 1  # the first, cancelled mid-sleep
    hedges = [e for e in events.events if isinstance(e, HedgeEvent)]
    assert [(e.attempt, e.reason) for e in hedges] == [(2, "delay")]


async def test_an_outer_timeout_caps_retries_whose_attempts_an_inner_one_cuts(
    fault_server: FaultServer, key: str
) -> None:
    pipeline = (
        ResiliencePipeline()
        .add_timeout(1)
        .add_retry(max_retry_attempts=10, base_delay="1ms")
        .add_timeout("300ms")
    )
    async with create_async_client("orders", pipeline=pipeline) as client:
        started = time.perf_counter()
        with pytest.raises(TotalTimeoutError, match=r"\(total timeout 1 s\)"):
            await client.get(f"{fault_server.url}/sleep/5?key={key}")
        elapsed = time.perf_counter() - started
    await fault_server.wait_idle(key)
    # Three attempts cut at 300 ms each, the fourth at the outer second.
    assert fault_server.hits(key) == 4
    assert fault_server.aborted(key) == 4
    assert 1.0 <= elapsed < 1.5
