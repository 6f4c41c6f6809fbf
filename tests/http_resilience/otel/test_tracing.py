"""`HttpTracing`: one client span per logical call, its attempts as events."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from opentelemetry.trace import SpanKind, StatusCode

from http_resilience import (
    AsyncResilientTransport,
    HedgingOptions,
    HttpEvent,
    HttpEventListener,
    RequestEvent,
    ResiliencePipeline,
    ResilientTransport,
)
from http_resilience._core.observed import RequestEnd, observe_async, observe_sync
from http_resilience._core.telemetry import Telemetry
from http_resilience.otel import HttpMetrics, HttpTracing
from http_resilience.testing import EventRecorder, FakeClock
from tests.http_resilience._support.scripted import no_jitter, options, script
from tests.support.otel import Recorded, parent_id, recorded, span_id, trace_id

pytestmark = pytest.mark.anyio

SECRET_URL = "http://user:hunter2@api.example:8080/orders/1?token=abc123#frag-9e1"


@pytest.fixture
def otel() -> Iterator[Recorded]:
    with recorded() as found:
        yield found


def async_transport(
    handler: Any, *listeners: HttpEventListener, **values: Any
) -> AsyncResilientTransport:
    return AsyncResilientTransport(
        httpx.MockTransport(handler),
        options=options(**values),
        name="orders",
        clock=FakeClock(),
        listeners=listeners,
        random=no_jitter,
    )


def sync_transport(
    handler: Any, *listeners: HttpEventListener, **values: Any
) -> ResilientTransport:
    return ResilientTransport(
        httpx.MockTransport(handler),
        options=options(**values),
        name="orders",
        clock=FakeClock(),
        listeners=listeners,
        random=no_jitter,
    )


async def test_one_span_per_logical_call_with_an_event_per_attempt_and_retry(
    otel: Recorded,
) -> None:
    tracing = HttpTracing(tracer_provider=otel.tracer_provider)
    transport = async_transport(script(503, 503, 200), tracing)
    tracer = otel.tracer_provider.get_tracer("test")
    async with httpx.AsyncClient(transport=transport) as client:
        with tracer.start_as_current_span("caller"):
            assert (await client.get(SECRET_URL)).status_code == 200

    http, caller = otel.spans()
    assert (http.name, http.kind) == ("GET", SpanKind.CLIENT)
    assert parent_id(http) == span_id(caller)
    assert trace_id(http) == trace_id(caller)
    assert dict(http.attributes or {}) == {
        "http_resilience.client": "orders",
        "http.request.method": "GET",
        "server.address": "api.example",
        "server.port": 8080,
        "url.scheme": "http",
        "http_resilience.outcome": "2xx",
        "http.response.status_code": 200,
        "http_resilience.attempts": 3,
        "http.request.resend_count": 2,
    }
    assert http.status.status_code == StatusCode.UNSET
    assert [event.name for event in http.events] == [
        "http_resilience.attempt",
        "http_resilience.retry",
        "http_resilience.attempt",
        "http_resilience.retry",
        "http_resilience.attempt",
    ]
    first, retry = http.events[0], http.events[1]
    assert dict(first.attributes or {}) == {
        "http_resilience.attempt": 1,
        "http_resilience.outcome": "5xx",
        "http_resilience.attempt.outcome": "503",
        "http_resilience.attempt.duration": 0.0,
    }
    assert dict(retry.attributes or {}) == {
        "http_resilience.attempt": 1,
        "http_resilience.retry.reason": "503",
        "http_resilience.retry.delay": 1.0,
    }


def test_a_failed_call_marks_its_span_as_an_error() -> None:
    with recorded() as otel:
        tracing = HttpTracing(tracer_provider=otel.tracer_provider)
        with httpx.Client(
            transport=sync_transport(script(503), tracing, max_retry_attempts=1)
        ) as client:
            assert client.get(SECRET_URL).status_code == 503
        transport = sync_transport(
            script(httpx.ConnectError("refused")), tracing, max_retry_attempts=0
        )
        with (
            httpx.Client(transport=transport) as client,
            pytest.raises(httpx.ConnectError),
        ):
            client.delete(SECRET_URL)

        answered, raised = otel.spans()
        assert answered.status.status_code == StatusCode.ERROR
        assert answered.attributes is not None
        assert answered.attributes["error.type"] == "503"
        assert answered.attributes["http.request.resend_count"] == 1
        assert raised.name == "DELETE"
        assert raised.status.status_code == StatusCode.ERROR
        assert raised.attributes is not None
        assert raised.attributes["error.type"] == "ConnectError"
        assert raised.attributes["http_resilience.outcome"] == "error"
        assert "http.response.status_code" not in raised.attributes
        # No exception (and its message) is recorded on the span.
        assert [event.name for event in raised.events] == ["http_resilience.attempt"]


def test_calls_after_one_another_are_siblings_not_nested() -> None:
    with recorded() as otel:
        tracing = HttpTracing(tracer_provider=otel.tracer_provider)
        with httpx.Client(transport=sync_transport(script(200), tracing)) as client:
            client.get(SECRET_URL)
            client.get(SECRET_URL)
        first, second = otel.spans()
        assert parent_id(first) is None
        assert parent_id(second) is None
        assert trace_id(first) != trace_id(second)


def test_no_attribute_or_event_carries_the_url() -> None:
    with recorded() as otel:
        listeners = (
            HttpTracing(tracer_provider=otel.tracer_provider),
            HttpMetrics(meter_provider=otel.meter_provider),
        )
        transport = sync_transport(
            script(503, httpx.ReadError("reset"), 200), *listeners
        )
        with httpx.Client(transport=transport) as client:
            client.get(SECRET_URL, headers={"Authorization": "Bearer s3cr3t"})
        values = otel.every_attribute_value()
        assert values
        values += [span.name for span in otel.spans()]
        values += [event.name for span in otel.spans() for event in span.events]
        assert "api.example" in values
        for value in values:
            for secret in (
                "/orders",
                "?",
                "token",
                "abc123",
                "hunter2",
                "user",
                "frag-9e1",
                "s3cr3t",
            ):
                assert secret not in str(value), (secret, value)


async def test_without_a_listener_the_chain_runs_as_built() -> None:
    class Chain:
        async def handle(self, request: httpx.Request, call: Any) -> httpx.Response:
            return httpx.Response(200)

        def handle_sync(self, request: httpx.Request, call: Any) -> httpx.Response:
            return httpx.Response(200)

    chain = Chain()
    silent = Telemetry("orders")
    assert observe_async(chain, silent, FakeClock().monotonic) is chain
    assert observe_sync(chain, silent, FakeClock().monotonic) is chain
    heard = Telemetry("orders", [EventRecorder[HttpEvent]()])
    assert observe_async(chain, heard, FakeClock().monotonic) is not chain


def test_a_plain_listener_gets_the_request_event_after_the_attempts() -> None:
    events = EventRecorder[HttpEvent]()
    with httpx.Client(
        transport=sync_transport(script(503, 200), events, base_delay=1)
    ) as client:
        client.get(SECRET_URL)
    assert type(events.events[-1]) is RequestEvent
    assert events.events[-1] == RequestEvent(
        "orders", "GET", "http://api.example:8080", "200", 0.5, False
    )


def test_an_observer_that_raises_is_logged_and_the_call_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    ended: list[RequestEvent] = []

    class Broken:
        def __call__(self, event: HttpEvent) -> None:
            pass

        def request_started(self, client: str, method: str, host: str) -> RequestEnd:
            raise RuntimeError("broken observer")

    class BrokenAtTheEnd:
        def __call__(self, event: HttpEvent) -> None:
            pass

        def request_started(self, client: str, method: str, host: str) -> RequestEnd:
            def end(event: RequestEvent) -> None:
                ended.append(event)
                raise RuntimeError("broken end")

            return end

    transport = sync_transport(script(200), Broken(), BrokenAtTheEnd())
    with (
        caplog.at_level(logging.ERROR, "http_resilience"),
        httpx.Client(transport=transport) as client,
    ):
        assert client.get(SECRET_URL).status_code == 200
    assert [event.outcome for event in ended] == ["200"]
    assert [r.getMessage() for r in caplog.records] == [
        "an http_resilience request observer raised",
        "an http_resilience request observer raised",
    ]


async def test_hedged_attempts_are_events_of_the_one_span(otel: Recorded) -> None:
    tracing = HttpTracing(tracer_provider=otel.tracer_provider)
    transport = AsyncResilientTransport(
        httpx.MockTransport(script(503, 200)),
        pipeline=ResiliencePipeline().add_hedging(
            HedgingOptions(delay=1, max_hedged_attempts=1)
        ),
        name="orders",
        clock=FakeClock(),
        listeners=[tracing],
    )
    async with httpx.AsyncClient(transport=transport) as client:
        assert (await client.get(SECRET_URL)).status_code == 200
    [span] = otel.spans()
    assert [event.name for event in span.events] == [
        "http_resilience.attempt",
        "http_resilience.hedge",
        "http_resilience.attempt",
    ]
    assert span.attributes is not None
    assert span.attributes["http_resilience.attempts"] == 2
