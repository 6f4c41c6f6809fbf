"""`TelemetryBehavior`: a span and a count per send, by request type and outcome."""

from __future__ import annotations

import doctest
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from injector import inject
from opentelemetry.trace import SpanKind, StatusCode

import mediator.otel
from mediator import (
    Command,
    CommandHandler,
    ConflictError,
    ForbiddenError,
    Mediator,
    Next,
    NotFoundError,
    Query,
    QueryHandler,
    Stage,
    SyncNext,
    TransientDatabaseError,
    ValidationError,
)
from mediator.otel import TELEMETRY, TelemetryBehavior, outcome_class
from tests.mediator._support.support import build
from tests.support.otel import Recorded, parent_id, recorded, span_id
from tests.support.written_in import run_examples

pytestmark = pytest.mark.anyio


class StepClock:
    """A `Clock` that moves one second each time it is read."""

    def __init__(self) -> None:
        self.now = 0.0

    def monotonic(self) -> float:
        self.now += 1.0
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.now += seconds

    def sleep_sync(self, seconds: float) -> None:
        self.now += seconds


class PlaceOrder(Command[str]):
    sku: str
    fail_with: str = ""


FAILURES: dict[str, Exception] = {
    "not_found": NotFoundError("no such sku"),
    "validation": ValidationError("bad sku"),
    "forbidden": ForbiddenError("nope"),
    "conflict": ConflictError("twice"),
    "transient": TransientDatabaseError("locked"),
    "bug": RuntimeError("secret-in-message"),
}


class PlaceOrderHandler(CommandHandler[PlaceOrder, str]):
    async def handle(self, request: PlaceOrder) -> str:
        if request.fail_with:
            raise FAILURES[request.fail_with]
        return f"order for {request.sku}"


class GetStock(Query[int]):
    sku: str


class GetStockHandler(QueryHandler[GetStock, int]):
    def handle(self, request: GetStock) -> int:
        return 7


class Checkout(Command[int]):
    sku: str


class CheckoutHandler(CommandHandler[Checkout, int]):
    @inject
    def __init__(self, mediator: Mediator) -> None:
        self._mediator = mediator

    async def handle(self, request: Checkout) -> int:
        return await self._mediator.send(GetStock(sku=request.sku))


@pytest.fixture
def otel() -> Iterator[Recorded]:
    with recorded() as found:
        yield found


def telemetry_of(otel: Recorded) -> TelemetryBehavior:
    return TelemetryBehavior(
        meter_provider=otel.meter_provider,
        tracer_provider=otel.tracer_provider,
        clock=StepClock(),
    )


def mediator_with(behavior: TelemetryBehavior) -> Mediator:
    return build(
        lambda m: m.add_handler(
            PlaceOrderHandler, GetStockHandler, CheckoutHandler
        ).add_behavior(behavior)
    )


async def test_a_send_is_one_span_and_one_count(otel: Recorded) -> None:
    sent = mediator_with(telemetry_of(otel))
    assert await sent.send(PlaceOrder(sku="A-1")) == "order for A-1"

    [span] = otel.spans()
    assert (span.name, span.kind) == ("PlaceOrder", SpanKind.INTERNAL)
    assert dict(span.attributes or {}) == {
        "mediator.request.type": "PlaceOrder",
        "mediator.outcome": "ok",
    }
    assert span.status.status_code == StatusCode.UNSET
    ok = {"mediator.request.type": "PlaceOrder", "mediator.outcome": "ok"}
    assert otel.total("mediator.requests", ok) == 1
    assert otel.total("mediator.request.duration", ok) == 1
    assert otel.sum("mediator.request.duration", ok) == 1.0  # one clock step


