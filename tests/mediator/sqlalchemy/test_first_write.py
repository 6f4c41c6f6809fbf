"""The unit of work's transaction begins at its first write, bounded by the deadline.

On a SQLite file (sqlite3 and aiosqlite) and on PostgreSQL (psycopg, sync and
async): reads before the first write hold no lock and no open transaction; each
kind of first write begins it; commit and rollback end it; the wait for its locks
is cut short by the caller's deadline, raised as `DeadlineExceededError`.
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
import uuid
from collections.abc import Callable, Generator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlalchemy as sa
from injector import Injector, inject
from sqlalchemy import exc
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, create_async_engine
from sqlalchemy.orm import DeclarativeBase, Session

from mediator import (
    Command,
    CommandHandler,
    DeadlineExceededError,
    DomainError,
    Mediator,
    MediatorModule,
    TransientDatabaseError,
    transactional,
)
from mediator.asgi import DomainErrorMiddleware
from mediator.sqlalchemy import (
    AsyncSqlAlchemyUnitOfWork,
    SqlAlchemyModule,
    SqlAlchemyUnitOfWork,
    prepare_postgres,
    prepare_sqlite,
    translate_error,
)
from mediator.sqlalchemy._first_write import is_write
from mediator_resilience import is_transient_failure

pytestmark = pytest.mark.anyio

POOLED = 6  # connections to check after a unit of work: the pool keeps 5
BUSY_TIMEOUT = 30.0  # the engine's own wait: far longer than any deadline here


@dataclass
class Db:
    dialect: str
    engine: sa.Engine
    async_engine: AsyncEngine
    table: sa.Table
    path: Path | None = None

    def locked_by_another(self) -> bool:
        """SQLite: whether another connection holds the write lock."""
        assert self.path is not None
        probe = sqlite3.connect(self.path, timeout=0, isolation_level=None)
        try:
            probe.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as error:
            if "locked" not in str(error):
                raise
            return True
        finally:
            probe.close()
        return False

    def backend_state(self, pid: int) -> tuple[str, int]:
        """PostgreSQL: the backend's state and how many relation locks it holds."""
        with self.engine.connect() as probe:
            probe = probe.execution_options(isolation_level="AUTOCOMMIT")
            state = probe.scalar(
                sa.text("SELECT state FROM pg_stat_activity WHERE pid = :pid"),
                {"pid": pid},
            )
            locks = probe.scalar(
                sa.text(
                    "SELECT count(*) FROM pg_locks WHERE pid = :pid "
                    "AND locktype = 'relation' AND relation = CAST(:table AS regclass)"
                ),
                {"pid": pid, "table": self.table.name},
            )
        return str(state), int(locks or 0)

    def notes(self) -> list[str]:
        with self.engine.connect() as connection:
            return sorted(connection.scalars(sa.select(self.table.c.note)))


@contextmanager
def open_db(
    dialect: str, request: pytest.FixtureRequest, tmp_path: Path
) -> Generator[Db]:
    metadata = sa.MetaData()
    table = sa.Table(
        f"orders_{uuid.uuid4().hex[:8]}",
        metadata,
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("note", sa.String(50), nullable=False),
    )
    path: Path | None = None
    if dialect == "sqlite":
        path = tmp_path / "orders.db"
        timeout = {"timeout": BUSY_TIMEOUT}
        engine = sa.create_engine(f"sqlite:///{path}", connect_args=timeout)
        async_engine = create_async_engine(
            f"sqlite+aiosqlite:///{path}", connect_args=timeout
        )
    else:
        url = request.getfixturevalue("postgres_url")
        engine = sa.create_engine(url)
        async_engine = create_async_engine(url)
    for each in (engine, async_engine):
        prepare_sqlite(each)
        prepare_postgres(each)
    metadata.create_all(engine)
    with engine.begin() as connection:
        connection.execute(sa.insert(table).values(note="seed"))  # id 1
    try:
        yield Db(dialect, engine, async_engine, table, path)
    finally:
        asyncio.run(async_engine.dispose())
        metadata.drop_all(engine)
        engine.dispose()


@pytest.fixture(params=["sqlite", "postgresql"])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Db]:
    with open_db(request.param, request, tmp_path) as opened:
        yield opened


@pytest.fixture
def pg(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Db]:
    """PostgreSQL only: row locks (``FOR UPDATE``, ``NOWAIT``), isolation levels."""
    with open_db("postgresql", request, tmp_path) as opened:
        yield opened


def read(table: sa.Table) -> Any:
    return sa.select(sa.func.count()).select_from(table)


def insert(table: sa.Table, note: str) -> Any:
    return sa.insert(table).values(note=note)


