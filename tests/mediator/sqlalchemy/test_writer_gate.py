"""The writer gate: this process's SQLite writers queue for the write lock in order.

A unit of work's first write (and the idempotency store's claim) waits at its
database file's gate before ``BEGIN IMMEDIATE``, so it never polls SQLite's busy
handler behind another writer of this process: it sends ``BEGIN IMMEDIATE`` once
the lock is free. Every way a transaction can end hands the gate on; the wait is
bounded by the busy timeout and the caller's deadline, with the errors the busy
wait raised before the gate existed. On SQLite files, with sqlite3 (threads) and
aiosqlite (tasks on the event loop).
"""

from __future__ import annotations

import asyncio
import gc
import importlib
import sqlite3
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest
import sqlalchemy as sa
from sqlalchemy import event, exc
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, create_async_engine
from sqlalchemy.orm import Session

from mediator import DeadlineExceededError, TransientDatabaseError
from mediator.sqlalchemy import (
    AsyncSqlAlchemyIdempotencyStore,
    AsyncSqlAlchemyUnitOfWork,
    SqlAlchemyIdempotencyStore,
    SqlAlchemyUnitOfWork,
    idempotency_table,
    prepare_sqlite,
    translate_error,
)
from mediator.sqlalchemy._first_write import REMAINING_TIME
from mediator.sqlalchemy._sqlite import IMMEDIATE
from mediator.sqlalchemy._writer_gate import WriterGate, gate_for
from tests.mediator.sqlalchemy.idempotency_db import (
    KEY,
    LEASE,
    NOW,
    PRINT,
    RESPONSE,
    RETENTION,
    SCOPE,
)
from tests.support.written_in import run_examples

pytestmark = pytest.mark.anyio

BUSY_TIMEOUT = 30.0  # the engine's own wait: no test here waits that long
PATIENCE = 30.0  # how long a test waits for a writer to queue at the gate

metadata = sa.MetaData()
notes = sa.Table(
    "gate_notes",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("note", sa.String(50), nullable=False),
)


def wait_until(predicate: Callable[[], bool]) -> None:
    """Block this thread until `predicate` holds (bounded), checking often."""
    pause = threading.Event()
    for _ in range(int(PATIENCE / 0.002)):
        if predicate():
            return
        pause.wait(0.002)
    raise AssertionError("the condition never held")


@dataclass
class Files:
    path: Path
    gate: WriterGate
    engine: sa.Engine
    async_engine: AsyncEngine

    def engine_with(self, busy_timeout: float) -> sa.Engine:
        engine = sa.create_engine(
            f"sqlite:///{self.path}", connect_args={"timeout": busy_timeout}
        )
        prepare_sqlite(engine)
        return engine

    def locked_by_another(self) -> bool:
        """Whether another connection holds the write lock (asked without waiting)."""
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

    def notes(self) -> list[str]:
        with self.engine.connect() as connection:
            return sorted(connection.scalars(sa.select(notes.c.note)))

    def free(self) -> bool:
        return not self.gate.held and self.gate.waiting == 0


@pytest.fixture
def files(tmp_path: Path) -> Iterator[Files]:
    path = tmp_path / "gate.db"
    gate = gate_for(str(path))  # held here, so every connection gets this one
    timeout = {"timeout": BUSY_TIMEOUT}
    engine = sa.create_engine(f"sqlite:///{path}", connect_args=timeout)
    async_engine = create_async_engine(
        f"sqlite+aiosqlite:///{path}", connect_args=timeout
    )
    prepare_sqlite(engine)
    prepare_sqlite(async_engine)
    metadata.create_all(engine)
    idempotency_table.metadata.create_all(engine)
    try:
        yield Files(path, gate, engine, async_engine)
    finally:
        asyncio.run(async_engine.dispose())
        engine.dispose()


