"""A unit of work's transaction begins at its first write, not at `begin`.

Why: a handler reads, calls another service, then writes. A transaction begun
at `begin` is held across that call: on SQLite it holds the database's one
write lock (``BEGIN IMMEDIATE``), so concurrent orders run one after the
other; on PostgreSQL the session sits "idle in transaction", holding its
snapshot and its ``ACCESS SHARE`` locks. Begun at the first write, it holds
nothing while the handler waits, and it still takes SQLite's write lock before
its first write, so the read-then-write upgrade deadlock of a deferred
``BEGIN`` cannot happen.

How: the unit of work sets the `FIRST_WRITE` execution option on its session's
connection. The connection's driver runs in autocommit (SQLite: the driver's
own ``BEGIN`` is off, as `prepare_sqlite` sets it; PostgreSQL: SQLAlchemy's
``isolation_level="AUTOCOMMIT"``), so each read before the first write runs on
its own and sees the last commit. The ``before_cursor_execute`` event sends the
dialect's ``BEGIN`` just before the first statement that writes (`is_write`):
an ORM flush, a Core or `text()` insert, update or delete, a ``SELECT ... FOR
UPDATE``, the ``SAVEPOINT`` of a nested send. SQLAlchemy's ``commit`` and
``rollback`` end it through the driver, which acts on the connection's real
transaction status (sqlite3 and psycopg 3 both do), and the next begin starts
clean.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Callable
from typing import Any, Final, cast

from sqlalchemy import Connection, Engine, event

from mediator._core.errors import DeadlineExceededError

__all__ = [
    "AT_FIRST_STATEMENT",
    "FIRST_WRITE",
    "REMAINING_TIME",
    "BeginNow",
    "RemainingTime",
    "connection_info",
    "deadline_left",
    "is_write",
    "listen",
    "remaining_time_of",
]

RemainingTime = Callable[[], float | None]
"""Answers the seconds left before the caller's deadline, or None for none."""

BeginNow = Callable[[Connection, "RemainingTime | None"], None]
"""A dialect's way to begin the transaction now, bounded by the time left."""

FIRST_WRITE: Final = "mediator_begin_at_first_write"
"""Execution option of a unit of work's connection: no transaction at begin,
the first write begins it. Its value is True, or the caller's `RemainingTime`,
which bounds the wait for the locks that ``BEGIN`` takes."""

AT_FIRST_STATEMENT: Final = "mediator_begin_at_first_statement"
"""Execution option a dialect sets beside `FIRST_WRITE` when the transaction
must hold the reads too (PostgreSQL at REPEATABLE READ or SERIALIZABLE): the
first statement of any kind calls the dialect's `BeginNow`."""

REMAINING_TIME: Final = "mediator_remaining_time"
"""Key of `Session.info` where `SqlAlchemyModule` leaves its ``remaining_time``
for the unit of work."""

_PENDING: Final = "mediator_first_write_pending"
# connection.info: the FIRST_WRITE value while no write has begun the
# transaction; absent otherwise. Reset at every begin, commit and rollback.

_READS: Final = frozenset({"SELECT", "WITH", "VALUES", "SHOW", "EXPLAIN", "TABLE"})
_LEADING: Final = re.compile(r"(?:\s+|--[^\n]*(?:\n|$)|/\*.*?\*/)*(\w+)", re.DOTALL)
# A read that writes or locks all the same: DML in a CTE or under EXPLAIN
# ANALYZE, and the row locks of FOR UPDATE / FOR SHARE, which an autocommit
# statement would drop at once. A false match only begins the transaction
# early, which is safe.
_WRITES_INSIDE: Final = re.compile(
    r"\b(?:INSERT|UPDATE|DELETE|MERGE|SHARE)\b", re.IGNORECASE
)


@functools.lru_cache(maxsize=1024)
def is_write(statement: str) -> bool:
    """Whether `statement` must run inside the transaction.

    Everything is a write except a statement that starts (after comments) with
    ``SELECT``, ``WITH``, ``VALUES``, ``SHOW``, ``EXPLAIN`` or ``TABLE`` and
    names no ``INSERT``, ``UPDATE``, ``DELETE``, ``MERGE`` or ``SHARE``.

    Example:
        >>> is_write("SELECT id FROM orders WHERE sku = ?")
        False
        >>> is_write("SELECT id FROM orders FOR UPDATE")
        True
        >>> is_write("/* note */ INSERT INTO orders (sku) VALUES (?)")
        True
    """
    found = _LEADING.match(statement)
    if found is None or found.group(1).upper() not in _READS:
        return True
    return _WRITES_INSIDE.search(statement) is not None


def listen(engine: Engine, begin_now: BeginNow) -> None:
    """Make `engine`'s connections with `FIRST_WRITE` begin at their first write.

    `begin_now` sends the dialect's ``BEGIN`` on the connection; it may raise
    `DeadlineExceededError`. Called once per engine by `prepare_sqlite` and
    `prepare_postgres`.
    """

    def on_cursor(
        connection: Connection,
        cursor: Any,
        statement: str,
        parameters: Any,
        context: Any,
        executemany: bool,
    ) -> None:
        info = connection.info
        pending = info.get(_PENDING)
        if pending is None or not (
            is_write(statement)
            or connection.get_execution_options().get(AT_FIRST_STATEMENT)
        ):
            return
        del info[_PENDING]  # begin_now's own statements are not the first write
        try:
            begin_now(connection, remaining_time_of(pending))
        except BaseException:
            # A handler that caught the failure and writes again must not
            # write in autocommit: its next write tries to begin again.
            info[_PENDING] = pending
            raise

    event.listen(engine, "begin", _on_begin)
    event.listen(engine, "before_cursor_execute", on_cursor)
    event.listen(engine, "commit", _on_end)
    event.listen(engine, "rollback", _on_end)


def remaining_time_of(value: object) -> RemainingTime | None:
    """The `RemainingTime` an execution option carries, if it carries one."""
    return cast("RemainingTime", value) if callable(value) else None


def deadline_left(remaining_time: RemainingTime | None) -> int | None:
    """Milliseconds left before the deadline (at least 1), or None for none.

    Rounded up, so a wait bounded by it lasts at least the time that was left.

    Raises:
        DeadlineExceededError: The deadline has passed already.
    """
    left = None if remaining_time is None else remaining_time()
    if left is None:
        return None
    if not left > 0:  # NaN too
        raise DeadlineExceededError(
            "the caller's deadline passed before the transaction could begin"
        )
    return max(1, math.ceil(left * 1000))


def connection_info(connection: Connection) -> dict[Any, Any] | None:
    """The pooled connection's `info`; None once it is closed or invalidated.

    A rollback after a dropped connection runs with no DBAPI connection, and
    reading `Connection.info` then would raise instead of rolling back. The
    pool clears `info` when it reconnects, so nothing stale is left there.
    """
    if connection.closed or connection.invalidated:
        return None
    return connection.info


def _on_begin(connection: Connection) -> None:
    value = connection.get_execution_options().get(FIRST_WRITE)
    if value:
        connection.info[_PENDING] = value
    else:
        connection.info.pop(_PENDING, None)


def _on_end(connection: Connection) -> None:
    info = connection_info(connection)
    if info is not None:
        info.pop(_PENDING, None)
