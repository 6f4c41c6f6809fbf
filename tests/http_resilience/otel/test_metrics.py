"""`HttpMetrics`: logical calls apart from physical attempts, on bounded labels."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from http_resilience import (
    AsyncResilientTransport,
    BrokenCircuitError,
    HttpEvent,
    HttpEventListener,
    RequestEvent,
    ResilientTransport,
    RetryEvent,
)
from http_resilience.otel import HttpMetrics, outcome_class
from http_resilience.testing import EventRecorder, FakeClock
from tests.http_resilience._support.scripted import no_jitter, options, script
from tests.support.otel import Recorded, recorded

pytestmark = pytest.mark.anyio

SECRET_URL = "http://user:hunter2@api.example/orders/1?token=abc123#frag-9e1"
ORDERS: dict[str, Any] = {
    "http_resilience.client": "orders",
    "http.request.method": "GET",
    "server.address": "api.example",
    "server.port": 80,
    "url.scheme": "http",
}


@pytest.fixture
def otel() -> Iterator[Recorded]:
    with recorded() as found:
        yield found


def metrics_of(otel: Recorded) -> HttpMetrics:
    return HttpMetrics(meter_provider=otel.meter_provider)


def async_transport(
    handler: Any,
    clock: FakeClock,
    *listeners: HttpEventListener,
    **values: Any,
) -> AsyncResilientTransport:
    return AsyncResilientTransport(
        httpx.MockTransport(handler),
        options=options(**values),
        name="orders",
        clock=clock,
        listeners=listeners,
        random=no_jitter,
    )


def sync_transport(
    handler: Any,
    clock: FakeClock,
    *listeners: HttpEventListener,
    **values: Any,
) -> ResilientTransport:
    return ResilientTransport(
        httpx.MockTransport(handler),
        options=options(**values),
        name="orders",
        clock=clock,
        listeners=listeners,
        random=no_jitter,
    )


async def test_one_logical_call_is_three_attempts_and_two_retries(
    otel: Recorded,
) -> None:
    server = script(503, 503, 200)
    transport = async_transport(server, FakeClock(), metrics_of(otel))
    async with httpx.AsyncClient(transport=transport) as client:
        assert (await client.get(SECRET_URL)).status_code == 200

    assert server.hits == 3
    assert otel.total("http_resilience.requests") == 1
    assert otel.total("http_resilience.requests", ORDERS) == 1
    assert (
        otel.total(
            "http_resilience.requests",
            {"http_resilience.outcome": "2xx", "http.response.status_code": 200},
        )
        == 1
    )
    assert otel.total("http_resilience.attempts") == 3
    assert (
        otel.total("http_resilience.attempts", {"http_resilience.outcome": "5xx"}) == 2
    )
    assert otel.total("http_resilience.attempts", {"error.type": "503"}) == 2
    assert (
        otel.total("http_resilience.attempts", {"http_resilience.outcome": "2xx"}) == 1
    )
    assert (
        otel.total("http_resilience.retries", {"http_resilience.retry.reason": "503"})
        == 2
    )
    assert otel.total("http_resilience.attempt.duration") == 3
    assert otel.total("http_resilience.request.duration") == 1
    # The default backoff with no jitter: half of 2 s, then half of 4 s.
    assert otel.sum("http_resilience.request.duration") == pytest.approx(3.0)


def test_the_sync_transport_counts_the_same() -> None:
    with recorded() as otel:
        server = script(503, 200)
        transport = sync_transport(server, FakeClock(), metrics_of(otel))
        with httpx.Client(transport=transport) as client:
            assert client.get(SECRET_URL).status_code == 200
        assert otel.total("http_resilience.requests", ORDERS) == 1
        assert otel.total("http_resilience.attempts", ORDERS) == 2
        assert otel.total("http_resilience.retries", ORDERS) == 1


def test_a_call_that_fails_in_transport_is_an_error_with_its_type() -> None:
    with recorded() as otel:
        server = script(httpx.ConnectError("refused"))
        transport = sync_transport(
            server, FakeClock(), metrics_of(otel), max_retry_attempts=1
        )
        with (
            httpx.Client(transport=transport) as client,
            pytest.raises(httpx.ConnectError),
        ):
            client.get(SECRET_URL)
        assert (
            otel.total(
                "http_resilience.requests",
                {"http_resilience.outcome": "error", "error.type": "ConnectError"},
            )
            == 1
        )
        assert (
            otel.total("http_resilience.attempts", {"error.type": "ConnectError"}) == 2
        )
        assert (
            otel.total(
                "http_resilience.retries",
                {"http_resilience.retry.reason": "ConnectError"},
            )
            == 1
        )


def test_refusals_and_breaker_transitions_are_counted_by_reason() -> None:
    with recorded() as otel:
        server = script(503)
        clock = FakeClock()
        transport = sync_transport(
            server,
            clock,
            metrics_of(otel),
            max_retry_attempts=0,
            attempt_timeout=1,
            sampling_duration=10,
            minimum_throughput=2,
            failure_ratio=0.5,
            break_duration=3,
        )
        with httpx.Client(transport=transport) as client:
            for _ in range(2):
                assert client.get(SECRET_URL).status_code == 503
            with pytest.raises(BrokenCircuitError):
                client.get(SECRET_URL)

        assert server.hits == 2
        assert otel.total("http_resilience.requests") == 3
        assert otel.total("http_resilience.attempts") == 2
        assert (
            otel.total(
                "http_resilience.requests",
                {
                    "http_resilience.outcome": "rejected",
                    "error.type": "BrokenCircuitError",
                },
            )
            == 1
        )
        assert (
            otel.total(
                "http_resilience.rejections",
                {**ORDERS, "http_resilience.rejection.reason": "circuit_open"},
            )
            == 1
        )
        assert (
            otel.total(
                "http_resilience.breaker.transitions",
                {
                    "http_resilience.client": "orders",
                    "server.address": "api.example",
                    "http_resilience.breaker.previous_state": "closed",
                    "http_resilience.breaker.state": "open",
                },
            )
            == 1
        )


def test_labels_carry_no_path_query_or_userinfo() -> None:
    with recorded() as otel:
        server = script(503, httpx.ReadError("reset"), 200)
        transport = sync_transport(
            server, FakeClock(), metrics_of(otel), retry_unsafe_methods=True
        )
        with httpx.Client(transport=transport) as client:
            client.get(SECRET_URL)
            client.post(SECRET_URL, json={"card": "4111"})
        values = otel.every_attribute_value()
        assert values
        for value in values:
            text = str(value)
            for secret in (
                "/orders",
                "?",
                "token",
                "abc123",
                "hunter2",
                "user",
                "frag-9e1",
                "4111",
            ):
                assert secret not in text, (secret, value)


def test_an_unknown_method_is_counted_as_other() -> None:
    with recorded() as otel:
        transport = sync_transport(script(200), FakeClock(), metrics_of(otel))
        with httpx.Client(transport=transport) as client:
            client.request("PURGE-ORDER-7", SECRET_URL)
        assert (
            otel.total("http_resilience.requests", {"http.request.method": "_OTHER"})
            == 1
        )


def test_an_event_of_a_subclass_is_recorded_as_its_kind() -> None:
    @dataclass(frozen=True, slots=True)
    class MarkedRetry(RetryEvent):
        mark: str = "x"

    with recorded() as otel:
        metrics_of(otel)(
            MarkedRetry("orders", "GET", "http://api.example:80", 1, 0.5, "503")
        )
        assert (
            otel.total(
                "http_resilience.retries",
                {**ORDERS, "http_resilience.retry.reason": "503"},
            )
            == 1
        )


@pytest.mark.asyncio_only("the test itself uses asyncio.CancelledError, asyncio.Event")
async def test_a_cancelled_call_is_counted_as_cancelled(otel: Recorded) -> None:
    started = asyncio.Event()

    async def hang(request: httpx.Request) -> httpx.Response:
        started.set()
        await asyncio.Event().wait()
        raise AssertionError("never answered")

    events = EventRecorder[HttpEvent]()
    transport = async_transport(hang, FakeClock(), metrics_of(otel), events)
    async with httpx.AsyncClient(transport=transport) as client:
        task = asyncio.ensure_future(client.get(SECRET_URL))
        await started.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    [ended] = events.of(RequestEvent)
    assert ended.outcome == "CancelledError"
    assert (
        otel.total("http_resilience.requests", {"http_resilience.outcome": "cancelled"})
        == 1
    )


def test_outcome_classes() -> None:
    assert [outcome_class(o) for o in ("101", "204", "304", "404", "503")] == [
        "1xx",
        "2xx",
        "3xx",
        "4xx",
        "5xx",
    ]
    assert outcome_class("AttemptTimeoutError") == "error"
    assert outcome_class("CancelledError") == "cancelled"
    assert outcome_class("RateLimitedError", rejected=True) == "rejected"
