"""`complete` runs in the unit of work's transaction: it commits with the handler's
writes, rolls back with them, and refuses a lost claim, so an effect is committed
once. Sync and async, on SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest
import sqlalchemy as sa
from anyio.lowlevel import checkpoint
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import Session

from mediator import Claim, ConflictError
from mediator.sqlalchemy import (
    AsyncSqlAlchemyIdempotencyStore,
    AsyncSqlAlchemyUnitOfWork,
    SqlAlchemyIdempotencyStore,
    SqlAlchemyUnitOfWork,
)
from tests.mediator.sqlalchemy.idempotency_db import (
    KEY,
    LEASE,
    NOW,
    RESPONSE,
    SCOPE,
    Backend,
    SyncAsAsync,
    claim,
    effects,
)

pytestmark = pytest.mark.anyio


def run_handler_sync(
    backend: Backend, token: str, note: str, *, commit: bool = True
) -> None:
    """One attempt: the handler's write and the completion, in one unit of work."""
    with Session(backend.engine) as session:
        store = SqlAlchemyIdempotencyStore(backend.engine, session)
        unit = SqlAlchemyUnitOfWork(session)
        unit.begin()
        try:
            session.execute(sa.insert(effects).values(note=note))
            store.complete(SCOPE, KEY, token, RESPONSE, now=NOW)
        except BaseException:
            unit.rollback()
            raise
        if commit:
            unit.commit()
        else:
            unit.rollback()


async def run_handler(
    backend: Backend, token: str, note: str, *, commit: bool = True
) -> None:
    async with AsyncSession(backend.async_engine) as session:
        store = AsyncSqlAlchemyIdempotencyStore(backend.async_engine, session)
        unit = AsyncSqlAlchemyUnitOfWork(session)
        await unit.begin()
        try:
            await session.execute(sa.insert(effects).values(note=note))
            await store.complete(SCOPE, KEY, token, RESPONSE, now=NOW)
        except BaseException:
            await unit.rollback()
            raise
        if commit:
            await unit.commit()
        else:
            await unit.rollback()


@pytest.fixture(params=["sync", "async"])
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


async def handle(
    kind: str, backend: Backend, token: str, note: str, *, commit: bool = True
) -> None:
    if kind == "sync":
        run_handler_sync(backend, token, note, commit=commit)
    else:
        await run_handler(backend, token, note, commit=commit)


def stores(
    kind: str, backend: Backend
) -> SyncAsAsync | AsyncSqlAlchemyIdempotencyStore:
    if kind == "sync":
        return SyncAsAsync(SqlAlchemyIdempotencyStore(backend.engine))
    return AsyncSqlAlchemyIdempotencyStore(backend.async_engine)


async def test_completion_commits_with_the_handlers_writes(
    kind: str, backend: Backend
) -> None:
    store = stores(kind, backend)
    claimed = await claim(store)
    assert claimed.token is not None

    await handle(kind, backend, claimed.token, "charged")

    assert backend.effects() == ["charged"]
    assert await claim(store) == Claim("replay", outcome=RESPONSE)


async def test_completion_rolls_back_with_the_handlers_writes(
    kind: str, backend: Backend
) -> None:
    store = stores(kind, backend)
    claimed = await claim(store)
    assert claimed.token is not None

    await handle(kind, backend, claimed.token, "charged", commit=False)

    assert backend.effects() == []
    [row] = backend.rows()
    assert (row.state, row.token) == ("pending", claimed.token)
    assert await claim(store) == Claim("in_flight")


async def test_a_crashed_claim_is_run_again_and_its_late_completion_refused(
    kind: str, backend: Backend
) -> None:
    """The first send's process stalls past its lease; the next send takes the key
    over. When the first one wakes and completes, its transaction rolls back."""
    store = stores(kind, backend)
    first = await claim(store)
    assert first.token is not None
    second = await claim(store, now=NOW + LEASE)
    assert second.token is not None

    with pytest.raises(ConflictError, match=r"^the idempotency claim was lost: its"):
        await handle(kind, backend, first.token, "first charge")
    await handle(kind, backend, second.token, "second charge")

    assert backend.effects() == ["second charge"]
    [row] = backend.rows()
    assert (row.state, row.token) == ("completed", second.token)
    with pytest.raises(ConflictError):  # completed: a second completion is refused
        await handle(kind, backend, second.token, "again")
    assert backend.effects() == ["second charge"]


