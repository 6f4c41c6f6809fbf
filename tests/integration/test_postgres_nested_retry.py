"""A nested `@retryable @transactional` send on a real PostgreSQL: each attempt in a
savepoint, and a real serialization failure (40001) in the nested send retried by
the outermost send, sync and async."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine
from sqlalchemy.orm import Session

from mediator.sqlalchemy import SqlAlchemyModule
from tests.mediator_resilience._support.nested_db import (
    ASYNC_HANDLERS,
    SYNC_HANDLERS,
    Base,
    Counter,
    Outer,
    OuterAsync,
    Row,
    Script,
    build,
    names,
)

pytestmark = pytest.mark.anyio


@pytest.fixture
def engine(postgres_url: str) -> Iterator[sa.Engine]:
    engine = sa.create_engine(postgres_url, isolation_level="SERIALIZABLE")
    Base.metadata.drop_all(engine)
    Base.metadata.create_all(engine)
    with engine.begin() as connection:
        connection.execute(sa.insert(Counter).values(id=1, n=0))
    yield engine
    Base.metadata.drop_all(engine)
    engine.dispose()


@pytest.fixture
async def async_engine(
    engine: sa.Engine, postgres_url: str
) -> AsyncIterator[AsyncEngine]:
    async_engine = create_async_engine(postgres_url, isolation_level="SERIALIZABLE")
    yield async_engine
    await async_engine.dispose()


def counter(engine: sa.Engine) -> int:
    with Session(engine) as session:
        return session.scalar(sa.select(Counter.n)) or 0


def rows(engine: sa.Engine) -> int:
    with Session(engine) as session:
        return session.scalar(sa.select(sa.func.count()).select_from(Row)) or 0


@pytest.mark.parametrize("failures", [1, 2, 3])
def test_a_nested_retry_commits_only_its_last_attempt_on_postgres(
    engine: sa.Engine, failures: int
) -> None:
    Script.reset(failures)
    mediator = build(SqlAlchemyModule(engine=engine), SYNC_HANDLERS)

    mediator.send_sync(Outer())

    assert names(engine) == ["outer1", f"inner{failures + 1}"]
    assert (rows(engine), counter(engine)) == (2, 1)


@pytest.mark.parametrize("failures", [1, 2, 3])
async def test_a_nested_async_retry_commits_only_its_last_attempt_on_postgres(
    engine: sa.Engine, async_engine: AsyncEngine, failures: int
) -> None:
    Script.reset(failures)
    mediator = build(SqlAlchemyModule(async_engine=async_engine), ASYNC_HANDLERS)

    await mediator.send(OuterAsync())

    assert names(engine) == ["outer1", f"inner{failures + 1}"]
    assert (rows(engine), counter(engine)) == (2, 1)


def test_a_serialization_failure_in_a_nested_send_retries_the_whole_unit(
    engine: sa.Engine, caplog: pytest.LogCaptureFixture
) -> None:
    def bump_elsewhere_then_here(session: Any) -> None:
        # The outer transaction's snapshot predates this commit: updating the
        # same row from it is a genuine 40001.
        with engine.begin() as other:
            other.execute(sa.update(Counter).values(n=Counter.n + 10))
        session.execute(sa.update(Counter).values(n=Counter.n + 1))

    Script.reset(failures=1)
    Script.hook = bump_elsewhere_then_here
    mediator = build(SqlAlchemyModule(engine=engine), SYNC_HANDLERS)

    with caplog.at_level(logging.WARNING, logger="mediator_resilience"):
        mediator.send_sync(Outer())

    # Not retried inside the doomed transaction: the outer send ran again.
    assert [r.getMessage().split(";")[0] for r in caplog.records] == [
        "Outer: attempt 1 failed with TransientDatabaseError"
    ]
    assert (Script.outer_attempts, Script.inner_attempts) == (2, 2)
    assert names(engine) == ["outer2", "inner2"]
    assert counter(engine) == 11


async def test_a_serialization_failure_in_a_nested_async_send_retries_the_whole_unit(
    engine: sa.Engine, async_engine: AsyncEngine
) -> None:
    async def bump_elsewhere_then_here(session: Any) -> None:
        async with async_engine.begin() as other:
            await other.execute(sa.update(Counter).values(n=Counter.n + 10))
        await session.execute(sa.update(Counter).values(n=Counter.n + 1))

    Script.reset(failures=1)
    Script.hook = bump_elsewhere_then_here
    mediator = build(SqlAlchemyModule(async_engine=async_engine), ASYNC_HANDLERS)

    await mediator.send(OuterAsync())

    assert (Script.outer_attempts, Script.inner_attempts) == (2, 2)
    assert names(engine) == ["outer2", "inner2"]
    assert counter(engine) == 11


def test_a_dropped_connection_in_a_nested_send_retries_the_whole_unit(
    engine: sa.Engine, caplog: pytest.LogCaptureFixture
) -> None:
    def lose_the_connection(session: Any) -> None:
        pid = session.scalar(sa.text("SELECT pg_backend_pid()"))
        with engine.connect() as other:
            other.execute(sa.text("SELECT pg_terminate_backend(:pid)"), {"pid": pid})
        session.execute(sa.text("SELECT 1"))

    Script.reset(failures=1)
    Script.hook = lose_the_connection
    mediator = build(SqlAlchemyModule(engine=engine), SYNC_HANDLERS)

    with caplog.at_level(logging.WARNING, logger="mediator_resilience"):
        mediator.send_sync(Outer())

    assert [r.getMessage().split(";")[0] for r in caplog.records] == [
        "Outer: attempt 1 failed with TransientDatabaseError"
    ]
    assert (Script.outer_attempts, Script.inner_attempts) == (2, 2)
    assert names(engine) == ["outer2", "inner2"]
