"""PostgreSQL set-up: a unit of work's transaction begins at its first write."""

from __future__ import annotations

from typing import Any, Final

from sqlalchemy import Connection, Engine, event
from sqlalchemy.engine import ExceptionContext
from sqlalchemy.ext.asyncio import AsyncEngine

from mediator._core.errors import DeadlineExceededError
from mediator.sqlalchemy._first_write import (
    AT_FIRST_STATEMENT,
    FIRST_WRITE,
    RemainingTime,
    connection_info,
    deadline_left,
    listen,
)

__all__ = ["prepare_postgres"]

_LEVEL: Final = "mediator_postgres_level"  # execution option: the level to BEGIN at
_BOUNDED: Final = "mediator_postgres_bounded"  # connection.info: the remaining_time
_LEVELS: Final = frozenset(
    {"SERIALIZABLE", "REPEATABLE READ", "READ COMMITTED", "READ UNCOMMITTED"}
)
# Levels that check a transaction's reads against its writes: the reads
# belong inside it, so it begins at the first statement, as the driver does.
_SNAPSHOT_LEVELS: Final = frozenset({"SERIALIZABLE", "REPEATABLE READ"})
_SLACK: Final = 0.05  # seconds: the server's timer and ours differ a little
# What our SET LOCAL makes PostgreSQL raise when a wait outlives it.
_TIMEOUT_STATES: Final = frozenset({"55P03", "57014"})  # lock_not_available, canceled
# Each timeout becomes the smaller of the engine's own (0: none) and the time
# left, for this transaction only. One round trip; the old values come back.
_BOUND_WAITS: Final = (
    "SELECT set_config(name, CASE WHEN setting::bigint = 0 OR setting::bigint > {ms} "
    "THEN '{ms}' ELSE setting END, true) "
    "FROM pg_settings WHERE name IN ('lock_timeout', 'statement_timeout')"
)


def prepare_postgres(engine: Engine | AsyncEngine) -> None:
    """Make a unit of work on a psycopg 3 engine begin at its first write; idempotent.

    - A connection with the unit of work's option runs in autocommit
      (SQLAlchemy's ``isolation_level="AUTOCOMMIT"``, put back when it returns
      to the pool): reads before the first write each see the last commit,
      and the session is never "idle in transaction" (holding a snapshot and
      ``ACCESS SHARE`` locks) while the handler waits on another service.
    - The first write sends ``BEGIN``, at the isolation level the connection
      had (the engine's ``isolation_level``). psycopg's ``commit()`` and
      ``rollback()`` act on the connection's real transaction status, so
      SQLAlchemy's commit and rollback end it.
    - At ``REPEATABLE READ`` or ``SERIALIZABLE`` the transaction begins at
      the first statement, reads included, as the driver would begin it:
      those levels exist to check the reads against the writes (a
      serialization failure instead of a lost update), so the reads cannot
      leave it. Such a handler should call other services before its unit
      of work, or run at the default ``READ COMMITTED``, where a read sees
      the last commit inside a transaction or out of it.
    - With the caller's ``remaining_time``, that ``BEGIN`` is followed by
      ``SET LOCAL lock_timeout`` and ``statement_timeout`` of the smaller of
      the engine's own and the time left. When one of them cuts a wait short,
      `mediator.DeadlineExceededError` is raised instead of the driver's error.

    Only psycopg 3 (``postgresql+psycopg``, sync and async): psycopg2 and
    asyncpg track the transaction themselves and would not commit one they
    did not begin, so their engines are left as they are (the transaction
    begins at the first statement), as are engines of other databases.

    `SqlAlchemyModule` calls this itself on the engine its session factory is
    bound to. Call it on engines it cannot see: those of a factory bound per
    mapper or table (``binds=``), or of sessions you hand to
    `SqlAlchemyUnitOfWork` yourself.

    Example:
        >>> import sqlalchemy as sa
        >>> from sqlalchemy.orm import sessionmaker
        >>> metadata = sa.MetaData()
        >>> orders = sa.Table("orders", metadata, sa.Column("id", sa.Integer))
        >>> audit = sa.Table("audit", metadata, sa.Column("id", sa.Integer))
        >>> shop, log = (
        ...     sa.create_engine(f"postgresql+psycopg://shop@localhost/{name}")
        ...     for name in ("shop", "log")
        ... )
        >>> for engine in (shop, log):  # nothing connects yet
        ...     prepare_postgres(engine)
        >>> sessions = sessionmaker(binds={orders: shop, audit: log})
    """
    sync_engine = engine.sync_engine if isinstance(engine, AsyncEngine) else engine
    dialect = sync_engine.dialect
    if (
        dialect.name != "postgresql"
        or dialect.driver != "psycopg"
        or event.contains(sync_engine, "set_connection_execution_options", _on_options)
    ):
        return
    event.listen(sync_engine, "set_connection_execution_options", _on_options)
    event.listen(sync_engine, "handle_error", _on_error)
    event.listen(sync_engine, "begin", _on_end)
    event.listen(sync_engine, "commit", _on_end)
    event.listen(sync_engine, "rollback", _on_end)
    listen(sync_engine, _begin)


def _on_options(connection: Connection, options: dict[str, Any]) -> None:
    if not options.get(FIRST_WRITE) or "isolation_level" in options:
        return
    # The level the transaction would have had: read before AUTOCOMMIT
    # clears it (psycopg's None is the server's default).
    level = getattr(connection.connection.driver_connection, "isolation_level", None)
    name = getattr(level, "name", None)
    name = name.replace("_", " ") if isinstance(name, str) else None
    if name in _SNAPSHOT_LEVELS:
        options[AT_FIRST_STATEMENT] = True
        return  # the driver begins at the first statement; `_begin` bounds it
    options[_LEVEL] = name
    options["isolation_level"] = "AUTOCOMMIT"


def _begin(connection: Connection, remaining_time: RemainingTime | None) -> None:
    left = deadline_left(remaining_time)
    options = connection.get_execution_options()
    if not options.get(AT_FIRST_STATEMENT):
        level = options.get(_LEVEL)
        connection.exec_driver_sql(
            f"BEGIN ISOLATION LEVEL {level}" if level in _LEVELS else "BEGIN"
        )
    if left is not None:
        connection.exec_driver_sql(_BOUND_WAITS.format(ms=f"{left:d}")).close()
        connection.info[_BOUNDED] = remaining_time


def _on_error(context: ExceptionContext) -> None:
    connection = context.connection
    info = None if connection is None else connection_info(connection)
    if info is None:
        return
    remaining_time: RemainingTime | None = info.get(_BOUNDED)
    original = context.original_exception
    if remaining_time is None or getattr(original, "sqlstate", None) not in (
        _TIMEOUT_STATES
    ):
        return
    left = remaining_time()
    # Our timeout fired only once the time left was spent: otherwise the wait
    # was cut by the engine's own timeout, a NOWAIT or a cancel, and the
    # driver's error stands (`translate_error` classifies it).
    if left is not None and left <= _SLACK:
        raise DeadlineExceededError(
            "the caller's deadline passed while waiting for a database lock"
        ) from original


def _on_end(connection: Connection) -> None:
    info = connection_info(connection)
    if info is not None:
        info.pop(_BOUNDED, None)
