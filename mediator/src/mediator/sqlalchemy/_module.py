"""`SqlAlchemyModule`: request-scoped sessions and the unit of work, for injector."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from injector import Binder, Injector, Module, Provider
from sqlalchemy import Engine
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker
from sqlalchemy.orm import Session, sessionmaker

from mediator._scope import RequestScope, at_scope_exit
from mediator._transaction import AsyncUnitOfWork, UnitOfWork
from mediator.sqlalchemy._sqlite import prepare_sqlite
from mediator.sqlalchemy._unit_of_work import (
    AsyncSqlAlchemyUnitOfWork,
    SqlAlchemyUnitOfWork,
)

__all__ = ["SqlAlchemyModule"]

T = TypeVar("T")


class SqlAlchemyModule(Module):
    """Binds the request's database session and the unit of work.

    Give a sync engine (or session factory), an async one, or both:

    - sync: `Session` is request-scoped (one per top-level send, shared by
      nested sends, closed when the send ends) and `UnitOfWork` runs each
      attempt of a `@transactional` request on it;
    - async: the same with `AsyncSession` and `AsyncUnitOfWork`, which the
      async path prefers when both are bound.

    SQLite engines are prepared with `prepare_sqlite` (WAL, foreign keys, and
    ``BEGIN IMMEDIATE`` for units of work). Sessions are made with
    ``expire_on_commit=False`` when the module makes the factory, so a handler
    may return what it wrote.

    Args:
        engine: A sync engine; a `sessionmaker` is made for it.
        async_engine: An async engine; an `async_sessionmaker` is made for it.
        session_factory: Your own `sessionmaker`, instead of `engine`.
        async_session_factory: Your own `async_sessionmaker`, instead of
            `async_engine`.

    Raises:
        TypeError: Nothing given, or an engine and a factory given for the same
            side.

    Example:
        >>> from sqlalchemy import create_engine
        >>> from mediator import MediatorModule
        >>> modules = [
        ...     MediatorModule(lambda m: m.register_from("app").use_defaults()),
        ...     SqlAlchemyModule(engine=create_engine("sqlite:///app.db")),
        ... ]
    """

    def __init__(
        self,
        *,
        engine: Engine | None = None,
        async_engine: AsyncEngine | None = None,
        session_factory: sessionmaker[Session] | None = None,
        async_session_factory: async_sessionmaker[AsyncSession] | None = None,
    ) -> None:
        if engine is not None and session_factory is not None:
            raise TypeError(
                "SqlAlchemyModule takes engine= or session_factory=, not both"
            )
        if async_engine is not None and async_session_factory is not None:
            raise TypeError(
                "SqlAlchemyModule takes async_engine= or async_session_factory=, "
                "not both"
            )
        if engine is not None:
            session_factory = sessionmaker(engine, expire_on_commit=False)
        if async_engine is not None:
            async_session_factory = async_sessionmaker(
                async_engine, expire_on_commit=False
            )
        if session_factory is None and async_session_factory is None:
            raise TypeError(
                "SqlAlchemyModule needs an engine: engine=, async_engine=, "
                "session_factory= or async_session_factory="
            )
        for factory in (session_factory, async_session_factory):
            bind = factory.kw.get("bind") if factory is not None else None
            if isinstance(bind, Engine | AsyncEngine):
                prepare_sqlite(bind)
        self._sessions = session_factory
        self._async_sessions = async_session_factory

    def configure(self, binder: Binder) -> None:
        """Bind `Session`/`UnitOfWork` and `AsyncSession`/`AsyncUnitOfWork`."""
        sessions = self._sessions
        if sessions is not None:

            def open_session() -> Session:
                session = sessions()
                at_scope_exit(session.close)
                return session

            binder.bind(Session, to=_Call(open_session), scope=RequestScope)
            binder.bind(UnitOfWork, to=SqlAlchemyUnitOfWork)
        async_sessions = self._async_sessions
        if async_sessions is not None:

            def open_async_session() -> AsyncSession:
                session = async_sessions()
                at_scope_exit(session.close)
                return session

            binder.bind(AsyncSession, to=_Call(open_async_session), scope=RequestScope)
            binder.bind(AsyncUnitOfWork, to=AsyncSqlAlchemyUnitOfWork)


class _Call(Provider[T]):
    """A provider that calls a function with no arguments, without injection."""

    def __init__(self, function: Callable[[], T]) -> None:
        self._function = function

    def get(self, injector: Injector) -> T:
        return self._function()