class Writer:
    """A unit of work that has written and holds the gate until it ends."""

    def __init__(self, engine: sa.Engine, note: str = "holder") -> None:
        self.session = Session(engine)
        self.unit = SqlAlchemyUnitOfWork(self.session)
        self.unit.begin()
        self.session.execute(sa.insert(notes).values(note=note))

    def commit(self) -> None:
        self.unit.commit()
        self.session.close()


def write(engine: sa.Engine, note: str, remaining: float | None = None) -> None:
    with Session(engine) as session:
        if remaining is not None:
            session.info[REMAINING_TIME] = lambda: remaining
        unit = SqlAlchemyUnitOfWork(session)
        unit.begin()
        session.execute(sa.insert(notes).values(note=note))
        unit.commit()


async def awrite(
    engine: AsyncEngine, note: str, remaining: float | None = None
) -> None:
    async with AsyncSession(engine) as session:
        if remaining is not None:
            session.info[REMAINING_TIME] = lambda: remaining
        unit = AsyncSqlAlchemyUnitOfWork(session)
        await unit.begin()
        await session.execute(sa.insert(notes).values(note=note))
        await unit.commit()


# --- a writer waits at the gate, then finds the lock free --------------------------


@pytest.mark.parametrize("waiter", ["sqlite3 thread", "aiosqlite task"])
async def test_a_writer_waits_at_the_gate_and_begins_once_the_lock_is_free(
    files: Files, waiter: str
) -> None:
    holder = Writer(files.engine)
    locked_at_begin: list[bool] = []  # for each BEGIN IMMEDIATE the waiter sends

    def probe(connection: Any, cursor: Any, statement: str, *args: Any) -> None:
        if statement == "BEGIN IMMEDIATE":
            locked_at_begin.append(files.locked_by_another())

    engine = files.engine if waiter == "sqlite3 thread" else files.async_engine
    target = engine.sync_engine if isinstance(engine, AsyncEngine) else engine
    event.listen(target, "before_cursor_execute", probe)
    thread = threading.Thread(target=write, args=(files.engine, "waiter"))
    if waiter == "sqlite3 thread":
        thread.start()
        done: Any = anyio.to_thread.run_sync(thread.join)
    else:
        done = asyncio.create_task(awrite(files.async_engine, "waiter"))

    await anyio.to_thread.run_sync(wait_until, lambda: files.gate.waiting == 1)
    assert locked_at_begin == []  # queued at the gate, not in SQLite's busy handler
    holder.commit()
    await done

    assert locked_at_begin == [False]  # sent when nobody held the lock
    assert files.notes() == ["holder", "waiter"]
    assert files.free()


def test_engines_on_one_file_by_another_path_share_its_gate(files: Files) -> None:
    folder = files.path.parent
    other = sa.create_engine(f"sqlite:///{folder}/../{folder.name}/gate.db")
    prepare_sqlite(other)
    try:
        holder = Writer(other)
        assert files.gate.held  # the same file by another path: the same gate
        holder.commit()
        assert files.free()
    finally:
        other.dispose()


# --- every way a transaction ends hands the gate on ---------------------------------


ENDINGS: dict[str, Callable[[Writer], object]] = {
    "commit": lambda writer: writer.unit.commit(),
    "rollback": lambda writer: writer.unit.rollback(),
    "session closed": lambda writer: writer.session.close(),
    "connection invalidated": lambda writer: writer.session.connection().invalidate(),
    "connection detached": lambda writer: writer.session.connection().detach(),
}


@pytest.mark.parametrize("ending", list(ENDINGS))
def test_every_way_a_transaction_ends_hands_the_gate_on(
    files: Files, ending: str
) -> None:
    writer = Writer(files.engine)
    assert files.gate.held

    ENDINGS[ending](writer)

    assert files.free()  # before the session is closed
    writer.session.close()
    impatient = files.engine_with(busy_timeout=0)  # would fail on a held lock
    try:
        write(impatient, "next")
    finally:
        impatient.dispose()
    assert files.notes() == (["holder", "next"] if ending == "commit" else ["next"])


