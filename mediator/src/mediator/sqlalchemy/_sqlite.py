"""SQLite set-up for concurrent writers: WAL, foreign keys, ``BEGIN IMMEDIATE``."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, Engine, event
from sqlalchemy.ext.asyncio import AsyncEngine

__all__ = ["IMMEDIATE", "READ_COMMITTED_STATEMENT", "prepare_sqlite"]

IMMEDIATE = "mediator_sqlite_immediate"
"""Execution option a unit of work sets to begin with ``BEGIN IMMEDIATE``."""

READ_COMMITTED_STATEMENT = "mediator_sqlite_statement_read"
"""Execution option for a connection that only reads, one statement at a time:
no ``BEGIN`` is sent, so each statement sees the last commit and takes no lock
(the driver runs it in autocommit)."""

_CONFIGURED = "mediator_sqlite_configured"


def prepare_sqlite(engine: Engine | AsyncEngine) -> None:
    """Make a SQLite engine safe for concurrent writers; idempotent.

    - Write transactions of the unit of work begin with ``BEGIN IMMEDIATE``:
      they take the write lock at the start and queue on the busy timeout. With
      the driver's deferred ``BEGIN``, two transactions that read and then write
      deadlock on the upgrade and one fails at once with "database is locked".
      Other transactions keep the deferred ``BEGIN``.
    - ``journal_mode=WAL``, so readers do not block the writer (file databases).
    - ``foreign_keys=ON``, which SQLite leaves off by default.

    `SqlAlchemyModule` calls this for SQLite engines itself.
    """
    sync_engine = engine.sync_engine if isinstance(engine, AsyncEngine) else engine
    if sync_engine.dialect.name != "sqlite" or event.contains(
        sync_engine, "connect", _on_connect
    ):
        return
    event.listen(sync_engine, "connect", _on_connect)
    event.listen(sync_engine, "begin", _on_begin)


def _on_connect(dbapi_connection: Any, record: Any) -> None:
    _configure(dbapi_connection)
    record.info[_CONFIGURED] = True


def _on_begin(connection: Connection) -> None:
    pooled = connection.connection
    if not pooled.info.get(_CONFIGURED):
        # Opened before the engine was prepared (e.g. by create_all): configure
        # it now, before its first transaction under our control.
        _configure(pooled.dbapi_connection)
        pooled.info[_CONFIGURED] = True
    options = connection.get_execution_options()
    if options.get(READ_COMMITTED_STATEMENT, False):
        return
    immediate = options.get(IMMEDIATE, False)
    connection.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")


def _configure(dbapi_connection: Any) -> None:
    # Stop the driver from emitting its own BEGIN, so that _on_begin decides.
    dbapi_connection.isolation_level = None
    cursor = dbapi_connection.cursor()
    try:
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA foreign_keys=ON")
    finally:
        cursor.close()