async def test_outcomes_are_classed_and_only_faults_are_span_errors(
    otel: Recorded,
) -> None:
    sent = mediator_with(telemetry_of(otel))
    for failure in FAILURES:
        with pytest.raises(Exception, match=r".") as raised:
            await sent.send(PlaceOrder(sku="A-1", fail_with=failure))
        assert raised.value is FAILURES[failure]

    found = {
        span.attributes["mediator.outcome"]: (
            span.attributes["error.type"],
            span.status.status_code,
        )
        for span in otel.spans()
        if span.attributes is not None
    }
    assert found == {
        "not_found": ("NotFoundError", StatusCode.UNSET),
        "validation_error": ("ValidationError", StatusCode.UNSET),
        "forbidden": ("ForbiddenError", StatusCode.UNSET),
        "conflict": ("ConflictError", StatusCode.UNSET),
        "transient": ("TransientDatabaseError", StatusCode.ERROR),
        "error": ("RuntimeError", StatusCode.ERROR),
    }
    assert (
        otel.total(
            "mediator.requests",
            {"mediator.outcome": "error", "error.type": "RuntimeError"},
        )
        == 1
    )
    assert otel.total("mediator.requests") == len(FAILURES)
    # No exception, and so no message, is recorded on a span.
    assert all(not span.events for span in otel.spans())
    assert all("secret" not in str(v) for v in otel.every_attribute_value())
    assert all("A-1" not in str(v) for v in otel.every_attribute_value())


async def test_a_send_inside_a_handler_is_a_child_span(otel: Recorded) -> None:
    sent = mediator_with(telemetry_of(otel))
    assert await sent.send(Checkout(sku="A-1")) == 7
    inner, outer = otel.spans()
    assert (inner.name, outer.name) == ("GetStock", "Checkout")
    assert parent_id(inner) == span_id(outer)
    assert otel.total("mediator.requests") == 2


def test_the_sync_path_records_the_same(otel: Recorded) -> None:
    sent = mediator_with(telemetry_of(otel))
    assert sent.send_sync(GetStock(sku="A-1")) == 7
    [span] = otel.spans()
    assert span.name == "GetStock"
    assert (
        otel.total(
            "mediator.requests",
            {"mediator.request.type": "GetStock", "mediator.outcome": "ok"},
        )
        == 1
    )


@dataclass(frozen=True)
class Retried:
    """The fields of mediator_resilience's RetryEvent, without importing it."""

    request_type: str
    attempt: int
    delay: float
    exception_type: str | None


def test_retries_are_counted_and_added_to_the_send_span(otel: Recorded) -> None:
    telemetry = telemetry_of(otel)
    tracer = otel.tracer_provider.get_tracer("test")
    telemetry.record_retry(Retried("PlaceOrder", 1, 0.5, "TransientDatabaseError"))

    class Retrying:
        stage = Stage(60, "INSIDE")

        async def handle(self, request: object, next: Next[object]) -> object:
            raise AssertionError("the sync path only")

        def handle_sync(self, request: object, next: SyncNext[object]) -> object:
            telemetry.record_retry(Retried("GetStock", 1, 0.25, None))
            telemetry.record_retry(Retried("Other", 1, 0.25, None))  # not this span
            return next()

    with tracer.start_as_current_span("outside"):
        sent = build(
            lambda m: (
                m.add_handler(GetStockHandler)
                .add_behavior(telemetry)
                .add_behavior(Retrying())
            )
        )
        sent.send_sync(GetStock(sku="A-1"))

    assert otel.total("mediator.retries") == 3
    assert (
        otel.total(
            "mediator.retries",
            {"mediator.request.type": "GetStock", "mediator.retry.reason": "result"},
        )
        == 1
    )
    assert (
        otel.total(
            "mediator.retries", {"mediator.retry.reason": "TransientDatabaseError"}
        )
        == 1
    )
    spans = {span.name: span for span in otel.spans()}
    assert [dict(e.attributes or {}) for e in spans["GetStock"].events] == [
        {
            "mediator.attempt": 1,
            "mediator.retry.reason": "result",
            "mediator.retry.delay": 0.25,
        }
    ]
    assert not spans["outside"].events


def test_the_stage_is_outside_every_built_in_one() -> None:
    assert TelemetryBehavior.stage is TELEMETRY
    assert TELEMETRY < Stage.AUDIT


def test_outcome_classes() -> None:
    assert outcome_class(None) == "ok"
    assert outcome_class(KeyboardInterrupt()) == "cancelled"
    assert outcome_class(TransientDatabaseError("x")) == "transient"


def test_the_docstring_examples_run() -> None:
    result = run_examples(mediator.otel, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0
    assert result.failed == 0
