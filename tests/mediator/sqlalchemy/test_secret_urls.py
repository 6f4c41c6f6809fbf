"""No database URL's password or query reaches an error or a log record of the mediator.

A password and a query value are planted in the engine URL; the mediator's
SQLAlchemy entry points are given it where they refuse one, and run on it
against a real PostgreSQL (which trusts the connection, whatever the password)
and against a port where nothing listens. Every exception, with its chain, and
every log record, with its arguments and extras, is searched for them.
"""

from __future__ import annotations

import logging
import traceback
from collections.abc import Callable, Iterator

import pytest
import sqlalchemy as sa
from injector import Injector
from sqlalchemy import exc

from mediator import ConflictError, Mediator, MediatorModule
from mediator.sqlalchemy import (
    AsyncSqlAlchemyIdempotencyStore,
    SqlAlchemyIdempotencyStore,
    SqlAlchemyModule,
    acreate_idempotency_table,
    create_idempotency_table,
)
from tests.mediator._support.shop_db import SYNC_HANDLERS, Base, OpenAccount
from tests.support.fault_server import free_port

pytestmark = pytest.mark.anyio

PASSWORD = "sentinel-db-password-71c4"
TOKEN = "sentinel-db-token-d20e"


def planted(url: str) -> sa.URL:
    """`url` with the password and a query value planted."""
    return sa.make_url(url).set(password=PASSWORD, query={"application_name": TOKEN})


def clean(text: str) -> None:
    assert PASSWORD not in text
    assert TOKEN not in text


def chain(failure: BaseException) -> str:
    return "".join(traceback.format_exception(failure)) + repr(failure)


def records(caplog: pytest.LogCaptureFixture) -> str:
    parts = [caplog.text]
    for record in caplog.records:
        parts += [record.getMessage(), repr(record.args)]
        parts += [f"{key}={value!r}" for key, value in vars(record).items()]
    return "\n".join(parts)


URL = (
    f"postgresql+psycopg://app:{PASSWORD}@db.example:5432/shop?application_name={TOKEN}"
)

REFUSALS: list[tuple[str, Callable[[], object], str]] = [
    (
        "module, a URL string",
        lambda: SqlAlchemyModule(engine=URL),  # type: ignore[arg-type]
        "SqlAlchemyModule(engine=...) takes an Engine, got a URL: pass "
        "engine=create_engine(url), or async_engine=create_async_engine(url)",
    ),
    (
        "module, a URL object",
        lambda: SqlAlchemyModule(async_engine=sa.make_url(URL)),  # type: ignore[arg-type]
        "SqlAlchemyModule(async_engine=...) takes an AsyncEngine, got a URL: pass "
        "engine=create_engine(url), or async_engine=create_async_engine(url)",
    ),
    (
        "sync store",
        lambda: SqlAlchemyIdempotencyStore(URL),  # type: ignore[arg-type]
        "SqlAlchemyIdempotencyStore(engine=...) takes an Engine, got str",
    ),
    (
        "async store",
        lambda: AsyncSqlAlchemyIdempotencyStore(sa.make_url(URL)),  # type: ignore[arg-type]
        "AsyncSqlAlchemyIdempotencyStore(engine=...) takes an AsyncEngine, got URL",
    ),
    (
        "table",
        lambda: create_idempotency_table(URL),  # type: ignore[arg-type]
        "create_idempotency_table(engine=...) takes an Engine, got str",
    ),
]


@pytest.mark.parametrize(
    ("build", "message"),
    [pytest.param(build, message, id=case) for case, build, message in REFUSALS],
)
def test_a_url_given_for_an_engine_is_refused_without_quoting_it(
    build: Callable[[], object], message: str
) -> None:
    with pytest.raises(TypeError) as caught:
        build()
    assert str(caught.value) == message
    clean(chain(caught.value))


async def test_the_async_table_maker_refuses_a_url_without_quoting_it() -> None:
    with pytest.raises(TypeError) as caught:
        await acreate_idempotency_table(URL)  # type: ignore[arg-type]
    assert str(caught.value) == (
        "acreate_idempotency_table(engine=...) takes an AsyncEngine, got str"
    )
    clean(chain(caught.value))


@pytest.fixture
def engine(postgres_url: str) -> Iterator[sa.Engine]:
    engine = sa.create_engine(planted(postgres_url))
    Base.metadata.drop_all(engine)
    Base.metadata.create_all(engine)
    yield engine
    Base.metadata.drop_all(engine)
    engine.dispose()


def mediator_on(engine: sa.Engine) -> Mediator:
    module = MediatorModule(lambda m: m.add_handler(*SYNC_HANDLERS).use_defaults())
    return Injector([module, SqlAlchemyModule(engine=engine)]).get(Mediator)


def test_a_conflict_on_postgres_names_no_part_of_the_url(
    engine: sa.Engine, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    mediator = mediator_on(engine)
    mediator.send_sync(OpenAccount(email="taken@example.org"))
    with pytest.raises(ConflictError) as caught:
        mediator.send_sync(OpenAccount(email="taken@example.org"))
    assert str(caught.value) == (
        "the write conflicts with existing data (unique constraint)"
    )
    assert caplog.records  # the audit records are searched too
    clean(chain(caught.value) + records(caplog))


def test_a_database_that_cannot_be_reached_names_no_part_of_the_url(
    postgres_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    unreachable = planted(postgres_url).set(port=free_port())
    engine = sa.create_engine(unreachable)
    failures: list[BaseException] = []
    try:
        mediator = mediator_on(engine)
        with pytest.raises(exc.OperationalError) as caught:
            mediator.send_sync(OpenAccount(email="nobody@example.org"))
        failures.append(caught.value)
    finally:
        engine.dispose()
    assert "127.0.0.1" in chain(failures[0])  # the search reads the driver's text
    clean(chain(failures[0]) + records(caplog))