@pytest.mark.parametrize("commit", [True, False], ids=["committed", "rolled-back"])
async def test_a_claim_during_an_open_completion_waits_for_its_outcome(
    backend: Backend, commit: bool
) -> None:
    """A duplicate arriving while the first send's completion is written but not
    yet committed answers from what that transaction decides, never from before."""
    store = AsyncSqlAlchemyIdempotencyStore(backend.async_engine)
    first = await claim(store)
    assert first.token is not None
    late = NOW + LEASE  # the lease is over: only the open transaction holds it

    async with AsyncSession(backend.async_engine) as session:
        unit = AsyncSqlAlchemyUnitOfWork(session)
        await unit.begin()
        await session.execute(sa.insert(effects).values(note="charged"))
        await AsyncSqlAlchemyIdempotencyStore(backend.async_engine, session).complete(
            SCOPE, KEY, first.token, RESPONSE, now=NOW
        )
        duplicate = asyncio.create_task(claim(store, now=late))
        if backend.dialect == "postgresql":
            await wait_for_a_lock_wait(backend)
        await (unit.commit() if commit else unit.rollback())
    answer = await duplicate

    if commit:
        assert answer == Claim("replay", outcome=RESPONSE)
        assert backend.effects() == ["charged"]
    else:
        assert answer.status == "claimed"
        assert answer.token != first.token
        assert backend.effects() == []


async def wait_for_a_lock_wait(backend: Backend, polls: int = 5000) -> None:
    """Until a PostgreSQL backend waits on a lock (each poll is a round trip)."""
    # pg_locks, not pg_stat_activity: the latter is a snapshot per transaction.
    query = sa.text("SELECT count(*) FROM pg_locks WHERE NOT granted")
    async with backend.async_engine.connect() as connection:
        for _ in range(polls):
            if await connection.scalar(query):
                return
            await checkpoint()
    raise AssertionError("the duplicate claim never waited for the row lock")


async def test_complete_needs_the_session_and_its_transaction(backend: Backend) -> None:
    store = AsyncSqlAlchemyIdempotencyStore(backend.async_engine)
    claimed = await claim(store)
    assert claimed.token is not None

    with pytest.raises(
        RuntimeError,
        match=r"^AsyncSqlAlchemyIdempotencyStore.complete\(\) writes on the unit of "
        r"work's session and this store has none: build it with session=\.\.\., or "
        r"call finish\(\)$",
    ):
        await store.complete(SCOPE, KEY, claimed.token, RESPONSE, now=NOW)
    async with AsyncSession(backend.async_engine) as session:
        with pytest.raises(
            RuntimeError,
            match=r"^AsyncSqlAlchemyIdempotencyStore.complete\(\) runs inside the "
            r"unit of work's transaction and its session is in none: outside a unit "
            r"of work, call finish\(\)$",
        ):
            await AsyncSqlAlchemyIdempotencyStore(
                backend.async_engine, session
            ).complete(SCOPE, KEY, claimed.token, RESPONSE, now=NOW)
    with (
        Session(backend.engine) as sync_session,
        pytest.raises(RuntimeError, match=r"^SqlAlchemyIdempotencyStore.complete"),
    ):
        SqlAlchemyIdempotencyStore(backend.engine, sync_session).complete(
            SCOPE, KEY, claimed.token, RESPONSE, now=NOW
        )
    with pytest.raises(RuntimeError, match=r"this store has none"):
        SqlAlchemyIdempotencyStore(backend.engine).complete(
            SCOPE, KEY, claimed.token, RESPONSE, now=NOW
        )
    assert [row.state for row in backend.rows()] == ["pending"]


async def test_a_takeover_after_the_lease_is_one_round_trip_more(
    backend: Backend,
) -> None:
    """The lease is counted from the claim: the next send's claim, one lease later."""
    store = AsyncSqlAlchemyIdempotencyStore(backend.async_engine)
    await claim(store)
    assert await claim(store, now=NOW + LEASE - timedelta(microseconds=1)) == Claim(
        "in_flight"
    )
    assert (await claim(store, now=NOW + LEASE)).status == "claimed"
