"""Databases for the idempotency store tests: SQLite files and the test PostgreSQL.

Each `Backend` holds a sync engine (set-up and checks) and an async one on the same
database. The async engines use `NullPool`, so a sync fixture can make them and
nothing is left open to dispose of; the tables are dropped after each test on
PostgreSQL, whose database the session shares.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine
from sqlalchemy.pool import NullPool

from mediator import AsyncIdempotencyStore, Claim, StoredOutcome
from mediator._behaviors.idempotency.store import AwaitedStore
from mediator.sqlalchemy import idempotency_table, prepare_sqlite

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
LEASE = timedelta(seconds=30)
RETENTION = timedelta(hours=24)
SCOPE = "acme|shop.PlaceOrder"
KEY = "order-7f3a"
PRINT = "a" * 64
OTHER_PRINT = "b" * 64
RESPONSE = StoredOutcome("response", "shop:OrderPlaced", '{"order_id": 7}')

effects_metadata = sa.MetaData()
effects = sa.Table(
    "idem_effects",
    effects_metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("note", sa.String(100), nullable=False),
)
"""What a handler writes: counted to prove an effect was committed once."""


@dataclass(frozen=True)
class Backend:
    dialect: str
    url: str
    engine: sa.Engine
    async_engine: AsyncEngine

    def rows(self) -> list[Any]:
        with self.engine.connect() as connection:
            return list(connection.execute(sa.select(idempotency_table)))

    def effects(self) -> list[str]:
        with self.engine.connect() as connection:
            return list(connection.scalars(sa.select(effects.c.note)))


def _drop(engine: sa.Engine) -> None:
    idempotency_table.metadata.drop_all(engine)
    effects_metadata.drop_all(engine)


@contextmanager
def open_backend(
    dialect: str,
    url: str,
    async_url: str,
    *,
    listen: Callable[[sa.Engine], None] | None = None,
) -> Generator[Backend]:
    """The database at `url`, with fresh tables; `listen` is given each engine
    before anything else listens on it."""
    engine = sa.create_engine(url)
    async_engine = create_async_engine(async_url, poolclass=NullPool)
    if listen is not None:
        listen(engine)
        listen(async_engine.sync_engine)
    prepare_sqlite(engine)
    prepare_sqlite(async_engine)
    _drop(engine)
    idempotency_table.metadata.create_all(engine)
    effects_metadata.create_all(engine)
    try:
        yield Backend(dialect, url, engine, async_engine)
    finally:
        _drop(engine)
        engine.dispose()


def sqlite_urls(path: Path) -> tuple[str, str]:
    return f"sqlite:///{path}", f"sqlite+aiosqlite:///{path}"


# A sync store behind the async protocol, so one test drives both kinds: the
# behavior's own adapter.
SyncAsAsync = AwaitedStore


async def claim(
    store: AsyncIdempotencyStore,
    key: str = KEY,
    fingerprint: str = PRINT,
    *,
    scope: str = SCOPE,
    now: datetime = NOW,
    lease: timedelta = LEASE,
    retention: timedelta = RETENTION,
) -> Claim:
    return await store.claim(
        scope, key, fingerprint, now=now, lease=lease, retention=retention
    )
