"""`mediator.otel` counts degraded answers apart, and marks their spans."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from mediator.otel import TelemetryBehavior
from tests.mediator.fallback.shop import GetStock, GetStockAsync, Outage, shop
from tests.support.otel import Recorded, recorded

pytestmark = pytest.mark.anyio

DEGRADED = {
    "mediator.request.type": "GetStock",
    "mediator.degradation.source": "stock-cache",
    "error.type": "ConnectionError",
}


@pytest.fixture
def otel() -> Iterator[Recorded]:
    with recorded() as found:
        yield found


def telemetry(otel: Recorded) -> TelemetryBehavior:
    return TelemetryBehavior(
        meter_provider=otel.meter_provider, tracer_provider=otel.tracer_provider
    )


async def test_a_degraded_send_is_counted_and_its_span_marked(otel: Recorded) -> None:
    outage = Outage(failures=4)
    mediator, _ = shop(outage, behaviors=(telemetry(otel),))

    assert mediator.send_sync(GetStock(sku="A")) == 7  # degraded
    assert mediator.send_sync(GetStock(sku="A")) == 40  # answered
    assert await mediator.send(GetStockAsync(sku="A")) == 40  # answered

    assert otel.total("mediator.degraded") == 1
    assert otel.total("mediator.degraded", DEGRADED) == 1
    # A degraded answer is still a logical success.
    assert otel.total("mediator.requests", {"mediator.outcome": "ok"}) == 3
    first, second, third = otel.exporter.get_finished_spans()
    assert first.attributes is not None
    assert first.attributes["mediator.degraded"] is True
    assert first.attributes["mediator.degradation.source"] == "stock-cache"
    for answered in (second, third):
        assert answered.attributes is not None
        assert "mediator.degraded" not in answered.attributes


async def test_a_fallback_that_fails_is_not_counted_as_degraded(
    otel: Recorded,
) -> None:
    outage = Outage(failures=4, fallback_error=RuntimeError("cache down"))
    mediator, _ = shop(outage, behaviors=(telemetry(otel),))

    with pytest.raises(ConnectionError):
        await mediator.send(GetStockAsync(sku="A"))

    assert otel.total("mediator.degraded") == 0
    assert otel.total("mediator.requests", {"error.type": "ConnectionError"}) == 1
