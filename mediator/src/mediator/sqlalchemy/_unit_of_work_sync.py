# Generated from _unit_of_work.py by tools/unasync.py; do not edit.
# Edit the async source and run `python tools/unasync.py`.
"""Units of work over a SQLAlchemy `Session`.

Generated from `mediator.sqlalchemy._unit_of_work` by ``tools/unasync.py``:
edit that one and run the script.
"""

from __future__ import annotations

from injector import inject
from sqlalchemy.orm import Session, SessionTransaction

from mediator._transaction import UnitOfWork
from mediator.sqlalchemy._errors import translate_error
from mediator.sqlalchemy._sqlite import IMMEDIATE

__all__ = ["SqlAlchemySavepoint", "SqlAlchemyUnitOfWork"]

_BEGIN_OPTIONS = {IMMEDIATE: True}


class SqlAlchemyUnitOfWork:
    """One transaction on the request's `Session`, for one attempt.

    `begin` discards a transaction the session began by itself before (reads
    made by validators or policies), so the attempt starts clean; on SQLite it
    begins with ``BEGIN IMMEDIATE``. Handlers flush as they like but never
    commit: the unit of work does.
    """

    @inject
    def __init__(self, session: Session) -> None:
        self._session = session

    def begin(self) -> None:
        """Start the attempt's transaction."""
        if self._session.in_transaction():
            self._session.rollback()
        self._session.begin()
        self._session.connection(execution_options=_BEGIN_OPTIONS)

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
