"""A def ``@idempotent @transactional`` handler under `send`, with both engines bound.

The handler writes on the sync `Session`, in the sync unit of work, on its
worker thread. Its idempotency record must be completed on that same session,
in that same transaction, so the effect and the record commit together or not
at all: the claim is taken, and the record completed or released, by the sync
store on the handler's thread, not by the async store on the `AsyncSession`.
One SQLite file; a `before_commit` hook on the session looks at the
transaction just before it commits, and can make the commit fail.
"""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from injector import Injector, inject
from sqlalchemy import event
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine
from sqlalchemy.orm import Session, sessionmaker
from sqlalchemy.pool import NullPool

from mediator import (
    BusinessRuleError,
    Command,
    CommandHandler,
    Mediator,
    MediatorModule,
    Principal,
    acting_as,
    idempotent,
    is_replay,
    transactional,
)
from mediator.sqlalchemy import SqlAlchemyModule, idempotency_table
from tests.mediator.sqlalchemy.idempotency_db import effects, effects_metadata

pytestmark = pytest.mark.anyio


class Boom(RuntimeError):
    pass


@dataclass
class Seen:
    """What the handler and the commit hook saw, and which threads they ran on."""

    fail_commit: bool = False
    handler_threads: list[int] = field(default_factory=list[int])
    connect_threads: list[int] = field(default_factory=list[int])
    # At each commit of the handler's session: the record's status inside
    # the transaction, and as another connection sees it (committed state).
    at_commit: list[tuple[str | None, str | None, int]] = field(
        default_factory=list[tuple[str | None, str | None, int]]
    )


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[sa.Engine]:
    # No pool and check_same_thread: a connection used from a second thread fails.
    engine = sa.create_engine(
        f"sqlite:///{tmp_path / 'shop.db'}",
        poolclass=NullPool,
        connect_args={"check_same_thread": True},
    )
    idempotency_table.metadata.create_all(engine)
    effects_metadata.create_all(engine)
    yield engine
    engine.dispose()


@pytest.fixture
async def async_engine(tmp_path: Path) -> AsyncIterator[AsyncEngine]:
    engine = create_async_engine(f"sqlite+aiosqlite:///{tmp_path / 'shop.db'}")
    yield engine
    await engine.dispose()


@idempotent(key="key")
@transactional
class Charge(Command[int]):
    key: str
    amount: int
    refuse: bool = False


class ChargeHandler(CommandHandler[Charge, int]):
    @inject
    def __init__(self, session: Session, seen: Seen) -> None:
        self.session = session
        self.seen = seen

    def handle(self, request: Charge) -> int:
        self.seen.handler_threads.append(threading.get_ident())
        self.session.execute(sa.insert(effects).values(note=request.key))
        if request.refuse:
            raise BusinessRuleError("card declined")
        return request.amount * 10


def status_of(connection: sa.Connection | Session) -> str | None:
    return connection.execute(sa.select(idempotency_table.c.state)).scalar()


def make_mediator(engine: sa.Engine, async_engine: AsyncEngine, seen: Seen) -> Mediator:
    sessions = sessionmaker(engine)

    @event.listens_for(engine, "connect")
    def connected(*_: object) -> None:
        seen.connect_threads.append(threading.get_ident())

    @event.listens_for(sessions, "before_commit")
    def look(session: Session) -> None:
        with engine.connect() as other:
            committed = status_of(other)
        seen.at_commit.append((status_of(session), committed, threading.get_ident()))
        if seen.fail_commit:
            raise Boom("the commit failed after the handler's write")

    def bind(binder: Any) -> None:
        binder.bind(Seen, to=seen)

    return Injector(
        [
            bind,
            MediatorModule(lambda m: m.add_handler(ChargeHandler).use_defaults()),
            SqlAlchemyModule(session_factory=sessions, async_engine=async_engine),
        ]
    ).get(Mediator)


