"""The throwaway PostgreSQL cluster: reachable sync and async, loopback only, real
SERIALIZABLE conflicts; and a missing server skips, except under CI, where it fails."""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest
import sqlalchemy as sa
from sqlalchemy.exc import OperationalError
from sqlalchemy.ext.asyncio import create_async_engine

from tests.support.missing import missing
from tests.support.postgres import (
    SERIALIZATION_FAILURE,
    find_server_binaries,
    provoke_serialization_failure,
    unavailable,
)

pytestmark = pytest.mark.anyio


@pytest.fixture
def engine(postgres_url: str) -> Iterator[sa.Engine]:
    engine = sa.create_engine(postgres_url)
    yield engine
    engine.dispose()


def test_sync_engine_reads_and_writes(engine: sa.Engine) -> None:
    create = "create table sync_items (id serial primary key, name text)"
    with engine.begin() as conn:
        version = conn.execute(sa.text("select version()")).scalar_one()
        conn.execute(sa.text(create))
        conn.execute(sa.text("insert into sync_items (name) values ('a'), ('b')"))
    with engine.connect() as conn:
        names = conn.scalars(sa.text("select name from sync_items order by id"))
        assert list(names) == ["a", "b"]
    assert str(version).startswith("PostgreSQL ")


async def test_async_engine_reads_and_writes(postgres_url: str) -> None:
    engine = create_async_engine(postgres_url)
    try:
        async with engine.begin() as conn:
            version = (await conn.execute(sa.text("select version()"))).scalar_one()
            await conn.execute(sa.text("create table async_items (id int primary key)"))
            await conn.execute(sa.text("insert into async_items values (1), (2)"))
        async with engine.connect() as conn:
            count = await conn.scalar(sa.text("select count(*) from async_items"))
    finally:
        await engine.dispose()
    assert str(version).startswith("PostgreSQL ")
    assert count == 2


def test_server_listens_on_loopback_only_without_durability(engine: sa.Engine) -> None:
    query = sa.text(
        "select host(inet_server_addr()), inet_server_port(),"
        " current_setting('listen_addresses'), current_setting('fsync'),"
        " current_setting('server_encoding')"
    )
    with engine.connect() as conn:
        row = conn.execute(query).one()
    assert tuple(row) == ("127.0.0.1", engine.url.port, "127.0.0.1", "off", "UTF8")


def test_second_serializable_update_of_a_row_fails_with_40001(
    engine: sa.Engine,
) -> None:
    with pytest.raises(OperationalError) as caught:
        provoke_serialization_failure(engine)
    assert isinstance(caught.value.orig, psycopg.errors.SerializationFailure)
    assert caught.value.orig.sqlstate == SERIALIZATION_FAILURE
    probes = sa.text("select count(*) from pg_tables where tablename like 'serial%'")
    with engine.connect() as conn:
        assert conn.scalar(probes) == 0


def test_missing_binaries_are_not_found(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "")
    assert find_server_binaries("/nonexistent/postgresql/*/bin") is None


def test_missing_server_fails_under_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CI", "1")
    with pytest.raises(pytest.fail.Exception, match=r"\.ci/run should have installed"):
        unavailable("no PostgreSQL")


def test_missing_server_skips_outside_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="no PostgreSQL"):
        unavailable("no PostgreSQL")


def test_a_missing_tool_fails_under_ci_naming_the_remedy(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("CI", "1")
    with pytest.raises(pytest.fail.Exception) as raised:
        missing("uv is not installed", remedy="run `make venv` first")
    assert str(raised.value) == (
        "uv is not installed; run `make venv` first (CI is set, so this is a failure)"
    )


def test_a_missing_tool_skips_outside_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception) as raised:
        missing("uv is not installed", remedy="run `make venv` first")
    assert str(raised.value) == "uv is not installed"
