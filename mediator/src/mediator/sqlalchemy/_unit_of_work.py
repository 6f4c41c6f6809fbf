"""Units of work over a SQLAlchemy `AsyncSession`; the `Session` ones beside it.

The sync ones, in `mediator.sqlalchemy._unit_of_work_sync`, are generated from
this module by ``tools/unasync.py``: edit this one and run the script.
"""

from __future__ import annotations

from injector import inject
from sqlalchemy.ext.asyncio import AsyncSession, AsyncSessionTransaction

from mediator._transaction import AsyncUnitOfWork
from mediator.sqlalchemy._errors import translate_error
from mediator.sqlalchemy._sqlite import IMMEDIATE
from mediator.sqlalchemy._unit_of_work_sync import (  # unasync: async-only
    SqlAlchemySavepoint,
    SqlAlchemyUnitOfWork,
)

__all__ = [  # unasync: async-only
    "AsyncSqlAlchemySavepoint",
    "AsyncSqlAlchemyUnitOfWork",
    "SqlAlchemySavepoint",
    "SqlAlchemyUnitOfWork",
]

_BEGIN_OPTIONS = {IMMEDIATE: True}


class AsyncSqlAlchemyUnitOfWork:
    """One transaction on the request's `AsyncSession`, for one attempt.

    `begin` discards a transaction the session began by itself before (reads
    made by validators or policies), so the attempt starts clean; on SQLite it
    begins with ``BEGIN IMMEDIATE``. Handlers flush as they like but never
    commit: the unit of work does.
    """

    @inject
    def __init__(self, session: AsyncSession) -> None:
        self._session = session

    async def begin(self) -> None:
        """Start the attempt's transaction."""
        if self._session.in_transaction():
            await self._session.rollback()
        await self._session.begin()
        await self._session.connection(execution_options=_BEGIN_OPTIONS)

    async def commit(self) -> None:
        """Flush and commit."""
        await self._session.commit()

    async def rollback(self) -> None:
        """Discard everything the attempt wrote."""
        await self._session.rollback()

    def savepoint(self) -> AsyncUnitOfWork:
        """A nested attempt's unit of work: a savepoint on the same session."""
        return AsyncSqlAlchemySavepoint(self._session)

    def translate_error(self, error: BaseException) -> BaseException:
        """See `mediator.sqlalchemy.translate_error`."""
        return translate_error(error)


class AsyncSqlAlchemySavepoint:
    """One nested attempt inside the running transaction: ``SAVEPOINT``.

    `begin` sets it (``AsyncSession.begin_nested``), `commit` releases it and
    `rollback` rolls back to it, leaving the writes made before it in place.
    """

    def __init__(self, session: AsyncSession) -> None:
        self._session = session
        self._savepoint: AsyncSessionTransaction | None = None

    async def begin(self) -> None:
        """Set the savepoint."""
        self._savepoint = await self._session.begin_nested()

    async def commit(self) -> None:
        """Flush and release the savepoint; the outer transaction commits."""
        if self._savepoint is not None:
            await self._savepoint.commit()

    async def rollback(self) -> None:
        """Discard what the nested attempt wrote."""
        if self._savepoint is not None:
            await self._savepoint.rollback()

    def savepoint(self) -> AsyncUnitOfWork:
        """A savepoint inside this one, for a send nested one level deeper."""
        return AsyncSqlAlchemySavepoint(self._session)

    def translate_error(self, error: BaseException) -> BaseException:
        """See `mediator.sqlalchemy.translate_error`."""
        return translate_error(error)
