"""Driver errors, classified at the transaction boundary so retry can tell."""

from __future__ import annotations

import sqlite3

from sqlalchemy import exc

from mediator._core.errors import ConflictError, TransientDatabaseError

__all__ = ["is_sqlite_busy", "translate_error"]

# PostgreSQL SQLSTATE codes.
_UNIQUE_VIOLATION = "23505"
_FOREIGN_KEY_VIOLATION = "23503"
_TRANSIENT_STATES = {
    "40001": "serialization failure",
    "40P01": "deadlock detected",
    # NOWAIT, or a lock_timeout of the engine's own; one of the caller's
    # deadline is raised as DeadlineExceededError before it gets here.
    "55P03": "lock not available",
}

# SQLite extended result codes (sqlite3 exposes them as `sqlite_errorcode`).
_SQLITE_BUSY = 5
_SQLITE_LOCKED = 6
_SQLITE_CONFLICTS = {
    2067: "unique constraint",  # SQLITE_CONSTRAINT_UNIQUE
    1555: "primary key",  # SQLITE_CONSTRAINT_PRIMARYKEY
    787: "foreign key constraint",  # SQLITE_CONSTRAINT_FOREIGNKEY
}


def translate_error(error: BaseException) -> BaseException:
    """Classify a database error raised inside or at the end of a transaction.

    Returns:
        `ConflictError` for a unique or foreign-key violation (deterministic:
        the same write fails again); `TransientDatabaseError` for a
        serialization failure, a deadlock, or SQLite's "database is locked"
        (a fresh attempt can succeed), for a lock PostgreSQL could not get
        (``NOWAIT``, the engine's own ``lock_timeout``), and for a connection
        SQLAlchemy saw
        drop (``connection_invalidated``: the transaction is gone with it);
        anything else unchanged, `mediator.DeadlineExceededError` included
        (the unit of work raises it when a lock wait outlived the caller's
        deadline: final, never retried). The new error's
        message names the kind of failure, never the values involved (a
        driver's message can quote the row); the caller keeps `error` as its
        cause.
    """
    if not isinstance(error, exc.DBAPIError):
        return error
    if error.connection_invalidated:
        return TransientDatabaseError(
            "the transaction was lost, try again (the connection dropped)"
        )
    original = error.orig
    # psycopg 3 names it `sqlstate`, psycopg2 `pgcode`.
    state = getattr(original, "sqlstate", None) or getattr(original, "pgcode", None)
    if isinstance(state, str):
        if state in (_UNIQUE_VIOLATION, _FOREIGN_KEY_VIOLATION):
            kind = "unique" if state == _UNIQUE_VIOLATION else "foreign key"
            return ConflictError(
                f"the write conflicts with existing data ({kind} constraint)"
            )
        if state in _TRANSIENT_STATES:
            return TransientDatabaseError(
                f"the transaction was refused, try again ({_TRANSIENT_STATES[state]})"
            )
        return error
    if isinstance(original, sqlite3.Error):
        return _translate_sqlite(error, original)
    return error


def _translate_sqlite(error: exc.DBAPIError, original: sqlite3.Error) -> BaseException:
    code = getattr(original, "sqlite_errorcode", None)
    message = str(original)
    if isinstance(original, sqlite3.IntegrityError):
        kind = _SQLITE_CONFLICTS.get(code) if isinstance(code, int) else None
        if kind is None and message.startswith("UNIQUE constraint failed"):
            kind = "unique constraint"
        if kind is None and message.startswith("FOREIGN KEY constraint failed"):
            kind = "foreign key constraint"
        if kind is not None:
            return ConflictError(f"the write conflicts with existing data ({kind})")
        return error
    if is_sqlite_busy(original):
        return TransientDatabaseError(
            "the transaction was refused, try again (database is locked)"
        )
    return error


def is_sqlite_busy(original: BaseException | None) -> bool:
    """Whether a driver error is SQLite's "database is locked" (busy or locked)."""
    if not isinstance(original, sqlite3.Error):
        return False
    code = getattr(original, "sqlite_errorcode", None)
    if isinstance(code, int) and code & 0xFF in (_SQLITE_BUSY, _SQLITE_LOCKED):
        return True
    message = str(original)
    return "database is locked" in message or "database table is locked" in message