def holds_nothing(db: Db, pid: int | None) -> bool:
    if db.dialect == "sqlite":
        return not db.locked_by_another()
    assert pid is not None
    return db.backend_state(pid) == ("idle", 0)


def holds_transaction(db: Db, pid: int | None) -> bool:
    if db.dialect == "sqlite":
        return db.locked_by_another()
    assert pid is not None
    state, _ = db.backend_state(pid)
    return state == "idle in transaction"


def backend_pid(db: Db, session: Session) -> int | None:
    if db.dialect == "sqlite":
        return None
    return int(session.scalar(sa.text("SELECT pg_backend_pid()")) or 0)


async def abackend_pid(db: Db, session: AsyncSession) -> int | None:
    if db.dialect == "sqlite":
        return None
    return int(await session.scalar(sa.text("SELECT pg_backend_pid()")) or 0)


# --- reads hold nothing; the first write begins ---------------------------------


def write_kinds(table: sa.Table) -> dict[str, Callable[[Session], object]]:
    return {
        "core insert": lambda s: s.execute(insert(table, "core")),
        "core update": lambda s: s.execute(
            sa.update(table).where(table.c.id == 1).values(note="updated")
        ),
        "text delete": lambda s: s.execute(
            sa.text(f"DELETE FROM {table.name} WHERE id = 1")
        ),
        # SQLAlchemy sets the savepoint when the nested transaction is used.
        "savepoint": lambda s: (s.begin_nested(), s.execute(read(table))),
    }


WRITES = ["core insert", "core update", "text delete", "savepoint"]


@pytest.mark.parametrize("kind", WRITES)
def test_reads_hold_nothing_and_the_first_write_begins_sync(db: Db, kind: str) -> None:
    with Session(db.engine) as session:
        unit = SqlAlchemyUnitOfWork(session)
        unit.begin()
        pid = backend_pid(db, session)
        assert session.scalar(read(db.table)) == 1
        assert holds_nothing(db, pid)  # during the "call to another service"

        write_kinds(db.table)[kind](session)

        assert holds_transaction(db, pid)
        unit.commit()
        assert holds_nothing(db, pid)


@pytest.mark.parametrize("kind", ["core insert", "text delete", "savepoint"])
async def test_reads_hold_nothing_and_the_first_write_begins_async(
    db: Db, kind: str
) -> None:
    async with AsyncSession(db.async_engine) as session:
        unit = AsyncSqlAlchemyUnitOfWork(session)
        await unit.begin()
        pid = await abackend_pid(db, session)
        assert await session.scalar(read(db.table)) == 1
        assert holds_nothing(db, pid)

        await session.run_sync(lambda s: write_kinds(db.table)[kind](s))

        assert holds_transaction(db, pid)
        await unit.rollback()
        assert holds_nothing(db, pid)
    assert db.notes() == ["seed"]  # the rollback undid the write


def test_an_orm_flush_begins_the_transaction(db: Db) -> None:
    class Base(DeclarativeBase):
        pass

    class Order(Base):
        __table__ = db.table

    with Session(db.engine) as session:
        unit = SqlAlchemyUnitOfWork(session)
        unit.begin()
        pid = backend_pid(db, session)
        session.add(Order(note="flushed"))
        assert holds_nothing(db, pid)  # added, not flushed
        session.flush()
        assert holds_transaction(db, pid)
        unit.commit()
    assert db.notes() == ["flushed", "seed"]


def test_a_read_for_update_begins_the_transaction(pg: Db) -> None:
    with Session(pg.engine) as session:
        unit = SqlAlchemyUnitOfWork(session)
        unit.begin()
        pid = backend_pid(pg, session)
        session.execute(sa.select(pg.table).where(pg.table.c.id == 1).with_for_update())
        assert holds_transaction(pg, pid)
        unit.rollback()


def test_a_rolled_back_attempt_leaves_the_next_one_clean(db: Db) -> None:
    with Session(db.engine) as session:
        unit = SqlAlchemyUnitOfWork(session)
        unit.begin()
        session.execute(insert(db.table, "lost"))
        unit.rollback()

        unit.begin()
        pid = backend_pid(db, session)
        assert holds_nothing(db, pid)
        session.execute(insert(db.table, "kept"))
        unit.commit()
    assert db.notes() == ["kept", "seed"]


def test_a_pooled_connection_goes_back_to_the_engines_transactions(db: Db) -> None:
    """After a unit of work, a plain connection from the pool is not in autocommit."""
    with Session(db.engine) as session:
        unit = SqlAlchemyUnitOfWork(session)
        unit.begin()
        session.execute(insert(db.table, "unit"))
        unit.commit()
    for _ in range(POOLED):  # more than the pool keeps: every pooled connection
        with db.engine.connect() as connection:
            connection.execute(insert(db.table, "plain"))
            connection.rollback()
    assert db.notes() == ["seed", "unit"]


