from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from mediator import AsyncIdempotencyStore
from mediator.sqlalchemy import (
    AsyncSqlAlchemyIdempotencyStore,
    SqlAlchemyIdempotencyStore,
)
from tests.mediator.sqlalchemy.idempotency_db import (
    Backend,
    SyncAsAsync,
    open_backend,
    sqlite_urls,
)


@pytest.fixture(params=["sqlite", "postgresql"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    """A database with the idempotency table, on SQLite (a file) or PostgreSQL."""
    if request.param == "sqlite":
        url, async_url = sqlite_urls(tmp_path / "idempotency.db")
    else:
        url = async_url = request.getfixturevalue("postgres_url")
    with open_backend(request.param, url, async_url) as opened:
        yield opened


@pytest.fixture(params=["sync", "async"])
def store(request: pytest.FixtureRequest, backend: Backend) -> AsyncIdempotencyStore:
    """The store of either kind, without a session, behind the async protocol."""
    if request.param == "sync":
        return SyncAsAsync(SqlAlchemyIdempotencyStore(backend.engine))
    return AsyncSqlAlchemyIdempotencyStore(backend.async_engine)
