"""`SqlAlchemyOutbox`: the `Outbox` that writes in the running unit of work.

A message is a row added to the session of the running unit of work (the one
`TransactionBehavior` began for the attempt, or the savepoint of a nested
send), as a mapped object: adding it is synchronous on a `Session` and an
`AsyncSession` alike, and its ``INSERT`` goes with the session's next flush,
at the latest the commit. A rolled-back attempt or savepoint expunges it.
After the commit, the relays of this process on the same database are woken
(`doorbell`), so a message waits for no poll.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import asdict
from datetime import datetime
from typing import Any, Final, cast

from injector import Injector, inject
from sqlalchemy import event
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import Session, registry

from mediator._core.clock import SystemWallClock, WallClock
from mediator._core.errors import ConfigurationError
from mediator._core.scope import UNIT_OF_WORK, active_scope
from mediator._core.wiring import bound_explicitly
from mediator._dispatch.outbox import Outbox, OutboxEntry
from mediator.sqlalchemy._outbox.table import PENDING, outbox_table
from mediator.sqlalchemy._unit_of_work import (
    AsyncSqlAlchemySavepoint,
    AsyncSqlAlchemyUnitOfWork,
)
from mediator.sqlalchemy._unit_of_work_sync import (
    SqlAlchemySavepoint,
    SqlAlchemyUnitOfWork,
)

__all__ = ["Doorbell", "OutboxRow", "SqlAlchemyOutbox", "doorbell"]


class OutboxRow:
    """A message's row, mapped on `outbox_table` (by a registry of its own)."""

    def __init__(self, **values: Any) -> None:
        for name, value in values.items():
            setattr(self, name, value)


registry().map_imperatively(OutboxRow, outbox_table)

_UNITS: Final = (
    SqlAlchemyUnitOfWork,
    SqlAlchemySavepoint,
    AsyncSqlAlchemyUnitOfWork,
    AsyncSqlAlchemySavepoint,
)
_SESSION: Final = "_session"  # what each of the units of work calls its session
_RINGS: Final = "mediator_outbox_rings"  # session.info: the commit wakes relays


class Doorbell:
    """Wakes the relays of this process when a commit recorded messages.

    Keyed by database (the engine's URL, password hidden); a relay listens
    with a callable that must return at once and may be called from any
    thread.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._listeners: dict[str, list[Callable[[], None]]] = {}

    def listen(self, database: str, wake: Callable[[], None]) -> Callable[[], None]:
        """Call `wake` after each commit that records messages in `database`.

        Returns:
            The call that stops it.
        """
        with self._lock:
            self._listeners.setdefault(database, []).append(wake)

        def stop() -> None:
            with self._lock:
                listeners = self._listeners.get(database, [])
                if wake in listeners:
                    listeners.remove(wake)

        return stop

    def ring(self, database: str) -> None:
        """Wake every relay listening on `database`."""
        with self._lock:
            listeners = list(self._listeners.get(database, ()))
        for wake in listeners:
            wake()


doorbell: Final = Doorbell()


def database_of(session: Session) -> str:
    """The key of a session's database for the `doorbell`."""
    bind = session.get_bind()
    return bind.engine.url.render_as_string(hide_password=True)


class SqlAlchemyOutbox(Outbox):
    """The `Outbox` bound by `SqlAlchemyModule`: rows in the running transaction.

    A message is recorded, and first due, at the bound `WallClock`'s time (the
    system's when none is bound), so a relay given the same clock sees it due.

    Raises:
        ConfigurationError: On `send` or `publish` outside a ``@transactional``
            handler, or inside one whose unit of work is not
            `SqlAlchemyModule`'s (a `UnitOfWork` of your own: the outbox cannot
            know its session).
    """

    @inject
    def __init__(self, injector: Injector) -> None:
        # The injector, not the mediator's Wiring: an Outbox is also built by
        # injector alone (a service of yours that records, got outside a send).
        self._wall: WallClock = (
            cast(WallClock, injector.get(cast(type[Any], WallClock)))
            if bound_explicitly(injector, WallClock)
            else SystemWallClock()
        )

    def _now(self) -> datetime:
        # The bound WallClock, the one the relays of a test or a simulation
        # are given: a message is due by the clock that records it.
        return self._wall.now()

    def _record(self, entry: OutboxEntry) -> None:
        session = _running_session()
        session.add(
            OutboxRow(
                **asdict(entry),
                state=PENDING,
                attempts=0,
                next_attempt_at=entry.created_at,
            )
        )
        session.info[_RINGS] = True


def _running_session() -> Session:
    scope = active_scope()
    unit: object = None if scope is None else scope.get(UNIT_OF_WORK)
    unit = getattr(unit, "unit", unit)  # a sync unit adapted for the async path
    if unit is None:
        raise ConfigurationError(
            "Outbox.send() and Outbox.publish() record a message in the running "
            "transaction: call them in the handler of a @transactional request"
        )
    if not isinstance(unit, _UNITS):
        raise ConfigurationError(
            f"the running unit of work is a {type(unit).__qualname__}, not "
            "SqlAlchemyModule's: the outbox writes in the session of "
            "mediator.sqlalchemy's unit of work"
        )
    session: Session | AsyncSession = getattr(unit, _SESSION)
    return session.sync_session if isinstance(session, AsyncSession) else session


@event.listens_for(Session, "after_commit")
def _ring(session: Session) -> None:
    """After a commit that recorded messages, wake this process's relays."""
    if session.info.pop(_RINGS, None):
        doorbell.ring(database_of(session))


@event.listens_for(Session, "after_rollback")
def _forget(session: Session) -> None:
    """A rolled-back transaction recorded nothing; a savepoint's leaves it be."""
    if not session.in_transaction():
        session.info.pop(_RINGS, None)
