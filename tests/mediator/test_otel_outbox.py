"""`instrument_outbox` reports a real relay's backlog: pending, in flight, dead
and the oldest pending message's age, read from its last stats, never the
database; closed, it reports nothing."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa
from injector import Injector, inject
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from mediator import (
    BusinessRuleError,
    Command,
    CommandHandler,
    Mediator,
    MediatorModule,
    Outbox,
    SystemWallClock,
    transactional,
)
from mediator.otel import instrument_outbox
from mediator.sqlalchemy import OutboxRelay, SqlAlchemyModule, create_outbox_table


class Refused(Command[None]):
    n: int


@transactional
class Record(Command[None]):
    count: int


class RecordHandler(CommandHandler[Record, None]):
    @inject
    def __init__(self, outbox: Outbox) -> None:
        self.outbox = outbox

    def handle(self, request: Record) -> None:
        for n in range(request.count):
            self.outbox.send(Refused(n=n))


class RefusedHandler(CommandHandler[Refused, None]):
    def handle(self, request: Refused) -> None:
        if request.n == 0:
            raise BusinessRuleError("the first is refused")


class Clock:
    def __init__(self) -> None:
        self.at = SystemWallClock().now()

    def now(self) -> datetime:
        return self.at


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[sa.Engine]:
    engine = sa.create_engine(f"sqlite:///{tmp_path / 'outbox.db'}")
    create_outbox_table(engine)
    yield engine
    engine.dispose()


def gauges(reader: InMemoryMetricReader) -> dict[str, float]:
    data = reader.get_metrics_data()
    if data is None:
        return {}
    found: dict[str, float] = {}
    for resource in data.resource_metrics:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                for point in metric.data.data_points:
                    assert point.attributes == {"mediator.outbox": "orders"}
                    found[metric.name] = point.value  # type: ignore[union-attr]
    return found


def test_the_gauges_follow_the_relays_last_stats(engine: sa.Engine) -> None:
    module = MediatorModule(
        lambda m: m.add_handler(RecordHandler, RefusedHandler).use_defaults()
    )
    mediator = Injector([module, SqlAlchemyModule(engine=engine)]).get(Mediator)
    clock = Clock()
    relay = OutboxRelay(mediator, engine, batch=1, clock=clock)
    reader = InMemoryMetricReader()
    handle = instrument_outbox(
        relay, outbox="orders", meter_provider=MeterProvider(metric_readers=[reader])
    )
    assert gauges(reader) == {}  # nothing read yet

    mediator.send_sync(Record(count=3))
    clock.at += timedelta(seconds=4)
    relay.stats_sync()
    assert gauges(reader) == {
        "mediator.outbox.pending": 3,
        "mediator.outbox.in_flight": 0,
        "mediator.outbox.dead": 0,
        "mediator.outbox.oldest_pending_age": pytest.approx(4, abs=0.5),
    }

    assert relay.run_once_sync() == 1  # the first: refused, dead
    relay.stats_sync()
    found = gauges(reader)
    assert (found["mediator.outbox.pending"], found["mediator.outbox.dead"]) == (2, 1)

    handle.close()
    assert gauges(reader) == {}


def test_instrument_outbox_refuses_what_is_not_a_relay() -> None:
    with pytest.raises(TypeError, match="takes an OutboxRelay"):
        instrument_outbox(object())  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="meter_provider"):
        instrument_outbox(NeverRead(), meter_provider="nope")  # type: ignore[arg-type]


class NeverRead:
    last_stats = None
