"""`SqlAlchemyModule` binds the idempotency store per send, on the send's session;
the stores refuse wrong arguments when built; the public names are pinned."""

from __future__ import annotations

import importlib
import types
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from injector import Injector, inject
from sqlalchemy.ext.asyncio import (
    AsyncSession,
    async_sessionmaker,
    create_async_engine,
)
from sqlalchemy.orm import Session, sessionmaker

import mediator.sqlalchemy
from mediator import (
    AsyncIdempotencyStore,
    Claim,
    Command,
    CommandHandler,
    IdempotencyStore,
    Mediator,
    MediatorModule,
    StoredOutcome,
    transactional,
)
from mediator._core.scope import enter_scope
from mediator.sqlalchemy import (
    AsyncSqlAlchemyIdempotencyStore,
    SqlAlchemyIdempotencyStore,
    SqlAlchemyModule,
    acreate_idempotency_table,
    create_idempotency_table,
    idempotency_table,
)
from tests.mediator.sqlalchemy.idempotency_db import (
    KEY,
    LEASE,
    NOW,
    PRINT,
    RESPONSE,
    RETENTION,
    SCOPE,
    Backend,
    claim,
    effects,
)
from tests.support.written_in import run_examples

pytestmark = pytest.mark.anyio


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[sa.Engine]:
    engine = sa.create_engine(f"sqlite:///{tmp_path / 'bound.db'}")
    yield engine
    engine.dispose()


def complete_in_the_session(store: IdempotencyStore, session: Session) -> None:
    """A claim on the store's engine, completed on `session` when it commits.

    The first completion is rolled back with the session's transaction; were it
    not, the second would find the record completed and raise ConflictError.
    """
    claimed = store.claim(
        SCOPE, "sync", PRINT, now=NOW, lease=LEASE, retention=RETENTION
    )
    assert claimed.token is not None
    with session.begin():
        store.complete(SCOPE, "sync", claimed.token, RESPONSE, now=NOW)
        session.rollback()
    with session.begin():
        store.complete(SCOPE, "sync", claimed.token, RESPONSE, now=NOW)


async def acomplete_in_the_session(
    store: AsyncIdempotencyStore, session: AsyncSession
) -> None:
    claimed = await claim(store, key="async")
    assert claimed.token is not None
    async with session.begin():
        await store.complete(SCOPE, "async", claimed.token, RESPONSE, now=NOW)
        await session.rollback()
    async with session.begin():
        await store.complete(SCOPE, "async", claimed.token, RESPONSE, now=NOW)


def states(backend: Backend) -> dict[str, str]:
    return {row.key: row.state for row in backend.rows()}


async def test_the_module_binds_a_store_per_send_on_the_sends_session(
    backend: Backend,
) -> None:
    injector = Injector(
        [SqlAlchemyModule(engine=backend.engine, async_engine=backend.async_engine)]
    )

    async with enter_scope():
        store = injector.get(IdempotencyStore)
        async_store = injector.get(AsyncIdempotencyStore)
        assert isinstance(store, SqlAlchemyIdempotencyStore)
        assert isinstance(async_store, AsyncSqlAlchemyIdempotencyStore)
        assert injector.get(IdempotencyStore) is store
        assert injector.get(AsyncIdempotencyStore) is async_store

        complete_in_the_session(store, injector.get(Session))
        await acomplete_in_the_session(async_store, injector.get(AsyncSession))
    async with enter_scope():
        assert injector.get(IdempotencyStore) is not store

    assert states(backend) == {"sync": "completed", "async": "completed"}


async def test_a_factory_lends_the_store_its_engine(backend: Backend) -> None:
    with backend.engine.connect() as connection:
        factories = [sessionmaker(backend.engine), sessionmaker(bind=connection)]
        for number, factory in enumerate(factories):
            injector = Injector([SqlAlchemyModule(session_factory=factory)])
            with enter_scope():
                store = injector.get(IdempotencyStore)
                claimed = store.claim(
                    SCOPE,
                    f"k{number}",
                    PRINT,
                    now=NOW,
                    lease=LEASE,
                    retention=RETENTION,
                )
                assert claimed.status == "claimed"
    async_factory = async_sessionmaker(backend.async_engine)
    injector = Injector([SqlAlchemyModule(async_session_factory=async_factory)])
    async with enter_scope():
        await acomplete_in_the_session(
            injector.get(AsyncIdempotencyStore), injector.get(AsyncSession)
        )

    assert states(backend) == {"k0": "pending", "k1": "pending", "async": "completed"}


def test_a_factory_bound_per_table_gets_no_store(backend: Backend) -> None:
    engine = backend.engine
    factory = sessionmaker(binds={idempotency_table: engine})
    injector = Injector([SqlAlchemyModule(session_factory=factory)])

    assert injector.binder.has_explicit_binding_for(Session)
    assert not injector.binder.has_explicit_binding_for(IdempotencyStore)


def test_a_side_without_a_unit_of_work_has_no_store(backend: Backend) -> None:
    injector = Injector([SqlAlchemyModule(engine=backend.engine)])

    assert injector.binder.has_explicit_binding_for(IdempotencyStore)
    assert not injector.binder.has_explicit_binding_for(AsyncIdempotencyStore)