@pytest.mark.parametrize(
    ("level", "reads_inside"),
    [("READ COMMITTED", False), ("REPEATABLE READ", True), ("SERIALIZABLE", True)],
)
async def test_the_engines_isolation_level_is_kept(
    pg: Db, level: str, reads_inside: bool
) -> None:
    """At a snapshot level the reads begin the transaction: they must be in it."""
    engine = create_async_engine(pg.engine.url, isolation_level=level)
    prepare_postgres(engine)
    try:
        async with AsyncSession(engine) as session:
            unit = AsyncSqlAlchemyUnitOfWork(session)
            await unit.begin()
            pid = await abackend_pid(pg, session)
            assert holds_transaction(pg, pid) is reads_inside
            await session.execute(insert(pg.table, "levelled"))
            found = await session.scalar(sa.text("SHOW transaction_isolation"))
            await unit.commit()
        assert found == level.lower()
    finally:
        await engine.dispose()


def test_what_counts_as_a_write() -> None:
    reads = [
        "SELECT 1",
        "  -- note\n select * from t",
        "/* x */ WITH a AS (SELECT 1) SELECT * FROM a",
        "SHOW lock_timeout",
        "EXPLAIN SELECT 1",
    ]
    writes = [
        "INSERT INTO t VALUES (1)",
        "update t set a = 1",
        "DELETE FROM t",
        "SAVEPOINT sa_savepoint_1",
        "WITH gone AS (DELETE FROM t RETURNING id) SELECT * FROM gone",
        "SELECT * FROM t FOR UPDATE",
        "SELECT * FROM t FOR KEY SHARE",
        "EXPLAIN ANALYZE INSERT INTO t VALUES (1)",
        "PRAGMA user_version = 2",
        "",
    ]
    assert [is_write(s) for s in reads] == [False] * len(reads)
    assert [is_write(s) for s in writes] == [True] * len(writes)


# --- the deadline bounds the wait -------------------------------------------------


class Order(Command[str]):
    note: str


@transactional
class PlaceOrder(Order):
    pass


@transactional
class PlaceOrderAsync(Order):
    pass


TABLE: dict[str, sa.Table] = {}  # the test's table, for the handlers


class PlaceOrderHandler(CommandHandler[PlaceOrder, str]):
    @inject
    def __init__(self, session: Session) -> None:
        self.session = session

    def handle(self, request: PlaceOrder) -> str:
        table = TABLE["orders"]
        self.session.execute(sa.update(table).where(table.c.id == 1).values(note="x"))
        return request.note


class PlaceOrderAsyncHandler(CommandHandler[PlaceOrderAsync, str]):
    @inject
    def __init__(self, session: AsyncSession) -> None:
        self.session = session

    async def handle(self, request: PlaceOrderAsync) -> str:
        table = TABLE["orders"]
        await self.session.execute(
            sa.update(table).where(table.c.id == 1).values(note="x")
        )
        return request.note


class Deadline:
    """The caller's deadline, `seconds` from when it is set (None: no deadline)."""

    def __init__(self, seconds: float | None) -> None:
        self.set(seconds)

    def set(self, seconds: float | None) -> None:
        self.at = None if seconds is None else time.perf_counter() + seconds

    def __call__(self) -> float | None:
        return None if self.at is None else self.at - time.perf_counter()


def mediator_for(db: Db, remaining_time: Callable[[], float | None]) -> Mediator:
    TABLE["orders"] = db.table
    handlers = (PlaceOrderHandler, PlaceOrderAsyncHandler)
    module = MediatorModule(lambda m: m.add_handler(*handlers).use_defaults())
    database = SqlAlchemyModule(
        engine=db.engine, async_engine=db.async_engine, remaining_time=remaining_time
    )
    return Injector([module, database]).get(Mediator)


class LockHolder:
    """Another connection holding the lock the handler's update needs."""

    def __init__(self, db: Db) -> None:
        self.db = db
        self.sqlite: sqlite3.Connection | None = None
        self.connection: sa.Connection | None = None

    def __enter__(self) -> LockHolder:
        if self.db.dialect == "sqlite":
            assert self.db.path is not None
            self.sqlite = sqlite3.connect(self.db.path, isolation_level=None)
            self.sqlite.execute("BEGIN IMMEDIATE")
        else:
            self.connection = self.db.engine.connect()
            self.connection.execute(
                sa.select(self.db.table)
                .where(self.db.table.c.id == 1)
                .with_for_update()
            )
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self.sqlite is not None:
            self.sqlite.execute("ROLLBACK")
            self.sqlite.close()
        if self.connection is not None:
            self.connection.rollback()
            self.connection.close()


