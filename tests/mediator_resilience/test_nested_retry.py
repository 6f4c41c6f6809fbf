"""A nested `@retryable @transactional` send on SQLite: a failed attempt's writes
are never committed, and a failure that dooms the outer transaction goes up to
the outermost retry."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from mediator import TransientDatabaseError
from mediator.sqlalchemy import SqlAlchemyModule
from tests.mediator_resilience._support.nested_db import (
    ASYNC_HANDLERS,
    SYNC_HANDLERS,
    Base,
    Flaky,
    InnerAsync,
    Outer,
    OuterAsync,
    Script,
    build,
    names,
)

pytestmark = pytest.mark.anyio


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[sa.Engine]:
    engine = sa.create_engine(f"sqlite:///{tmp_path / 'nested.db'}")
    Base.metadata.create_all(engine)
    yield engine
    engine.dispose()


@pytest.fixture
async def async_engine(tmp_path: Path) -> AsyncIterator[AsyncEngine]:
    engine = create_async_engine(f"sqlite+aiosqlite:///{tmp_path / 'nested.db'}")
    async with engine.begin() as connection:
        await connection.run_sync(Base.metadata.create_all)
    yield engine
    await engine.dispose()


async def async_names(engine: AsyncEngine) -> list[str]:
    async with engine.connect() as connection:
        rows = await connection.scalars(sa.text("SELECT name FROM nested_retry_rows"))
        return sorted(rows)


@pytest.mark.parametrize("failures", [1, 2, 3])
def test_a_nested_retry_commits_only_the_attempt_that_succeeded(
    engine: sa.Engine, failures: int
) -> None:
    Script.reset(failures)
    mediator = build(SqlAlchemyModule(engine=engine), SYNC_HANDLERS)

    mediator.send_sync(Outer())

    assert names(engine) == ["outer1", f"inner{failures + 1}"]
    assert (Script.outer_attempts, Script.inner_attempts) == (1, failures + 1)


@pytest.mark.parametrize("failures", [1, 2, 3])
async def test_a_nested_async_retry_commits_only_the_attempt_that_succeeded(
    async_engine: AsyncEngine, failures: int
) -> None:
    Script.reset(failures)
    mediator = build(SqlAlchemyModule(async_engine=async_engine), ASYNC_HANDLERS)

    await mediator.send(OuterAsync())

    assert await async_names(async_engine) == sorted(["outer1", f"inner{failures + 1}"])
    assert (Script.outer_attempts, Script.inner_attempts) == (1, failures + 1)


def test_an_exhausted_nested_retry_fails_the_outer_attempt_which_is_retried_whole(
    engine: sa.Engine,
) -> None:
    Script.reset(failures=3)  # each send has two attempts
    mediator = build(
        SqlAlchemyModule(engine=engine), SYNC_HANDLERS, max_retry_attempts=1
    )

    mediator.send_sync(Outer())

    # outer1 ran inner1 and inner2, both failed: gone with outer1's transaction.
    # outer2 ran inner3 (failed, rolled back to its savepoint) and inner4.
    assert (Script.outer_attempts, Script.inner_attempts) == (2, 4)
    assert names(engine) == ["outer2", "inner4"]


def test_a_doomed_transaction_is_retried_whole_by_the_outermost_retry(
    engine: sa.Engine,
) -> None:
    Script.reset(failures=1)
    Script.error = TransientDatabaseError
    mediator = build(SqlAlchemyModule(engine=engine), SYNC_HANDLERS)

    mediator.send_sync(Outer())

    # The inner send did not retry inside the doomed transaction: the outer did.
    assert (Script.outer_attempts, Script.inner_attempts) == (2, 2)
    assert names(engine) == ["outer2", "inner2"]


async def test_a_doomed_async_transaction_is_retried_whole_by_the_outermost_retry(
    async_engine: AsyncEngine,
) -> None:
    Script.reset(failures=1)
    Script.error = TransientDatabaseError
    mediator = build(SqlAlchemyModule(async_engine=async_engine), ASYNC_HANDLERS)

    await mediator.send(OuterAsync())

    assert (Script.outer_attempts, Script.inner_attempts) == (2, 2)
    assert await async_names(async_engine) == ["inner2", "outer2"]


async def test_a_top_level_send_still_retries_a_transient_database_error(
    async_engine: AsyncEngine,
) -> None:
    Script.reset(failures=2)
    Script.error = TransientDatabaseError
    mediator = build(SqlAlchemyModule(async_engine=async_engine), ASYNC_HANDLERS)

    await mediator.send(InnerAsync())

    assert Script.inner_attempts == 3
    assert await async_names(async_engine) == ["inner3"]


def test_the_failure_of_the_last_nested_attempt_is_raised_when_no_one_retries(
    engine: sa.Engine,
) -> None:
    Script.reset(failures=9)
    mediator = build(
        SqlAlchemyModule(engine=engine), SYNC_HANDLERS, max_retry_attempts=0
    )

    with pytest.raises(Flaky):
        mediator.send_sync(Outer())

    assert names(engine) == []
