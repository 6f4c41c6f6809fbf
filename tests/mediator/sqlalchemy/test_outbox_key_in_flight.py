"""A redelivery that finds the idempotency key still claimed is tried again, not dead.

The first delivery of a message is still running (or its relay died before the
idempotency claim's lease ran out) when the outbox lease runs out and a second
relay delivers it: the receiver answers `ConflictError` (the key is still
running), which is not final, so the message waits for its next attempt and is
then replayed, its effect applied once.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa
from injector import Injector, inject
from sqlalchemy.orm import Session

from mediator import (
    Command,
    CommandHandler,
    IdempotencyOptions,
    Mediator,
    MediatorModule,
    Outbox,
    idempotent,
    transactional,
)
from mediator.sqlalchemy import OutboxRelay, SqlAlchemyModule, outbox_table
from tests.support.outbox_relay_app import OffsetClock
from tests.support.relay_processes import reset_tables

WAIT = 30.0  # seconds, the bound of each wait between the two threads
IN_FLIGHT = (
    "ConflictError: Reserve with this idempotency key is still running: try again later"
)

applied = sa.Table(
    "in_flight_applied",
    sa.MetaData(),
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
)
entered = threading.Event()
release = threading.Event()


@idempotent
@transactional
class Reserve(Command[None]):
    pass


@transactional
class Place(Command[str]):
    pass


class PlaceHandler(CommandHandler[Place, str]):
    @inject
    def __init__(self, outbox: Outbox) -> None:
        self.outbox = outbox

    def handle(self, request: Place) -> str:
        return self.outbox.send(Reserve())


class ReserveHandler(CommandHandler[Reserve, None]):
    @inject
    def __init__(self, session: Session) -> None:
        self.session = session

    def handle(self, request: Reserve) -> None:
        entered.set()
        if not release.wait(WAIT):
            raise TimeoutError("the test did not release the first delivery")
        self.session.execute(sa.insert(applied))


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[sa.Engine]:
    engine = sa.create_engine(f"sqlite:///{tmp_path / 'outbox.db'}")
    reset_tables(engine)
    applied.create(engine)
    entered.clear()
    release.clear()
    try:
        yield engine
    finally:
        release.set()
        engine.dispose()


def _message(engine: sa.Engine) -> tuple[str, int, str | None]:
    with engine.connect() as connection:
        row = connection.execute(
            sa.select(
                outbox_table.c.state, outbox_table.c.attempts, outbox_table.c.last_error
            )
        ).one()
        return (row.state, row.attempts, row.last_error)


def test_a_message_redelivered_while_its_first_delivery_runs_is_replayed_later(
    engine: sa.Engine,
) -> None:
    mediator = Injector(
        [
            MediatorModule(
                lambda m: m.add_handler(PlaceHandler, ReserveHandler).use_defaults()
            ),
            SqlAlchemyModule(engine=engine),
            lambda binder: binder.bind(
                IdempotencyOptions, to=IdempotencyOptions(allow_anonymous=True)
            ),
        ]
    ).get(Mediator)
    mediator.send_sync(Place())
    lease = timedelta(seconds=30)
    first = OutboxRelay(mediator, engine, lease=lease)
    # The second relay's clock is past the outbox lease; the idempotency
    # claim's lease (60 s, on the real clock) still runs.
    second = OutboxRelay(
        mediator, engine, lease=lease, clock=OffsetClock(timedelta(seconds=45))
    )
    later = OutboxRelay(
        mediator, engine, lease=lease, clock=OffsetClock(timedelta(hours=1))
    )

    running = threading.Thread(target=first.run_once_sync)
    running.start()
    try:
        assert entered.wait(WAIT)
        assert second.run_once_sync() == 1
        assert _message(engine) == ("pending", 2, IN_FLIGHT)
    finally:
        release.set()
        running.join(WAIT)
    assert not running.is_alive()
    # The first delivery applied it; its outcome was not kept (its lease was
    # taken). The next attempt is a replay.
    assert later.run_once_sync() == 1
    assert _message(engine) == ("delivered", 3, IN_FLIGHT)
    with engine.connect() as connection:
        assert connection.scalar(sa.select(sa.func.count()).select_from(applied)) == 1
