"""What a claim costs the database, counted on the engine: one statement for a new
key, two for a replay, an in-flight or a mismatched duplicate; on SQLite, one lock-free
read while a writer of this process holds the write lock. Sync and async, on SQLite
and PostgreSQL.

A round trip is a statement (``before_cursor_execute``) or a commit or rollback the
driver sends: SQLAlchemy fires ``commit`` and ``rollback`` for a connection in
autocommit too, where sqlite3 and psycopg 3 send nothing (no transaction is open),
and psycopg sends a ``BEGIN`` of its own before a transaction's first statement,
which no event shows. The rule of ``benchmarks/mediator_idempotency.py``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Generator, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import pytest
import sqlalchemy as sa
from psycopg.pq import TransactionStatus
from sqlalchemy import event

from mediator import AsyncIdempotencyStore, Claim
from mediator._behaviors.idempotency.store import AwaitedStore
from mediator.sqlalchemy import (
    AsyncSqlAlchemyIdempotencyStore,
    SqlAlchemyIdempotencyStore,
)
from mediator.sqlalchemy._sqlite import IMMEDIATE
from mediator.sqlalchemy._writer_gate import gate_for
from tests.mediator.sqlalchemy.idempotency_db import (
    LEASE,
    NOW,
    OTHER_PRINT,
    PRINT,
    RESPONSE,
    RETENTION,
    SCOPE,
    Backend,
    claim,
    open_backend,
    sqlite_urls,
)
from tests.mediator.sqlalchemy.test_writer_gate import wait_until

pytestmark = pytest.mark.anyio

TIMES = {"lease": LEASE, "retention": RETENTION}


def _in_transaction(connection: Any) -> bool:
    driver = connection.connection.driver_connection
    flag = getattr(driver, "in_transaction", None)  # sqlite3, aiosqlite
    if isinstance(flag, bool):
        return flag
    return bool(driver.info.transaction_status != TransactionStatus.IDLE)


@dataclass
class RoundTrips:
    """The round trips an engine made while `counting`, in order."""

    on: bool = False
    trace: list[str] = field(default_factory=list[str])

    def listen(self, engine: sa.Engine) -> None:
        """Count on `engine`; before `prepare_sqlite`, whose commit listener
        commits the driver's transaction itself."""
        event.listen(engine, "before_cursor_execute", self._statement)
        event.listen(engine, "commit", self._end("COMMIT"))
        event.listen(engine, "rollback", self._end("ROLLBACK"))

    def _statement(self, connection: Any, cursor: Any, statement: str, *_: Any) -> None:
        if not self.on:
            return
        if connection.dialect.name == "postgresql" and not (
            connection.connection.driver_connection.autocommit
            or _in_transaction(connection)
        ):
            self.trace.append("BEGIN")  # psycopg's own
        self.trace.append(statement.split()[0].upper())

    def _end(self, verb: str) -> Any:
        def ended(connection: Any) -> None:
            if self.on and _in_transaction(connection):
                self.trace.append(verb)

        return ended

    @contextmanager
    def counting(self) -> Generator[list[str]]:
        self.trace = []
        self.on = True
        try:
            yield self.trace
        finally:
            self.on = False


@pytest.fixture
def round_trips() -> RoundTrips:
    return RoundTrips()


@pytest.fixture(params=["sqlite", "postgresql"])
def backend(
    request: pytest.FixtureRequest, tmp_path: Path, round_trips: RoundTrips
) -> Iterator[Backend]:
    """The suite's backend, its engines counted from their first connection."""
    if request.param == "sqlite":
        url, async_url = sqlite_urls(tmp_path / "idempotency.db")
    else:
        url = async_url = request.getfixturevalue("postgres_url")
    with open_backend(
        request.param, url, async_url, listen=round_trips.listen
    ) as opened:
        yield opened


