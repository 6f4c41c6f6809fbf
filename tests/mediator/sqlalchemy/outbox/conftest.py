"""The outbox tests' databases and app: SQLite files and the test PostgreSQL, each
driven by a sync mediator (plain ``def`` handlers, `Session`, ``run_once_sync``)
or an async one (``async def`` handlers, `AsyncSession`, ``run_once``)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Literal, TypeVar

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine
from sqlalchemy.pool import NullPool

from mediator import Command, Mediator
from mediator._core.clock import utc_now
from mediator.sqlalchemy import (
    OutboxMessage,
    OutboxRelay,
    OutboxStats,
    create_idempotency_table,
    create_outbox_table,
    idempotency_table,
    outbox_table,
    prepare_sqlite,
)
from tests.mediator.sqlalchemy.outbox import app

T = TypeVar("T")
Kind = Literal["sync", "async"]


class FakeWallClock:
    """A wall clock that moves only when told; starts a minute after real now, so
    that messages recorded during the test (at real time) are due."""

    def __init__(self) -> None:
        self.current = utc_now() + timedelta(minutes=1)

    def now(self) -> datetime:
        return self.current

    def advance(self, by: timedelta) -> None:
        self.current += by


@dataclass(frozen=True)
class Backend:
    dialect: str
    engine: sa.Engine
    async_engine: AsyncEngine

    def messages(self) -> list[Any]:
        """The outbox's rows, in recorded order."""
        with self.engine.connect() as connection:
            return list(
                connection.execute(sa.select(outbox_table).order_by(outbox_table.c.seq))
            )

    def message(self, message_id: str) -> Any:
        [row] = [row for row in self.messages() if row.id == message_id]
        return row

    def applied(self) -> list[tuple[str, str | None]]:
        """What the idempotent receiver applied: (order id, key), in order."""
        with self.engine.connect() as connection:
            rows = connection.execute(
                sa.select(app.applied.c.order_id, app.applied.c.key).order_by(
                    app.applied.c.n
                )
            )
            return [(row.order_id, row.key) for row in rows]

    def orders(self) -> list[str]:
        with self.engine.connect() as connection:
            return sorted(connection.scalars(sa.select(app.orders.c.id)))


def _drop(engine: sa.Engine) -> None:
    app.metadata.drop_all(engine)
    outbox_table.drop(engine, checkfirst=True)
    idempotency_table.drop(engine, checkfirst=True)


@pytest.fixture(params=["sqlite", "postgresql"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    """A database with the outbox, idempotency and app tables: a SQLite file, or
    the test PostgreSQL (shared by the session: the tables are dropped after)."""
    if request.param == "sqlite":
        path = tmp_path / "outbox.db"
        url, async_url = f"sqlite:///{path}", f"sqlite+aiosqlite:///{path}"
    else:
        url = async_url = request.getfixturevalue("postgres_url")
    engine = sa.create_engine(url)
    async_engine = create_async_engine(async_url, poolclass=NullPool)
    prepare_sqlite(engine)
    prepare_sqlite(async_engine)
    _drop(engine)
    app.metadata.create_all(engine)
    create_outbox_table(engine)
    create_idempotency_table(engine)
    try:
        yield Backend(str(request.param), engine, async_engine)
    finally:
        _drop(engine)
        engine.dispose()


@pytest.fixture
def clock() -> FakeWallClock:
    return FakeWallClock()


@pytest.fixture(autouse=True)
def _fresh_app() -> Iterator[None]:
    """The app's observations and scripts start empty in each test."""
    app.Observed.reset()
    app.Faults.reset()
    app.Attempts.reset()
    app.Overlap.reset(1)
    app.during.reset()
    app.Probing.use = None
    app.after_reserve.then = None
    yield
    app.after_reserve.then = None


NO_JITTER: Callable[[], float] = lambda: 0.0  # noqa: E731 - the factor 0.5 exactly


@dataclass
class Shop:
    """The app of one kind on one backend, and relays on its database.

    Every call is awaitable whatever the kind: the sync kind runs the sync call
    (``send_sync``, ``run_once_sync``...) in a worker thread, which copies the
    context (principal, correlation id), as a WSGI worker would run it.
    """

    kind: Kind
    backend: Backend
    clock: FakeWallClock
    mediator: Mediator

    def relay(self, **options: Any) -> OutboxRelay:
        options.setdefault("clock", self.clock)
        options.setdefault("random", NO_JITTER)
        engine: sa.Engine | AsyncEngine = (
            self.backend.engine if self.kind == "sync" else self.backend.async_engine
        )
        return OutboxRelay(self.mediator, engine, **options)

    async def _call(self, sync: Callable[[], T], async_: Callable[[], Any]) -> T:
        if self.kind == "sync":
            return await asyncio.to_thread(sync)
        result: T = await async_()
        return result

    async def send(self, request: Command[T]) -> T:
        return await self._call(
            lambda: self.mediator.send_sync(request),
            lambda: self.mediator.send(request),
        )

    async def run_once(self, relay: OutboxRelay) -> int:
        return await self._call(relay.run_once_sync, relay.run_once)

    async def drain(self, relay: OutboxRelay, rounds: int = 50) -> list[int]:
        """Rounds until one claims nothing (at most `rounds`): each round's count."""
        counts: list[int] = []
        for _ in range(rounds):
            claimed = await self.run_once(relay)
            if claimed == 0:
                return counts
            counts.append(claimed)
        raise AssertionError(f"the relay still claimed messages after {rounds} rounds")

    async def stats(self, relay: OutboxRelay) -> OutboxStats:
        return await self._call(relay.stats_sync, relay.stats)

    async def dead_messages(self, relay: OutboxRelay) -> list[OutboxMessage]:
        return await self._call(relay.dead_messages_sync, relay.dead_messages)

    async def redeliver(self, relay: OutboxRelay, message_id: str) -> bool:
        return await self._call(
            lambda: relay.redeliver_sync(message_id),
            lambda: relay.redeliver(message_id),
        )

    async def purge_delivered(self, relay: OutboxRelay, older_than: timedelta) -> int:
        return await self._call(
            lambda: relay.purge_delivered_sync(older_than),
            lambda: relay.purge_delivered(older_than),
        )


@pytest.fixture(params=["sync", "async"])
def kind(request: pytest.FixtureRequest) -> Kind:
    found: Kind = request.param
    return found


@pytest.fixture
def shop(kind: Kind, backend: Backend, clock: FakeWallClock) -> Shop:
    mediator = app.build(kind, backend.engine, backend.async_engine)
    return Shop(kind, backend, clock, mediator)


def place(
    order_id: str, *outgoing: tuple[app.What, str] | tuple[app.What, str, str | None]
) -> app.PlaceOrder:
    """`PlaceOrder` recording `outgoing`: (what, value[, ordering key]) each."""
    return app.PlaceOrder(order_id=order_id, outgoing=outgoing_of(*outgoing))


def outgoing_of(
    *outgoing: tuple[app.What, str] | tuple[app.What, str, str | None],
) -> list[app.Outgoing]:
    return [
        app.Outgoing(what=one[0], value=one[1], ordering_key=(one[2:] or (None,))[0])
        for one in outgoing
    ]
