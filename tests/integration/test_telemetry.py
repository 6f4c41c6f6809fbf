"""The mediator's and the HTTP client's telemetry together: one trace per send.

A retried send is one mediator span (its retry an event on it) and one
``mediator.requests``; the HTTP call its handler makes is a client span
under it, and one ``http_resilience.requests`` for the attempts it cost.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import ClassVar

import httpx
import pytest
from injector import Injector, inject

from http_resilience import AsyncResilientTransport, HttpResilienceOptions
from http_resilience.otel import HttpMetrics, HttpTracing
from http_resilience.testing import FakeClock as HttpClock
from mediator import Mediator, MediatorModule, Query, QueryHandler
from mediator.otel import TelemetryBehavior
from mediator_resilience import (
    ResilienceMediatorModule,
    ResilienceMediatorOptions,
    retryable,
)
from mediator_resilience.testing import FakeClock as MediatorClock
from tests.support.otel import Recorded, parent_id, recorded, span_id

pytestmark = pytest.mark.anyio


@retryable
class LookUpStock(Query[int]):
    sku: str


class LookUpStockHandler(QueryHandler[LookUpStock, int]):
    failures: ClassVar[int] = 1

    @inject
    def __init__(self, client: httpx.AsyncClient) -> None:
        self._client = client

    async def handle(self, request: LookUpStock) -> int:
        if LookUpStockHandler.failures:
            LookUpStockHandler.failures -= 1
            raise ConnectionError("the database went away")
        response = await self._client.get(f"http://stock.local/items/{request.sku}")
        return int(response.json()["count"])


@pytest.fixture
def otel() -> Iterator[Recorded]:
    with recorded() as found:
        yield found


async def test_a_retried_send_and_its_http_call_are_one_trace(otel: Recorded) -> None:
    LookUpStockHandler.failures = 1
    answers = iter([httpx.Response(503), httpx.Response(200, json={"count": 7})])
    transport = AsyncResilientTransport(
        httpx.MockTransport(lambda request: next(answers)),
        options=HttpResilienceOptions(base_delay=0.1),
        name="stock",
        clock=HttpClock(),
        listeners=[
            HttpMetrics(meter_provider=otel.meter_provider),
            HttpTracing(tracer_provider=otel.tracer_provider),
        ],
    )
    telemetry = TelemetryBehavior(
        meter_provider=otel.meter_provider, tracer_provider=otel.tracer_provider
    )
    async with httpx.AsyncClient(transport=transport) as client:
        mediator = Injector(
            [
                lambda binder: binder.bind(httpx.AsyncClient, to=client),
                MediatorModule(
                    lambda m: (
                        m.add_handler(LookUpStockHandler)
                        .add_behavior(telemetry)
                        .use_defaults()
                    )
                ),
                ResilienceMediatorModule(
                    ResilienceMediatorOptions(use_jitter=False),
                    clock=MediatorClock(),
                    random=random.Random(7).random,
                    listeners=[telemetry.record_retry],
                ),
            ]
        ).get(Mediator)
        assert await mediator.send(LookUpStock(sku="A-1")) == 7

    http, send = otel.spans()
    assert (send.name, http.name) == ("LookUpStock", "GET")
    assert parent_id(http) == span_id(send)
    assert [event.name for event in send.events] == ["mediator.retry"]
    assert send.attributes is not None
    assert send.attributes["mediator.outcome"] == "ok"

    # Logical requests apart from physical attempts, on both layers.
    assert otel.total("mediator.requests") == 1
    assert (
        otel.total("mediator.retries", {"mediator.retry.reason": "ConnectionError"})
        == 1
    )
    assert otel.total("http_resilience.requests") == 1
    assert otel.total("http_resilience.attempts") == 2
    assert otel.total("http_resilience.retries") == 1
    for value in otel.every_attribute_value():
        assert "A-1" not in str(value)
        assert "/items" not in str(value)
