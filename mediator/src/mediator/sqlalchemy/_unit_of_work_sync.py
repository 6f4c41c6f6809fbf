# Generated from _unit_of_work.py by tools/unasync.py; do not edit.
# Edit the async source and run `python tools/unasync.py`.
"""Units of work over a SQLAlchemy `Session`.

Generated from `mediator.sqlalchemy._unit_of_work` by ``tools/unasync.py``:
edit that one and run the script.
"""

from __future__ import annotations

from injector import inject
from sqlalchemy.orm import Session, SessionTransaction

from mediator._behaviors.transaction.behavior import UnitOfWork
from mediator.sqlalchemy._errors import translate_error
from mediator.sqlalchemy._first_write import FIRST_WRITE, REMAINING_TIME

__all__ = ["SqlAlchemySavepoint", "SqlAlchemyUnitOfWork"]

_NO_DEADLINE = {FIRST_WRITE: True}


class SqlAlchemyUnitOfWork:
    """One transaction on the request's `Session`, for one attempt.

    The database transaction begins at the attempt's first write, not at
    `begin`, so a handler that reads, calls another service and then writes
    holds no lock and no open transaction during the call (a unit of work
    must never hold one across an outbound call). Reads before the first
    write run one statement at a time and each sees the last commit. The
    first write (an ORM flush, a Core or `text()` insert, update or delete,
    a ``SELECT ... FOR UPDATE``, a nested send's ``SAVEPOINT``) begins it:
    ``BEGIN IMMEDIATE`` on SQLite, which takes the write lock before the
    write (this process's writers queue for it in order, at a gate per
    database file), ``BEGIN`` on PostgreSQL (psycopg 3). On engines `SqlAlchemyModule`
    prepares; others begin at the first statement, as SQLAlchemy does.

    A read that decides a write does not lock what it read: write
    conditionally (``UPDATE ... WHERE stock >= 1``) or read again with
    ``FOR UPDATE`` after the call. A handler that flushes before the call
    holds the transaction (and SQLite's write lock) through it.

    With ``SqlAlchemyModule(remaining_time=...)``, the wait for the locks the
    first write takes is bounded by the caller's time left, and a wait the
    deadline ends raises `mediator.DeadlineExceededError`.

    `begin` discards a transaction the session began by itself before (reads
    made by validators or policies), so the attempt starts clean. Handlers
    flush as they like but never commit: the unit of work does.
    """

    @inject
    def __init__(self, session: Session) -> None:
        self._session = session
        remaining_time = session.info.get(REMAINING_TIME)
        self._options = (
            _NO_DEADLINE if remaining_time is None else {FIRST_WRITE: remaining_time}
        )

    def begin(self) -> None:
        """Start the attempt: its transaction begins at its first write."""
        if self._session.in_transaction():
            self._session.rollback()
        self._session.begin()
        self._session.connection(execution_options=self._options)

    def commit(self) -> None:
        """Flush and commit."""
        self._session.commit()

    def rollback(self) -> None:
        """Discard everything the attempt wrote."""
        self._session.rollback()

    def savepoint(self) -> UnitOfWork:
        """A nested attempt's unit of work: a savepoint on the same session."""
        return SqlAlchemySavepoint(self._session)

    def translate_error(self, error: BaseException) -> BaseException:
        """See `mediator.sqlalchemy.translate_error`."""
        return translate_error(error)


class SqlAlchemySavepoint:
    """One nested attempt inside the running transaction: ``SAVEPOINT``.

    `begin` sets it (``Session.begin_nested``), `commit` releases it and
    `rollback` rolls back to it, leaving the writes made before it in place.
    """

    def __init__(self, session: Session) -> None:
        self._session = session
        self._savepoint: SessionTransaction | None = None

    def begin(self) -> None:
        """Set the savepoint."""
        self._savepoint = self._session.begin_nested()

    def commit(self) -> None:
        """Flush and release the savepoint; the outer transaction commits."""
        if self._savepoint is not None:
            self._savepoint.commit()

    def rollback(self) -> None:
        """Discard what the nested attempt wrote."""
        if self._savepoint is not None:
            self._savepoint.rollback()

    def savepoint(self) -> UnitOfWork:
        """A savepoint inside this one, for a send nested one level deeper."""
        return SqlAlchemySavepoint(self._session)

    def translate_error(self, error: BaseException) -> BaseException:
        """See `mediator.sqlalchemy.translate_error`."""
        return translate_error(error)