@pytest.mark.parametrize("path", ["sync", "async"])
async def test_the_deadline_bounds_the_wait_for_a_lock(db: Db, path: str) -> None:
    deadline = Deadline(None)
    mediator = mediator_for(db, deadline)
    started = time.perf_counter()
    with LockHolder(db):  # released only after the send failed
        deadline.set(0.2)
        late = (
            asyncio.to_thread(mediator.send_sync, PlaceOrder(note="late"))
            if path == "sync"
            else mediator.send(PlaceOrderAsync(note="late"))
        )
        with pytest.raises(DeadlineExceededError, match="deadline passed") as caught:
            await late
        waited = time.perf_counter() - started
    assert waited < BUSY_TIMEOUT  # not the engine's own wait
    assert isinstance(caught.value, TimeoutError)
    assert not isinstance(caught.value, DomainError)
    assert not is_transient_failure(caught.value)  # retry leaves it alone
    # Once the lock is free, the same connections work with their own timeouts.
    deadline.set(None)
    assert mediator.send_sync(PlaceOrder(note="later")) == "later"
    assert await mediator.send(PlaceOrderAsync(note="later")) == "later"
    if db.dialect == "sqlite":
        with db.engine.connect() as connection:
            own = connection.exec_driver_sql("PRAGMA busy_timeout").scalar()
        assert own == BUSY_TIMEOUT * 1000


async def test_a_deadline_already_gone_begins_nothing(db: Db) -> None:
    mediator = mediator_for(db, Deadline(0.0))

    with pytest.raises(DeadlineExceededError, match="before the transaction"):
        await mediator.send(PlaceOrderAsync(note="late"))
    with pytest.raises(DeadlineExceededError):
        mediator.send_sync(PlaceOrder(note="late"))
    assert db.notes() == ["seed"]


async def test_no_deadline_is_the_engines_own_wait(db: Db) -> None:
    mediator = mediator_for(db, Deadline(None))

    assert await mediator.send(PlaceOrderAsync(note="free")) == "free"


def test_a_wait_the_engines_own_timeout_ends_is_transient(
    db: Db, tmp_path: Path
) -> None:
    if db.dialect == "sqlite":
        engine = sa.create_engine(db.engine.url, connect_args={"timeout": 0.05})
    else:
        engine = sa.create_engine(
            db.engine.url, connect_args={"options": "-c lock_timeout=50"}
        )
    own = Db(db.dialect, engine, db.async_engine, db.table, db.path)
    mediator = mediator_for(own, Deadline(600.0))  # the deadline is far away
    try:
        with LockHolder(db), pytest.raises(TransientDatabaseError):
            mediator.send_sync(PlaceOrder(note="busy"))
    finally:
        engine.dispose()


def test_the_module_refuses_a_remaining_time_that_is_not_callable(db: Db) -> None:
    with pytest.raises(TypeError, match=r"remaining_time=\.\.\.\) takes a callable"):
        SqlAlchemyModule(engine=db.engine, remaining_time=2.0)  # type: ignore[arg-type]


# --- errors ------------------------------------------------------------------------


def test_a_lock_not_available_of_the_engines_own_is_transient(pg: Db) -> None:
    with (
        LockHolder(pg),
        pg.engine.connect() as other,
        pytest.raises(exc.OperationalError) as caught,
    ):
        other.execute(
            sa.select(pg.table).where(pg.table.c.id == 1).with_for_update(nowait=True)
        )
    translated = translate_error(caught.value)
    assert isinstance(translated, TransientDatabaseError)
    assert "lock not available" in str(translated)


def test_a_deadline_error_is_left_as_it_is() -> None:
    error = DeadlineExceededError("gone")
    assert translate_error(error) is error


async def test_a_deadline_error_is_a_504_without_its_message() -> None:
    async def app(scope: Any, receive: Any, send: Any) -> None:
        raise DeadlineExceededError("waited on orders_secret for 0.2 s")

    transport = httpx.ASGITransport(app=DomainErrorMiddleware(app))
    async with httpx.AsyncClient(transport=transport) as client:
        response = await client.post("http://shop/orders")
    assert response.status_code == 504
    assert response.headers["content-type"] == "application/problem+json"
    assert "retry-after" not in response.headers
    body = response.json()
    assert body["detail"] == "The request ran out of time before it could finish."
    assert "secret" not in response.text