def test_the_gate_is_handed_on_at_commit_and_rollback_not_at_check_in(
    files: Files,
) -> None:
    with files.engine.connect() as connection:
        connection.execution_options(**{IMMEDIATE: True})
        connection.begin()
        connection.execute(sa.insert(notes).values(note="committed"))
        assert files.gate.held
        connection.commit()
        assert files.free()  # still checked out
        assert not files.locked_by_another()

        connection.begin()
        connection.execute(sa.insert(notes).values(note="rolled back"))
        assert files.gate.held
        connection.rollback()
        assert files.free()
        assert not files.locked_by_another()
    assert files.notes() == ["committed"]


def test_a_connection_dropped_without_closing_hands_the_gate_on(files: Files) -> None:
    """Garbage collected: the pool rolls it back and checks it in."""

    def hold_and_drop() -> None:
        connection = files.engine.connect()
        connection.execution_options(**{IMMEDIATE: True})
        connection.begin()
        connection.execute(sa.insert(notes).values(note="dropped"))
        assert files.gate.held

    hold_and_drop()
    gc.collect()

    assert files.free()
    assert not files.locked_by_another()
    assert files.notes() == []


def test_an_error_in_begin_leaves_the_gate_free(files: Files) -> None:
    other_process = sqlite3.connect(files.path, isolation_level=None)
    other_process.execute("BEGIN IMMEDIATE")
    impatient = files.engine_with(busy_timeout=0)
    try:
        with Session(impatient) as session:
            SqlAlchemyUnitOfWork(session).begin()
            with pytest.raises(
                exc.OperationalError, match="database is locked"
            ) as caught:
                session.execute(sa.insert(notes).values(note="refused"))
            assert files.free()  # before the session is closed
        assert isinstance(translate_error(caught.value), TransientDatabaseError)
    finally:
        other_process.execute("ROLLBACK")
        other_process.close()
        impatient.dispose()
    write(files.engine, "later")
    assert files.notes() == ["later"]


# --- the wait is bounded: the busy timeout, the deadline, a cancellation ------------


@pytest.mark.parametrize("path", ["sync", "async"])
async def test_the_deadline_bounds_the_wait_at_the_gate(
    files: Files, path: str
) -> None:
    holder = Writer(files.engine)  # released only after the late one gave up

    late = (
        anyio.to_thread.run_sync(write, files.engine, "late", 0.2)
        if path == "sync"
        else awrite(files.async_engine, "late", 0.2)
    )
    with pytest.raises(DeadlineExceededError, match="deadline passed while waiting"):
        await late

    assert files.gate.held  # still the holder's
    assert files.gate.waiting == 0
    holder.commit()
    assert files.free()
    assert files.notes() == ["holder"]


def test_the_busy_timeout_at_the_gate_is_sqlites_database_is_locked(
    files: Files,
) -> None:
    """Past it, one last BEGIN IMMEDIATE that does not wait fails as SQLite does."""
    holder = Writer(files.engine)
    impatient = files.engine_with(busy_timeout=0.05)
    try:
        with pytest.raises(exc.OperationalError, match="database is locked") as caught:
            write(impatient, "refused")
        assert isinstance(translate_error(caught.value), TransientDatabaseError)
        assert files.gate.held
        assert files.gate.waiting == 0
    finally:
        holder.commit()
        impatient.dispose()
    assert files.free()


async def test_a_task_cancelled_at_the_gate_leaves_the_queue(files: Files) -> None:
    holder = Writer(files.engine)
    task = asyncio.create_task(awrite(files.async_engine, "cancelled"))
    await anyio.to_thread.run_sync(wait_until, lambda: files.gate.waiting == 1)

    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task

    assert files.gate.waiting == 0
    holder.commit()
    assert files.free()
    await awrite(files.async_engine, "after")
    assert files.notes() == ["after", "holder"]


# --- the gate itself ---------------------------------------------------------------


