"""`SqlAlchemyModule`: request-scoped sessions, units of work and idempotency stores."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from injector import Binder, Injector, Module, Provider
from sqlalchemy import URL, Connection, Engine
from sqlalchemy.ext.asyncio import (
    AsyncConnection,
    AsyncEngine,
    AsyncSession,
    async_sessionmaker,
)
from sqlalchemy.orm import Session, sessionmaker

from mediator._behaviors.idempotency.store import (
    AsyncIdempotencyStore,
    IdempotencyStore,
)
from mediator._behaviors.transaction.behavior import AsyncUnitOfWork, UnitOfWork
from mediator._core.scope import RequestScope, at_scope_exit
from mediator._dispatch.outbox import Outbox
from mediator.sqlalchemy._first_write import REMAINING_TIME, RemainingTime
from mediator.sqlalchemy._idempotency.store import (
    AsyncSqlAlchemyIdempotencyStore,
    SqlAlchemyIdempotencyStore,
)
from mediator.sqlalchemy._outbox.recorder import SqlAlchemyOutbox
from mediator.sqlalchemy._postgres import prepare_postgres
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
      async path prefers when both are bound;
    - `mediator.Outbox`, which records messages in the running unit of
      work's session (either side), for `OutboxRelay` to deliver after the
      commit;
    - on each side, the idempotency store (`IdempotencyStore`,
      `AsyncIdempotencyStore`) is request-scoped too: `SqlAlchemyIdempotencyStore`
      (or the async one) on the engine, completing on the send's session. With
      a factory, the engine is the one it is bound to; a factory bound per
      mapper or table (``binds=``) gets no store.

    A unit of work's transaction begins at its first write, so a handler
    that reads, calls another service and then writes holds no lock during
    the call: SQLite engines are prepared with `prepare_sqlite` (WAL,
    foreign keys, ``BEGIN IMMEDIATE`` at the first write, this process's
    writers queued in order at a gate per database file), PostgreSQL ones on
    psycopg 3 with `prepare_postgres`, so that reads before the first write
    run in autocommit and the first write sends ``BEGIN``. Sessions are made with
    ``expire_on_commit=False`` when the module makes the factory, so a handler
    may return what it wrote.

    Args:
        engine: A sync engine; a `sessionmaker` is made for it.
        async_engine: An async engine; an `async_sessionmaker` is made for it.
        session_factory: Your own `sessionmaker`, instead of `engine`.
        async_session_factory: Your own `async_sessionmaker`, instead of
            `async_engine`.
        remaining_time: Optional: answers the seconds left before the
            caller's deadline, or None when there is none; for example
            `http_resilience.remaining_time`, the deadline of the request
            being served. The first write's wait for its locks is bounded by
            it (on SQLite, the wait at the writer gate and the busy timeout of
            the ``BEGIN IMMEDIATE``; on PostgreSQL, ``lock_timeout`` and
            ``statement_timeout`` for the transaction; never longer than the
            engine's own), as is the idempotency store's claim on SQLite, and
            a wait it ends raises
            `mediator.DeadlineExceededError` (504 through
            `mediator.asgi.DomainErrorMiddleware`; never retried).

    Raises:
        TypeError: Nothing given; an engine and a factory given for the same
            side; an argument of the wrong kind (an `AsyncEngine` as `engine`, a
            `sessionmaker` as `async_session_factory`, a URL, a session...), named
            with the parameter it belongs to; a factory bound to no engine or
            to one of the other kind (a sync session on the async path would
            return before committing, so the module refuses it when built);
            or a `remaining_time` that is not callable.

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
        remaining_time: RemainingTime | None = None,
    ) -> None:
        _check_kind("engine", engine)
        _check_kind("async_engine", async_engine)
        _check_kind("session_factory", session_factory)
        _check_kind("async_session_factory", async_session_factory)
        if remaining_time is not None and not callable(remaining_time):
            raise TypeError(
                "SqlAlchemyModule(remaining_time=...) takes a callable answering "
                "the seconds left before the caller's deadline (or None), such as "
                "http_resilience.remaining_time; got "
                f"{type(remaining_time).__qualname__}"
            )
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
                prepare_postgres(bind)
        self._sessions = session_factory
        self._async_sessions = async_session_factory
        self._remaining_time = remaining_time

    def configure(self, binder: Binder) -> None:
        """Bind the session, unit of work and idempotency store of each side."""
        binder.bind(Outbox, to=SqlAlchemyOutbox)
        for side, sessions in ((_SYNC, self._sessions), (_ASYNC, self._async_sessions)):
            if sessions is not None:
                side.bind(binder, sessions, self._remaining_time)


_Sessions = sessionmaker[Session] | async_sessionmaker[AsyncSession]


@dataclass(frozen=True, slots=True)
class _Side:
    """What `SqlAlchemyModule` binds on one side, sync or async: keys and kinds."""

    session: type[Any]
    unit_of_work: type[Any]
    unit_of_work_kind: type[Any]
    engine: type[Any]
    store: type[Any]
    store_kind: Callable[[Any, Any], object]

    def bind(
        self,
        binder: Binder,
        sessions: _Sessions,
        remaining_time: RemainingTime | None,
    ) -> None:
        """The request-scoped session, the unit of work, and the store if it can."""
        binder.bind(
            self.session, to=_opened(sessions, remaining_time), scope=RequestScope
        )
        binder.bind(self.unit_of_work, to=self.unit_of_work_kind)
        engine = _engine_of(sessions)
        if isinstance(engine, self.engine):
            session, store_kind = self.session, self.store_kind
            store = _Injected(
                lambda injector: store_kind(engine, injector.get(session))
            )
            binder.bind(self.store, to=store, scope=RequestScope)


# Each kind a side binds, sync and async, side by side.
_SYNC, _ASYNC = (
    _Side(*kinds)
    for kinds in zip(
        (Session, AsyncSession),
        (UnitOfWork, AsyncUnitOfWork),
        (SqlAlchemyUnitOfWork, AsyncSqlAlchemyUnitOfWork),
        (Engine, AsyncEngine),
        (IdempotencyStore, AsyncIdempotencyStore),
        (SqlAlchemyIdempotencyStore, AsyncSqlAlchemyIdempotencyStore),
        strict=True,
    )
)


def _engine_of(factory: _Sessions) -> object:
    """The engine a factory is bound to (a connection's own engine), if one."""
    bind = factory.kw.get("bind")
    return bind.engine if isinstance(bind, Connection | AsyncConnection) else bind


def _opened(
    sessions: _Sessions, remaining_time: RemainingTime | None
) -> Provider[Session | AsyncSession]:
    """Opens a session from `sessions`, closed when the request scope ends.

    An `AsyncSession`'s close is awaited there; `send_sync` refuses it. The
    session's `info` carries `remaining_time` for its unit of work.
    """

    def open_session() -> Session | AsyncSession:
        session = sessions()
        if remaining_time is not None:
            session.info[REMAINING_TIME] = remaining_time
        at_scope_exit(session.close)
        return session

    return _Call(open_session)


# What each parameter takes, and where each kind of value belongs.
_EXPECTED: dict[str, tuple[type[Any], str]] = {
    "engine": (Engine, "an Engine"),
    "async_engine": (AsyncEngine, "an AsyncEngine"),
    "session_factory": (sessionmaker, "a sessionmaker"),
    "async_session_factory": (async_sessionmaker, "an async_sessionmaker"),
}
_PER_SEND = "the module opens one session per send"
_KINDS: tuple[tuple[type[Any] | tuple[type[Any], ...], str, str], ...] = (
    (AsyncEngine, "an AsyncEngine", "pass it as async_engine= instead"),
    (Engine, "an Engine", "pass it as engine= instead"),
    (
        async_sessionmaker,
        "an async_sessionmaker",
        "pass it as async_session_factory= instead",
    ),
    (sessionmaker, "a sessionmaker", "pass it as session_factory= instead"),
    (
        AsyncSession,
        "an AsyncSession",
        "pass the async_sessionmaker that makes it as async_session_factory= "
        f"({_PER_SEND})",
    ),
    (
        Session,
        "a Session",
        f"pass the sessionmaker that makes it as session_factory= ({_PER_SEND})",
    ),
    (
        (str, URL),
        "a URL",
        "pass engine=create_engine(url), or async_engine=create_async_engine(url)",
    ),
)
# A factory's bind: the engine kinds each side can use, and the fix for the other.
_BINDS: dict[str, tuple[tuple[type[Any], ...], str]] = {
    "session_factory": (
        (Engine, Connection),
        "sessionmaker(engine), or pass engine= instead",
    ),
    "async_session_factory": (
        (AsyncEngine, AsyncConnection),
        "async_sessionmaker(async_engine), or pass async_engine= instead",
    ),
}


def _check_kind(parameter: str, value: object) -> None:
    """Refuse a value that belongs to another parameter, or to none.

    A sync `Session` on the async path (an `async_sessionmaker` given as
    `session_factory`) would return from ``commit`` without committing.
    """
    if value is None:
        return
    expected, expected_name = _EXPECTED[parameter]
    if not isinstance(value, expected):
        name, fix = _kind_of(value)
        raise TypeError(
            f"SqlAlchemyModule({parameter}=...) takes {expected_name}, got {name}: "
            f"{fix}"
        )
    if parameter in _BINDS:
        _check_bind(parameter, expected_name, value)


def _kind_of(value: object) -> tuple[str, str]:
    """What `value` is, in the error's words, and where it belongs."""
    for kind, name, fix in _KINDS:
        if isinstance(value, kind):
            return name, fix
    return type(value).__qualname__, (
        "pass engine=, async_engine=, session_factory= or async_session_factory="
    )


def _check_bind(parameter: str, factory_name: str, factory: Any) -> None:
    kinds, make = _BINDS[parameter]
    bind = factory.kw.get("bind")
    if bind is None:
        if factory.kw.get("binds"):
            return  # bound per mapper or table
        raise TypeError(
            f"SqlAlchemyModule({parameter}=...) is {factory_name} with no engine: "
            f"make it with {make}"
        )
    if isinstance(bind, kinds):
        return
    if isinstance(bind, AsyncEngine | AsyncConnection):
        fix = "make async_sessionmaker(async_engine) and pass it as "
        fix += "async_session_factory="
        name = "an AsyncEngine"
    elif isinstance(bind, Engine | Connection):
        fix = "make sessionmaker(engine) and pass it as session_factory="
        name = "an Engine"
    else:
        fix = f"make it with {make}"
        name = type(bind).__qualname__
    raise TypeError(f"SqlAlchemyModule({parameter}=...) is bound to {name}: {fix}")


class _Call(Provider[T]):
    """A provider that calls a function with no arguments, without injection."""

    def __init__(self, function: Callable[[], T]) -> None:
        self._function = function

    def get(self, injector: Injector) -> T:
        return self._function()


class _Injected(Provider[T]):
    """A provider that calls a function with the injector."""

    def __init__(self, function: Callable[[Injector], T]) -> None:
        self._function = function

    def get(self, injector: Injector) -> T:
        return self._function(injector)
