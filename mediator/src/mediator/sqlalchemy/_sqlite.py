"""SQLite set-up for concurrent writers: WAL, foreign keys, the write lock's timing."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import Any, Final, cast

from sqlalchemy import Connection, Engine, event, exc, util
from sqlalchemy.ext.asyncio import AsyncEngine

from mediator._core.errors import DeadlineExceededError
from mediator.sqlalchemy._errors import is_sqlite_busy
from mediator.sqlalchemy._first_write import (
    FIRST_WRITE,
    RemainingTime,
    connection_info,
    deadline_left,
    listen,
    remaining_time_of,
)
from mediator.sqlalchemy._writer_gate import WriterGate, gate_for

__all__ = [
    "IMMEDIATE",
    "READ_COMMITTED_STATEMENT",
    "begin_immediate",
    "prepare_sqlite",
    "take_gate_now",
]

IMMEDIATE = "mediator_sqlite_immediate"
"""Execution option to begin with ``BEGIN IMMEDIATE`` (the idempotency store's
own transactions). Its value is True, or a `RemainingTime` that bounds the
wait for the write lock, as for a unit of work."""

READ_COMMITTED_STATEMENT = "mediator_sqlite_statement_read"
"""Execution option for a connection that runs one statement at a time: no
``BEGIN`` is sent, so each statement is its own transaction (the driver runs it
in autocommit) and sees the last commit; a read takes no lock. A statement that
writes takes the write lock for itself: see `take_gate_now`."""

_CONFIGURED: Final = "mediator_sqlite_configured"
_BUSY_TIMEOUT: Final = "mediator_sqlite_busy_timeout"  # the connection's own, ms
_BUSY_NOW: Final = "mediator_sqlite_busy_now"  # what it is set to now, ms
_GATE: Final = "mediator_sqlite_gate"  # the database file's WriterGate, if a file
_HOLD: Final = "mediator_sqlite_hold"  # a _Hold while the transaction runs
_LATE: Final = (
    "the caller's deadline passed while waiting for the database's write lock"
)
# Waits for a coroutine from SQLAlchemy's greenlet (`await_` since 2.1).
_await: Final = cast(
    "Callable[[Awaitable[bool]], bool]",
    getattr(util, "await_", None) or util.await_only,
)


def prepare_sqlite(engine: Engine | AsyncEngine) -> None:
    """Make a SQLite engine safe for concurrent writers; idempotent.

    - A unit of work's transaction begins at its first write, with
      ``BEGIN IMMEDIATE``: reads before it take no lock and each sees the last
      commit, so a handler that reads, calls another service and then writes
      does not hold the write lock during the call. Taking the write lock
      before the first write (not at a deferred ``BEGIN``'s first read) means
      two transactions that read and then write cannot deadlock on the
      upgrade, where one would fail at once with "database is locked".
    - This process's writers to one database file queue at a gate before
      ``BEGIN IMMEDIATE`` and get the write lock in turn, each the moment the
      last one committed or rolled back; writers of other processes meet
      SQLite's busy handler, which polls with sleeps of up to 100 ms.
    - The wait for the write lock (the gate and ``BEGIN IMMEDIATE``
      together) is the connection's busy timeout (the driver's ``timeout``,
      5 s by default), shortened to the caller's time left when
      `SqlAlchemyModule` was given ``remaining_time``. A wait the deadline
      cut short raises `mediator.DeadlineExceededError`; one the busy
      timeout ended, `mediator.TransientDatabaseError` (through
      `translate_error` when SQLite said "database is locked").
    - Other transactions keep the deferred ``BEGIN``.
    - ``journal_mode=WAL``, so readers do not block the writer (file databases).
    - ``foreign_keys=ON``, which SQLite leaves off by default.

    `SqlAlchemyModule` calls this for SQLite engines itself.

    Example:
        >>> from sqlalchemy import create_engine
        >>> engine = create_engine("sqlite://")
        >>> prepare_sqlite(engine)
        >>> prepare_sqlite(engine)  # once is enough; again does nothing
    """
    sync_engine = engine.sync_engine if isinstance(engine, AsyncEngine) else engine
    if sync_engine.dialect.name != "sqlite" or event.contains(
        sync_engine, "connect", _on_connect
    ):
        return
    event.listen(sync_engine, "connect", _on_connect)
    event.listen(sync_engine, "begin", _on_begin)
    event.listen(sync_engine, "commit", _on_commit)
    event.listen(sync_engine, "rollback", _on_rollback)
    for pool_event in ("checkin", "detach"):
        event.listen(sync_engine, pool_event, _on_pool_event)
    listen(sync_engine, begin_immediate)


def begin_immediate(
    connection: Connection, remaining_time: RemainingTime | None
) -> None:
    """``BEGIN IMMEDIATE`` on `connection`, waiting at most the time left.

    First the database file's `WriterGate`, so this process's writers queue
    in order instead of polling SQLite's busy handler; the connection holds
    it until its transaction ends. Then ``BEGIN IMMEDIATE``, which still
    waits for a writer of another process. Each wait lasts at most the
    connection's busy timeout, and both together at most the time left: the
    busy timeout is lowered to the time left when less is left (and set back
    by the connection's next transaction that does not lower it), so no
    extra statement runs while the write lock is held.

    Raises:
        DeadlineExceededError: The deadline passed before, or while waiting
            for the write lock.
        sqlalchemy.exc.OperationalError: "database is locked": the busy
            timeout ran out, at the gate or at ``BEGIN IMMEDIATE``
            (`translate_error` makes it a `TransientDatabaseError`).
    """
    info = connection.connection.info
    own: int | None = info.get(_BUSY_TIMEOUT)
    left = deadline_left(remaining_time)
    gate: WriterGate | None = info.get(_GATE)
    entered = True
    if gate is not None and not _holds(info):
        entered = _enter(connection, gate, own, left)
        if entered:
            info[_HOLD] = _Hold(gate)
    try:
        left = deadline_left(remaining_time)  # less, after the gate
        bounded = entered and left is not None and own is not None and left < own
        # Past the busy timeout at the gate, one last try that does not wait:
        # the lock may be free (its holder committed), else SQLite's own
        # "database is locked" is raised, as it was before there was a gate.
        wait = left if bounded else own if entered or own is None else 0
        _set_busy_timeout(connection, wait)
        try:
            connection.exec_driver_sql("BEGIN IMMEDIATE")
        except exc.OperationalError as error:
            if bounded and is_sqlite_busy(error.orig):
                raise DeadlineExceededError(_LATE) from error
            raise
    except BaseException:
        _leave(info)
        raise


def take_gate_now(
    info: dict[Any, Any], remaining_time: RemainingTime | None
) -> Callable[[], None] | None:
    """Take the database file's gate for one autocommit write, unless it is held.

    `info` is the connection's (with `READ_COMMITTED_STATEMENT`, no
    transaction open). With the gate, no writer of this process holds the
    write lock, so the write waits only for one of another process, in
    SQLite's busy handler, at most the connection's busy timeout.

    Returns:
        The release, to call once the statement ran; None when the gate is
        held (a writer of this process is running), or the connection is not
        configured yet, or its busy timeout is not its own (lowered for a
        deadline), or the caller's deadline leaves less than the busy
        timeout: such a write goes through `begin_immediate`, which bounds
        its wait. None on a database without a file too: its connections
        are shared through the pool, and one may be in a transaction.
    """
    if not info.get(_CONFIGURED):
        return None
    busy: int | None = info.get(_BUSY_NOW)
    if busy != info.get(_BUSY_TIMEOUT):
        return None  # lowered for a deadline: `begin_immediate` sets it back
    left = None if remaining_time is None else remaining_time()
    if left is not None and (busy is None or not left * 1000 >= busy):
        return None
    gate: WriterGate | None = info.get(_GATE)
    if gate is None or not gate.acquire(timeout=0):
        return None
    return gate.release


def _set_busy_timeout(connection: Connection, milliseconds: int | None) -> None:
    info = connection.connection.info
    if milliseconds is not None and info.get(_BUSY_NOW) != milliseconds:
        connection.exec_driver_sql(f"PRAGMA busy_timeout = {milliseconds:d}")
        info[_BUSY_NOW] = milliseconds


def _enter(
    connection: Connection, gate: WriterGate, own: int | None, left: int | None
) -> bool:
    """Wait for `gate`, at most the busy timeout and the time left (ms).

    Returns:
        Whether the connection holds the gate; False when the busy timeout
        ran out first.

    Raises:
        DeadlineExceededError: The time left ran out first.
    """
    limits = [limit for limit in (own, left) if limit is not None]
    timeout = min(limits) / 1000 if limits else None
    if connection.dialect.is_async:
        # In SQLAlchemy's greenlet on the event loop: wait as a task.
        entered = _await(_aenter(gate, timeout))
    else:
        entered = gate.acquire(timeout=timeout)
    if not entered and left is not None and (own is None or left <= own):
        raise DeadlineExceededError(_LATE)
    return entered


async def _aenter(gate: WriterGate, seconds: float | None) -> bool:
    try:
        async with asyncio.timeout(seconds):
            await gate.aacquire()
    except TimeoutError:
        return False
    return True


class _Hold:
    """A connection's hold on its file's gate; released once, whoever asks."""

    __slots__ = ("gate",)

    def __init__(self, gate: WriterGate) -> None:
        self.gate: WriterGate | None = gate

    def release(self) -> None:
        gate, self.gate = self.gate, None
        if gate is not None:
            gate.release()


def _holds(info: dict[Any, Any]) -> bool:
    hold: _Hold | None = info.get(_HOLD)
    return hold is not None and hold.gate is not None


def _leave(info: dict[Any, Any] | None) -> None:
    hold: _Hold | None = None if info is None else info.pop(_HOLD, None)
    if hold is not None:
        hold.release()


def _on_commit(connection: Connection) -> None:
    info = connection_info(connection)
    if info is None or not _holds(info):
        return
    # The gate goes to the next writer once the write lock is free: after the
    # COMMIT, which this event precedes. So commit here; SQLAlchemy's own
    # commit, next, finds no transaction and does nothing. Should this one
    # fail, SQLAlchemy's raises the error (through its handling) and the gate
    # is left to the rollback or the pool's check-in that follows.
    try:
        connection.connection.dbapi_connection.commit()  # type: ignore[union-attr]
    except Exception:
        return
    _leave(info)


def _on_rollback(connection: Connection) -> None:
    info = connection_info(connection)
    if info is None or not _holds(info):
        return
    try:
        # An error here is raised again by SQLAlchemy's own rollback, next.
        with contextlib.suppress(Exception):
            connection.connection.dbapi_connection.rollback()  # type: ignore[union-attr]
    finally:
        _leave(info)


def _on_pool_event(dbapi_connection: Any, record: Any) -> None:
    # Checked in (the pool rolled back what was left; an invalidated
    # connection, closed, is checked in too) or detached from the pool: no
    # transaction of ours is left on the pool's side of it.
    if record is not None:
        _leave(record.info)


def _on_connect(dbapi_connection: Any, record: Any) -> None:
    _configure(dbapi_connection, record.info)


def _on_begin(connection: Connection) -> None:
    pooled = connection.connection
    if not pooled.info.get(_CONFIGURED):
        # Opened before the engine was prepared (e.g. by create_all): configure
        # it now, before its first transaction under our control.
        _configure(pooled.dbapi_connection, pooled.info)
    options = connection.get_execution_options()
    if options.get(READ_COMMITTED_STATEMENT, False) or options.get(FIRST_WRITE):
        return  # autocommit reads; a first write begins (`_first_write`)
    immediate = options.get(IMMEDIATE, False)
    if immediate:
        begin_immediate(connection, remaining_time_of(immediate))
    else:
        _set_busy_timeout(connection, pooled.info.get(_BUSY_TIMEOUT))
        connection.exec_driver_sql("BEGIN")


def _switch_to_wal(cursor: Any) -> None:
    """Put the file in WAL mode, unless another connection is doing it now.

    Connections first opened at once on a new file (writers starting
    together) each find it in rollback-journal mode; two switching at once
    deadlock, and SQLite answers one "database is locked" without a busy
    wait. The mode belongs to the file, not the connection: the one that
    switches does it for all, and until then a connection works in the old
    mode (its writes wait in the busy handler as ever). The next connection
    configured tries again.
    """
    try:
        cursor.execute("PRAGMA journal_mode=WAL")
    except Exception as error:
        if not is_sqlite_busy(error):
            raise


def _configure(dbapi_connection: Any, info: dict[Any, Any]) -> None:
    """Set the connection up; note its busy timeout (ms) and its file's gate."""
    # Stop the driver from emitting its own BEGIN, so that _on_begin decides.
    dbapi_connection.isolation_level = None
    cursor = dbapi_connection.cursor()
    try:
        # Asking first: setting the mode, even to the one it has, takes a
        # lock, and a connection opened while another writes would meet
        # "database is locked" here, outside any busy wait of ours.
        cursor.execute("PRAGMA journal_mode")
        mode = cursor.fetchone()
        if mode is None or str(mode[0]).lower() != "wal":
            _switch_to_wal(cursor)
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute("PRAGMA busy_timeout")
        row = cursor.fetchone()
        cursor.execute("PRAGMA database_list")
        files = {name: file for _, name, file in cursor.fetchall()}
    finally:
        cursor.close()
    info[_BUSY_TIMEOUT] = info[_BUSY_NOW] = int(row[0]) if row is not None else None
    # A file's writers share its gate; an in-memory database (no file) is
    # one connection's own, or shared through the pool, and has none.
    main = files.get("main")
    if main:
        info[_GATE] = gate_for(main)
    info[_CONFIGURED] = True