def test_the_gate_goes_to_waiting_threads_in_the_order_they_came() -> None:
    gate = WriterGate()
    assert gate.acquire(timeout=None)
    order: list[int] = []

    def writer(n: int) -> None:
        assert gate.acquire(timeout=PATIENCE)
        order.append(n)
        gate.release()

    threads: list[threading.Thread] = []
    for n in range(3):
        thread = threading.Thread(target=writer, args=(n,))
        thread.start()
        threads.append(thread)
        wait_until(lambda n=n: gate.waiting == n + 1)  # type: ignore[misc]
    gate.release()
    for thread in threads:
        thread.join(PATIENCE)

    assert order == [0, 1, 2]
    assert not gate.held


def test_a_thread_that_gives_up_leaves_no_place_in_the_queue() -> None:
    gate = WriterGate()
    assert gate.acquire(timeout=None)

    assert not gate.acquire(timeout=0)

    assert gate.waiting == 0
    gate.release()
    assert not gate.held


async def test_a_task_waits_without_blocking_the_loop_for_a_thread_to_release() -> None:
    gate = WriterGate()
    assert gate.acquire(timeout=None)
    waiting = asyncio.create_task(gate.aacquire())
    await anyio.to_thread.run_sync(wait_until, lambda: gate.waiting == 1)

    await anyio.to_thread.run_sync(gate.release)  # from another thread
    await waiting

    assert gate.held
    gate.release()
    assert not gate.held


async def test_a_task_cancelled_after_it_was_handed_the_gate_hands_it_on() -> None:
    gate = WriterGate()
    await gate.aacquire()
    first = asyncio.create_task(gate.aacquire())
    second = asyncio.create_task(gate.aacquire())
    await anyio.to_thread.run_sync(wait_until, lambda: gate.waiting == 2)

    gate.release()  # to `first`, which is cancelled before it runs
    first.cancel()
    with pytest.raises(asyncio.CancelledError):
        await first
    await second

    assert gate.held  # by `second`
    assert gate.waiting == 0
    gate.release()
    assert not gate.held


def test_a_waiter_whose_loop_closed_is_passed_over() -> None:
    gate = WriterGate()
    assert gate.acquire(timeout=None)
    loop = asyncio.new_event_loop()
    task = loop.create_task(gate.aacquire())
    loop.call_soon(loop.stop)
    loop.run_forever()  # one turn: the task queues at the gate
    assert gate.waiting == 1
    loop.close()

    gate.release()

    assert not gate.held
    assert gate.waiting == 0
    del task


def test_each_file_has_one_gate(tmp_path: Path) -> None:
    first = gate_for(str(tmp_path / "a.db"))

    assert gate_for(str(tmp_path / "." / "a.db")) is first
    assert gate_for(str(tmp_path / "b.db")) is not first


def test_an_in_memory_database_has_no_gate() -> None:
    engine = sa.create_engine("sqlite://")
    prepare_sqlite(engine)
    metadata.create_all(engine)
    try:
        write(engine, "memory")
        with engine.connect() as connection:
            assert connection.scalar(sa.select(sa.func.count()).select_from(notes)) == 1
            assert "mediator_sqlite_gate" not in connection.connection.info
    finally:
        engine.dispose()


# --- the idempotency store's claim waits at the gate, bounded by the deadline -------


def store_of(files: Files, kind: str, remaining: float) -> Any:
    if kind == "sync":
        session = Session(files.engine)
        session.info[REMAINING_TIME] = lambda: remaining
        return SqlAlchemyIdempotencyStore(files.engine, session)
    async_session = AsyncSession(files.async_engine)
    async_session.info[REMAINING_TIME] = lambda: remaining
    return AsyncSqlAlchemyIdempotencyStore(files.async_engine, async_session)


async def claim(store: Any, key: str = KEY) -> Any:
    if isinstance(store, SqlAlchemyIdempotencyStore):
        return await anyio.to_thread.run_sync(
            lambda: store.claim(
                SCOPE, key, PRINT, now=NOW, lease=LEASE, retention=RETENTION
            )
        )
    return await store.claim(
        SCOPE, key, PRINT, now=NOW, lease=LEASE, retention=RETENTION
    )


