"""A forgotten idempotency table fails at the store's first use, naming the fix.

Issue 24: it used to be a driver's "no such table" at the first keyed request.
The store now inspects the database once per engine and process, on SQLite and
PostgreSQL, sync and async, and raises `ConfigurationError` naming the table,
the missing columns and the fix.
"""

from __future__ import annotations

import logging
from collections.abc import Generator, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlalchemy as sa
from injector import Injector
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine
from sqlalchemy.pool import NullPool

from mediator import (
    Command,
    CommandHandler,
    ConfigurationError,
    Mediator,
    MediatorModule,
    Principal,
    acting_as,
    idempotency_key,
    idempotent,
)
from mediator.asgi import IdempotencyKeyMiddleware
from mediator.sqlalchemy import (
    AsyncSqlAlchemyIdempotencyStore,
    SqlAlchemyIdempotencyStore,
    SqlAlchemyModule,
    acreate_idempotency_table,
    create_idempotency_table,
    idempotency_table,
)

pytestmark = pytest.mark.anyio

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
TIMES: dict[str, Any] = {
    "now": NOW,
    "lease": timedelta(seconds=30),
    "retention": timedelta(hours=1),
}


@pytest.fixture(params=["sqlite", "postgresql"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A database without the idempotency table (dropped again afterwards)."""
    if request.param == "sqlite":
        found = f"sqlite:///{tmp_path / 'no-table.db'}"
    else:
        found = request.getfixturevalue("postgres_url")
    drop(found)
    yield found
    drop(found)


def drop(url: str) -> None:
    engine = sa.create_engine(url)
    with engine.begin() as connection:
        connection.execute(sa.text(f"DROP TABLE IF EXISTS {idempotency_table.name}"))
    engine.dispose()


def async_url(url: str) -> str:
    return url.replace("sqlite://", "sqlite+aiosqlite://", 1)


@contextmanager
def engines(url: str) -> Generator[tuple[sa.Engine, AsyncEngine]]:
    engine = sa.create_engine(url)
    async_engine = create_async_engine(async_url(url), poolclass=NullPool)
    try:
        yield engine, async_engine
    finally:
        engine.dispose()


def expected_message(dialect: str) -> str:
    return (
        "the idempotency store's table 'mediator_idempotency' does not exist in "
        f"this {dialect} database: create it with create_idempotency_table(engine) "
        "(await acreate_idempotency_table(engine) for an AsyncEngine), or apply the "
        "migration shipped in mediator/sqlalchemy/migrations "
        f"(0001_idempotency.{dialect}.sql)"
    )


def test_a_sync_store_without_its_table_names_it_and_the_fix(url: str) -> None:
    with engines(url) as (engine, _):
        store = SqlAlchemyIdempotencyStore(engine)
        with pytest.raises(ConfigurationError) as raised:
            store.claim("scope", "k1", "f" * 64, **TIMES)
        assert str(raised.value) == expected_message(engine.dialect.name)
        with pytest.raises(ConfigurationError, match="does not exist"):
            store.purge_expired(now=NOW)  # every way in checks

        create_idempotency_table(engine)  # a failed check is not kept
        assert store.claim("scope", "k1", "f" * 64, **TIMES).status == "claimed"


async def test_an_async_store_without_its_table_names_it_and_the_fix(
    url: str,
) -> None:
    with engines(url) as (_, async_engine):
        store = AsyncSqlAlchemyIdempotencyStore(async_engine)
        with pytest.raises(ConfigurationError) as raised:
            await store.claim("scope", "k1", "f" * 64, **TIMES)
        assert str(raised.value) == expected_message(async_engine.dialect.name)
        with pytest.raises(ConfigurationError, match="does not exist"):
            await store.release("scope", "k1", "t")

        await acreate_idempotency_table(async_engine)
        claimed = await store.claim("scope", "k1", "f" * 64, **TIMES)
        assert claimed.status == "claimed"


async def test_the_table_is_inspected_once_per_engine(url: str) -> None:
    with engines(url) as (engine, async_engine):
        create_idempotency_table(engine)
        first = SqlAlchemyIdempotencyStore(engine)
        assert first.claim("scope", "k1", "f" * 64, **TIMES).status == "claimed"
        await AsyncSqlAlchemyIdempotencyStore(async_engine).purge_expired(now=NOW)
        drop(url)

        # Checked already: a later store on the same engine does not look
        # again, so the table dropped behind its back is the driver's error.
        for store in (first, SqlAlchemyIdempotencyStore(engine)):
            with pytest.raises(DBAPIError):
                store.claim("scope", "k2", "f" * 64, **TIMES)
        with pytest.raises(DBAPIError):
            await AsyncSqlAlchemyIdempotencyStore(async_engine).purge_expired(now=NOW)

    # Another engine on the same database is checked afresh.
    with (
        engines(url) as (engine, _),
        pytest.raises(ConfigurationError, match="does not exist"),
    ):
        SqlAlchemyIdempotencyStore(engine).claim("scope", "k3", "f" * 64, **TIMES)


def test_a_table_lacking_columns_names_them(url: str) -> None:
    with engines(url) as (engine, _):
        with engine.begin() as connection:
            connection.execute(
                sa.text(
                    f"CREATE TABLE {idempotency_table.name} "
                    "(scope VARCHAR NOT NULL, key VARCHAR(255) NOT NULL, "
                    "fingerprint VARCHAR(64) NOT NULL)"
                )
            )
        with pytest.raises(ConfigurationError) as raised:
            SqlAlchemyIdempotencyStore(engine).claim("scope", "k", "f" * 64, **TIMES)

    assert str(raised.value).startswith(
        "the idempotency store's table 'mediator_idempotency' lacks the columns "
        "state, token, outcome_kind, outcome_type, outcome_payload, created_at, "
        "lease_expires_at, expires_at, completed_at: it is not the table the "
        "store writes; drop or rename it and create it with"
    )


@idempotent(key="request_id")
class Charge(Command[int]):
    request_id: str


class ChargeHandler(CommandHandler[Charge, int]):
    async def handle(self, request: Charge) -> int:
        return 1


async def test_the_first_keyed_send_without_the_table_raises_the_advice(
    tmp_path: Path,
) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'app.db'}"
    async_engine = create_async_engine(url, poolclass=NullPool)
    mediator = Injector(
        [
            MediatorModule(lambda m: m.add_handler(ChargeHandler).use_defaults()),
            SqlAlchemyModule(async_engine=async_engine),
        ]
    ).get(Mediator)

    with acting_as(Principal(id="clerk")):
        with pytest.raises(ConfigurationError, match="acreate_idempotency_table"):
            await mediator.send(Charge(request_id="r-1"))
        with idempotency_key("r-2"), pytest.raises(ConfigurationError):
            await mediator.send(Charge(request_id="r-2"))

        await acreate_idempotency_table(async_engine)
        assert await mediator.send(Charge(request_id="r-1")) == 1
    await async_engine.dispose()


async def test_the_key_middleware_answers_a_missing_table_500_and_logs_the_fix(
    url: str, caplog: pytest.LogCaptureFixture
) -> None:
    runs: list[str] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        runs.append(scope["path"])  # pragma: no cover - never reached

    with engines(url) as (_, async_engine):
        store = AsyncSqlAlchemyIdempotencyStore(async_engine)
        keyed = IdempotencyKeyMiddleware(
            app, store_factory=lambda: store, anonymous=["/"]
        )
        transport = httpx.ASGITransport(app=keyed)
        async with httpx.AsyncClient(
            transport=transport, base_url="http://t"
        ) as client:
            with caplog.at_level(logging.ERROR, logger="mediator"):
                answer = await client.post(
                    "/orders", json={}, headers={"Idempotency-Key": "k-1"}
                )
    # Not an outage to retry: the service is set up wrong, and says how to fix it.
    assert answer.status_code == 500
    assert answer.headers["content-type"] == "application/problem+json"
    assert "retry-after" not in answer.headers
    assert runs == []
    logged = " ".join(record.getMessage() for record in caplog.records)
    assert "does not exist" in logged
    assert "k-1" not in logged