async def _warm(store: AsyncIdempotencyStore) -> None:
    """A first claim: the table check and the first connections, not counted."""
    await claim(store, "warm-up")


async def test_a_new_key_is_claimed_in_one_statement(
    store: AsyncIdempotencyStore, round_trips: RoundTrips
) -> None:
    await _warm(store)
    with round_trips.counting() as trace:
        claimed = await claim(store, "new")
    assert claimed.status == "claimed"
    assert trace == ["INSERT"]


async def test_a_replay_costs_two_round_trips(
    store: AsyncIdempotencyStore, round_trips: RoundTrips
) -> None:
    claimed = await claim(store, "done")
    assert claimed.token is not None
    await store.finish(SCOPE, "done", claimed.token, RESPONSE, now=NOW)
    with round_trips.counting() as trace:
        replay = await claim(store, "done")
    assert replay == Claim("replay", outcome=RESPONSE)
    assert trace == ["INSERT", "SELECT"]


async def test_an_in_flight_or_mismatched_duplicate_costs_two_round_trips(
    store: AsyncIdempotencyStore, round_trips: RoundTrips
) -> None:
    await claim(store, "running")
    with round_trips.counting() as trace:
        duplicate = await claim(store, "running")
    assert duplicate == Claim("in_flight")
    assert trace == ["INSERT", "SELECT"]
    with round_trips.counting() as trace:
        mismatch = await claim(store, "running", OTHER_PRINT)
    assert mismatch == Claim("mismatch")
    assert trace == ["INSERT", "SELECT"]


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
async def test_under_a_running_writer_sqlite_answers_from_one_lock_free_read(
    store: AsyncIdempotencyStore, backend: Backend, round_trips: RoundTrips
) -> None:
    done = await claim(store, "done")
    assert done.token is not None
    await store.finish(SCOPE, "done", done.token, RESPONSE, now=NOW)
    await claim(store, "running")
    with backend.engine.connect() as holder:
        holder.execution_options(**{IMMEDIATE: True})
        # A unit of work of this process holds the write lock (and the gate).
        with holder.begin(), round_trips.counting() as trace:
            replay = await claim(store, "done")
            in_flight = await claim(store, "running")
    assert replay == Claim("replay", outcome=RESPONSE)
    assert in_flight == Claim("in_flight")
    assert trace == ["SELECT", "SELECT"]


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
@pytest.mark.parametrize("kind", ["sync", "async"])
async def test_under_a_running_writer_a_new_key_queues_for_its_own_transaction(
    backend: Backend, round_trips: RoundTrips, kind: str
) -> None:
    gate = gate_for(str(backend.engine.url.database))
    store = SqlAlchemyIdempotencyStore(backend.engine)
    async_store = AsyncSqlAlchemyIdempotencyStore(backend.async_engine)
    await _warm(AwaitedStore(store) if kind == "sync" else async_store)
    with backend.engine.connect() as holder:
        holder.execution_options(**{IMMEDIATE: True})
        running = holder.begin()  # a unit of work of this process holds the lock
        with round_trips.counting() as trace:
            if kind == "sync":
                with ThreadPoolExecutor(1) as pool:
                    claiming = pool.submit(
                        store.claim, SCOPE, "new", PRINT, now=NOW, **TIMES
                    )
                    await anyio.to_thread.run_sync(
                        wait_until, lambda: gate.waiting == 1
                    )
                    running.commit()
                    claimed = claiming.result()
            else:
                task = asyncio.create_task(claim(async_store, "new"))
                await anyio.to_thread.run_sync(wait_until, lambda: gate.waiting == 1)
                running.commit()
                claimed = await task
    assert claimed.status == "claimed"
    # The lock-free read found nothing; the claim queued at the gate until the
    # writer's COMMIT, then took the lock (BEGIN IMMEDIATE) and inserted.
    assert trace == ["SELECT", "COMMIT", "BEGIN", "INSERT", "COMMIT"]