@pytest.mark.parametrize("kind", ["sync", "async"])
async def test_a_claim_waits_at_the_gate_at_most_the_time_left(
    files: Files, kind: str
) -> None:
    holder = Writer(files.engine)  # a unit of work of this process is writing

    with pytest.raises(DeadlineExceededError, match="deadline passed while waiting"):
        await claim(store_of(files, kind, remaining=0.2))

    assert files.gate.waiting == 0
    holder.commit()
    assert (await claim(store_of(files, kind, remaining=600.0))).status == "claimed"
    assert files.free()


@pytest.mark.parametrize("kind", ["sync", "async"])
async def test_a_claim_waits_for_another_process_at_most_the_time_left(
    files: Files, kind: str
) -> None:
    other_process = sqlite3.connect(files.path, isolation_level=None)
    other_process.execute("BEGIN IMMEDIATE")
    try:
        with pytest.raises(DeadlineExceededError, match="deadline passed while"):
            await claim(store_of(files, kind, remaining=0.2))
    finally:
        other_process.execute("ROLLBACK")
        other_process.close()
    assert files.free()


@pytest.mark.parametrize("kind", ["sync", "async"])
async def test_a_late_send_still_releases_and_finishes_its_claim(
    files: Files, kind: str
) -> None:
    """Cleaning up after a send is not bounded by its deadline."""
    claimed = await claim(store_of(files, kind, remaining=600.0))
    late = store_of(files, kind, remaining=0.0)

    with pytest.raises(DeadlineExceededError, match="before the transaction"):
        await claim(late, key="another")  # a known key would answer at once
    if kind == "sync":
        await anyio.to_thread.run_sync(
            lambda: late.finish(SCOPE, KEY, claimed.token, RESPONSE, now=NOW)
        )
        await anyio.to_thread.run_sync(lambda: late.release(SCOPE, KEY, "other"))
    else:
        await late.finish(SCOPE, KEY, claimed.token, RESPONSE, now=NOW)
        await late.release(SCOPE, KEY, "other")

    with files.engine.connect() as connection:
        state = connection.scalar(sa.select(idempotency_table.c.state))
    assert state == "completed"


@pytest.mark.parametrize(
    "name",
    [
        "mediator.sqlalchemy._writer_gate",
        "mediator.sqlalchemy._sqlite",
        "mediator.sqlalchemy._postgres",
        "mediator.sqlalchemy._first_write",
    ],
)
def test_docstring_examples(name: str) -> None:
    result = run_examples(importlib.import_module(name))
    assert result.attempted > 0
    assert result.failed == 0


# --- the switch to WAL, contended ------------------------------------------------
# Writers starting together on a new file each find it in rollback-journal mode
# and switch it; two switching at once deadlock, and SQLite answers one "database
# is locked" at once. Here a reader holds its lock while a connection with no busy
# wait is set up: it is set up all the same, and the next one switches the file.


def test_a_connection_that_cannot_switch_to_wal_yet_is_set_up_all_the_same(
    tmp_path: Path,
) -> None:
    path = tmp_path / "new.db"
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("CREATE TABLE t (x)")
    assert holder.execute("PRAGMA journal_mode").fetchone() == ("delete",)
    engine = sa.create_engine(f"sqlite:///{path}", connect_args={"timeout": 0})
    prepare_sqlite(engine)
    try:
        holder.execute("BEGIN")
        holder.execute("SELECT * FROM t").fetchall()  # a shared lock, held
        with engine.connect() as connection:
            mode = connection.exec_driver_sql("PRAGMA journal_mode").scalar()
            keys = connection.exec_driver_sql("PRAGMA foreign_keys").scalar()
        assert (mode, keys) == ("delete", 1)
        holder.execute("COMMIT")
        engine.dispose()  # the next connection is a new one
        with engine.connect() as connection:
            mode = connection.exec_driver_sql("PRAGMA journal_mode").scalar()
        assert mode == "wal"
    finally:
        holder.close()
        engine.dispose()
