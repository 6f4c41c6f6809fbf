"""The web sample's relay runners (samples/webapi/webapi/relay.py), for real.

`RelayThread` is how a WSGI worker runs the relay: ``run_sync()`` in a daemon
thread, over a SQLite file, with ``def`` handlers. `RelayTask` is the ASGI
lifespan's; its stop is bounded, and a round that overruns it is cancelled.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from injector import Injector, inject
from sqlalchemy.ext.asyncio import create_async_engine
from sqlalchemy.orm import Session

from mediator import (
    Command,
    CommandHandler,
    Mediator,
    MediatorModule,
    Outbox,
    idempotent,
    transactional,
)
from mediator.sqlalchemy import (
    OutboxRelay,
    SqlAlchemyModule,
    acreate_outbox_table,
    create_idempotency_table,
    create_outbox_table,
)
from webapi.relay import RelayTask, RelayThread

metadata = sa.MetaData()
applied = sa.Table(
    "applied",
    metadata,
    sa.Column("n", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("order_id", sa.String(64)),
)
delivered = threading.Event()


@idempotent
@transactional
class Apply(Command[None]):
    order_id: str


@transactional
class Record(Command[str]):
    order_id: str


class RecordHandler(CommandHandler[Record, str]):
    @inject
    def __init__(self, outbox: Outbox) -> None:
        self.outbox = outbox

    def handle(self, request: Record) -> str:
        return self.outbox.send(Apply(order_id=request.order_id))


class ApplyHandler(CommandHandler[Apply, None]):
    @inject
    def __init__(self, session: Session) -> None:
        self.session = session

    def handle(self, request: Apply) -> None:
        self.session.execute(sa.insert(applied).values(order_id=request.order_id))
        delivered.set()


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[sa.Engine]:
    engine = sa.create_engine(f"sqlite:///{tmp_path}/worker.db")
    metadata.create_all(engine)
    create_outbox_table(engine)
    create_idempotency_table(engine)
    yield engine
    engine.dispose()


def test_a_wsgi_workers_relay_thread_delivers_and_stops(engine: sa.Engine) -> None:
    delivered.clear()
    mediator = Injector(
        [
            MediatorModule(
                lambda m: m.add_handler(RecordHandler, ApplyHandler).use_defaults()
            ),
            SqlAlchemyModule(engine=engine),
        ]
    ).get(Mediator)
    running = RelayThread(OutboxRelay(mediator, engine))
    running.start()
    assert running.running
    with pytest.raises(RuntimeError, match="runs already"):
        running.start()
    mediator.send_sync(Record(order_id="o-1"))
    # The commit rings the relay: no poll to wait out; 10 s is a bound.
    assert delivered.wait(10)
    assert running.stop(within=10)
    assert not running.running
    with engine.connect() as connection:
        rows = connection.execute(sa.select(applied.c.order_id)).scalars().all()
    assert rows == ["o-1"]


@pytest.mark.anyio
async def test_a_relay_task_that_overruns_its_stop_is_cancelled(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    engine = create_async_engine(f"sqlite+aiosqlite:///{tmp_path}/orders.db")
    try:
        await acreate_outbox_table(engine)
        mediator = Injector([MediatorModule(lambda m: m.use_defaults())]).get(Mediator)
        relay = OutboxRelay(mediator, engine)
        stuck = asyncio.Event()
        released = asyncio.Event()

        async def a_round_that_hangs() -> int:
            stuck.set()
            await released.wait()  # never set: only a cancel ends it
            return 0

        relay.run_once = a_round_that_hangs  # type: ignore[method-assign]
        running = RelayTask(relay)
        running.start()
        await asyncio.wait_for(stuck.wait(), 10)
        with caplog.at_level(logging.WARNING, logger="webapi.relay"):
            await running.stop(within=0.05)
        assert not running.running
        assert "did not stop within 0.05 s and was cancelled" in caplog.text
        await running.stop()  # stopped already: nothing to do
    finally:
        await engine.dispose()