@transactional
class Charge(Command[str]):
    token: str
    fail: bool = False


class ChargeHandler(CommandHandler[Charge, str]):
    """Writes its effect and completes the claim, as IdempotencyBehavior will."""

    @inject
    def __init__(self, session: AsyncSession, store: AsyncIdempotencyStore) -> None:
        self.session = session
        self.store = store

    async def handle(self, request: Charge) -> str:
        await self.session.execute(sa.insert(effects).values(note="charged"))
        outcome = StoredOutcome("response", "builtins:str", '"ok"')
        await self.store.complete(SCOPE, KEY, request.token, outcome, now=NOW)
        if request.fail:
            raise RuntimeError("after the completion")
        return "ok"


async def test_a_transactional_send_completes_on_the_unit_of_works_session(
    backend: Backend,
) -> None:
    module = MediatorModule(lambda m: m.add_handler(ChargeHandler).use_defaults())
    injector = Injector([module, SqlAlchemyModule(async_engine=backend.async_engine)])
    mediator = injector.get(Mediator)
    store = AsyncSqlAlchemyIdempotencyStore(backend.async_engine)
    claimed = await claim(store)
    assert claimed.token is not None

    with pytest.raises(RuntimeError, match="after the completion"):
        await mediator.send(Charge(token=claimed.token, fail=True))
    assert backend.effects() == []
    assert await claim(store) == Claim("in_flight")

    assert await mediator.send(Charge(token=claimed.token)) == "ok"
    assert backend.effects() == ["charged"]
    replay = await claim(store)
    assert replay.status == "replay"


async def test_the_stores_refuse_the_wrong_kind_of_argument(engine: sa.Engine) -> None:
    async_engine = create_async_engine("sqlite+aiosqlite://", poolclass=sa.NullPool)
    cases: list[tuple[Callable[[], object], str]] = [
        (
            lambda: SqlAlchemyIdempotencyStore(async_engine),  # type: ignore[arg-type]
            "SqlAlchemyIdempotencyStore(engine=...) takes an Engine, got an "
            "AsyncEngine",
        ),
        (
            lambda: AsyncSqlAlchemyIdempotencyStore(engine),  # type: ignore[arg-type]
            "AsyncSqlAlchemyIdempotencyStore(engine=...) takes an AsyncEngine, got "
            "an Engine",
        ),
        (
            lambda: SqlAlchemyIdempotencyStore(engine, AsyncSession()),  # type: ignore[arg-type]
            "SqlAlchemyIdempotencyStore(session=...) takes a Session or None, got an "
            "AsyncSession",
        ),
        (
            lambda: AsyncSqlAlchemyIdempotencyStore(async_engine, Session()),  # type: ignore[arg-type]
            "AsyncSqlAlchemyIdempotencyStore(session=...) takes an AsyncSession or "
            "None, got a Session",
        ),
        (
            lambda: SqlAlchemyIdempotencyStore("sqlite://"),  # type: ignore[arg-type]
            "SqlAlchemyIdempotencyStore(engine=...) takes an Engine, got str",
        ),
        (
            lambda: create_idempotency_table(async_engine),  # type: ignore[arg-type]
            "create_idempotency_table(engine=...) takes an Engine, got an AsyncEngine",
        ),
    ]
    for build, message in cases:
        with pytest.raises(TypeError) as refused:
            build()
        assert str(refused.value) == message
    with pytest.raises(TypeError) as refused:
        await acreate_idempotency_table(engine)  # type: ignore[arg-type]
    assert str(refused.value) == (
        "acreate_idempotency_table(engine=...) takes an AsyncEngine, got an Engine"
    )


def test_the_stores_refuse_a_database_they_do_not_know() -> None:
    no_driver = types.SimpleNamespace(paramstyle="format", version_info=(2, 0, 0))
    mysql = sa.create_engine("mysql://user@host/db", module=no_driver)

    with pytest.raises(TypeError) as refused:
        SqlAlchemyIdempotencyStore(mysql)

    assert str(refused.value) == (
        "SqlAlchemyIdempotencyStore works on SQLite and PostgreSQL, not mysql"
    )


def test_the_public_names_are_pinned() -> None:
    assert mediator.sqlalchemy.__all__ == [
        "AsyncHandoff",
        "AsyncSqlAlchemyIdempotencyStore",
        "AsyncSqlAlchemyUnitOfWork",
        "Handoff",
        "OutboxMessage",
        "OutboxRelay",
        "OutboxStats",
        "SqlAlchemyIdempotencyStore",
        "SqlAlchemyModule",
        "SqlAlchemyUnitOfWork",
        "acreate_idempotency_table",
        "acreate_outbox_table",
        "create_idempotency_table",
        "create_outbox_table",
        "idempotency_table",
        "outbox_table",
        "prepare_postgres",
        "prepare_sqlite",
        "translate_error",
    ]


@pytest.mark.parametrize(
    "name",
    [
        "mediator.sqlalchemy._idempotency.store",
        "mediator.sqlalchemy._idempotency.store_sync",
        "mediator.sqlalchemy._idempotency.table",
        "mediator.sqlalchemy._outbox.table",
    ],
)
def test_docstring_examples(name: str) -> None:
    result = run_examples(importlib.import_module(name))
    assert result.attempted > 0
    assert result.failed == 0
