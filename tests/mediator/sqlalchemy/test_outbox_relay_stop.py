"""`OutboxRelay.stop()` ends a run waiting between rounds at once, not at its poll.

A relay in an app's lifespan is stopped when the app stops; with the poll
interval an hour, a stop that only set a flag would keep the shutdown waiting
that hour. Both drivers, on a SQLite file.
"""

from __future__ import annotations

import asyncio
import threading
from datetime import timedelta
from pathlib import Path

import pytest
from injector import Injector
from sqlalchemy import create_engine
from sqlalchemy.ext.asyncio import create_async_engine

from mediator import Mediator, MediatorModule, SystemClock
from mediator.sqlalchemy import (
    OutboxRelay,
    SqlAlchemyModule,
    acreate_outbox_table,
    create_outbox_table,
)

AN_HOUR = timedelta(hours=1)
CLOCK = SystemClock()


def _mediator() -> Mediator:
    return Injector([MediatorModule(lambda m: m.use_defaults())]).get(Mediator)


@pytest.mark.anyio
async def test_stop_wakes_run_between_rounds(tmp_path: Path) -> None:
    engine = create_async_engine(f"sqlite+aiosqlite:///{tmp_path}/outbox.db")
    try:
        await acreate_outbox_table(engine)
        relay = OutboxRelay(_mediator(), engine, poll_interval=AN_HOUR)
        task = asyncio.create_task(relay.run())
        # The first round ends with a read of the stats: then the run waits.
        for _ in range(500):
            if relay.last_stats is not None:
                break
            await CLOCK.sleep(0.01)  # a bounded wait for the first round
        assert not task.done()
        assert relay.last_stats is not None
        relay.stop()
        await asyncio.wait_for(task, timeout=10)
    finally:
        await engine.dispose()


def test_stop_wakes_run_sync_between_rounds(tmp_path: Path) -> None:
    engine = create_engine(f"sqlite:///{tmp_path}/outbox.db")
    try:
        create_outbox_table(engine)
        modules = [MediatorModule(lambda m: m.use_defaults())]
        injector = Injector([*modules, SqlAlchemyModule(engine=engine)])
        relay = OutboxRelay(injector.get(Mediator), engine, poll_interval=AN_HOUR)
        thread = threading.Thread(target=relay.run_sync, daemon=True)
        thread.start()
        waited = threading.Event()
        for _ in range(500):
            if relay.last_stats is not None:
                break
            waited.wait(0.01)
        assert relay.last_stats is not None
        assert thread.is_alive()
        relay.stop()
        thread.join(timeout=10)
        assert not thread.is_alive()
    finally:
        engine.dispose()
