"""Units of work over a SQLAlchemy `Session` or `AsyncSession`."""

from __future__ import annotations

from injector import inject
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import Session

from mediator.sqlalchemy._errors import translate_error
from mediator.sqlalchemy._sqlite import IMMEDIATE

__all__ = ["AsyncSqlAlchemyUnitOfWork", "SqlAlchemyUnitOfWork"]

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

    def translate_error(self, error: BaseException) -> BaseException:
        """See `mediator.sqlalchemy.translate_error`."""
        return translate_error(error)


class AsyncSqlAlchemyUnitOfWork:
    """`SqlAlchemyUnitOfWork` for the request's `AsyncSession`."""

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

    def translate_error(self, error: BaseException) -> BaseException:
        """See `mediator.sqlalchemy.translate_error`."""
        return translate_error(error)