def effects_and_records(engine: sa.Engine) -> tuple[list[str], list[str]]:
    with engine.connect() as connection:
        notes = list(connection.scalars(sa.select(effects.c.note)))
        statuses = list(connection.scalars(sa.select(idempotency_table.c.state)))
    return notes, statuses


async def test_the_record_is_completed_in_the_handlers_transaction(
    engine: sa.Engine, async_engine: AsyncEngine
) -> None:
    seen = Seen()
    mediator = make_mediator(engine, async_engine, seen)

    with acting_as(Principal("u-1")):
        assert await mediator.send(Charge(key="k-1", amount=4)) == 40

    # Just before the commit: completed in the transaction, pending outside it.
    (handler_thread,) = seen.handler_threads
    assert seen.at_commit == [("completed", "pending", handler_thread)]
    assert handler_thread != threading.get_ident()
    # The claim's connection too was opened on the handler's thread, not the loop's.
    assert set(seen.connect_threads) == {handler_thread}
    assert len(seen.connect_threads) >= 2
    assert effects_and_records(engine) == (["k-1"], ["completed"])


async def test_a_replay_returns_the_stored_response_without_the_handler(
    engine: sa.Engine, async_engine: AsyncEngine
) -> None:
    seen = Seen()
    mediator = make_mediator(engine, async_engine, seen)

    with acting_as(Principal("u-1")):
        assert await mediator.send(Charge(key="k-1", amount=4)) == 40
        assert await mediator.send(Charge(key="k-1", amount=4)) == 40
        assert is_replay()

    assert len(seen.handler_threads) == 1
    assert effects_and_records(engine) == (["k-1"], ["completed"])


async def test_a_failure_after_the_write_leaves_neither_effect_nor_record(
    engine: sa.Engine, async_engine: AsyncEngine
) -> None:
    seen = Seen(fail_commit=True)
    mediator = make_mediator(engine, async_engine, seen)

    with acting_as(Principal("u-1")), pytest.raises(Boom):
        await mediator.send(Charge(key="k-1", amount=4))

    # The record had been completed, in the transaction that failed to commit.
    assert [inside for inside, _, _ in seen.at_commit] == ["completed"]
    assert effects_and_records(engine) == ([], [])

    # The key was given back: the next send runs the handler and commits.
    seen.fail_commit = False
    with acting_as(Principal("u-1")):
        assert await mediator.send(Charge(key="k-1", amount=4)) == 40
        assert not is_replay()
    assert effects_and_records(engine) == (["k-1"], ["completed"])


async def test_a_domain_error_rolls_back_the_write_and_is_stored_as_the_outcome(
    engine: sa.Engine, async_engine: AsyncEngine
) -> None:
    seen = Seen()
    mediator = make_mediator(engine, async_engine, seen)

    with acting_as(Principal("u-1")):
        with pytest.raises(BusinessRuleError, match="card declined"):
            await mediator.send(Charge(key="k-1", amount=4, refuse=True))
        with pytest.raises(BusinessRuleError, match="card declined"):
            await mediator.send(Charge(key="k-1", amount=4, refuse=True))
        assert is_replay()

    assert len(seen.handler_threads) == 1
    assert seen.at_commit == []
    assert effects_and_records(engine) == ([], ["completed"])


async def test_the_same_wiring_serves_send_sync(
    engine: sa.Engine, async_engine: AsyncEngine
) -> None:
    seen = Seen()
    mediator = make_mediator(engine, async_engine, seen)

    with acting_as(Principal("u-1")):
        assert mediator.send_sync(Charge(key="k-1", amount=4)) == 40
        assert mediator.send_sync(Charge(key="k-1", amount=4)) == 40
        assert is_replay()

    assert seen.handler_threads == [threading.get_ident()]
    assert seen.at_commit == [("completed", "pending", threading.get_ident())]
    assert effects_and_records(engine) == (["k-1"], ["completed"])
