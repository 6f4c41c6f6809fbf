"""A `@transactional` def handler on a sync `Session`, under `send` and `send_sync`.

One module wiring, ``SqlAlchemyModule(engine=...)``, serves an async app (FastAPI,
`send`) and a sync one (Flask, `send_sync`). Under `send` the handler runs in a
worker thread, and the unit of work's begin, commit and rollback and the
session's close run on that same thread: the engine here uses SQLite's
``check_same_thread`` and no pool, so a connection touched from a second thread
fails loudly.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from injector import Injector, inject
from sqlalchemy import event
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine
from sqlalchemy.orm import Session
from sqlalchemy.pool import NullPool

from mediator import Command, CommandHandler, Mediator, MediatorModule, transactional
from mediator.sqlalchemy import SqlAlchemyModule
from tests.mediator._support.shop_db import (
    ASYNC_HANDLERS,
    Account,
    Base,
    Boom,
    OpenAccountAsync,
    count_rows,
)

pytestmark = pytest.mark.anyio

WAIT = 30.0  # seconds a thread waits for the test: generous, on a busy machine


class Threads:
    """Which thread did what: the handler, and the engine's connection events."""

    def __init__(self) -> None:
        self.events: list[tuple[str, int]] = []
        self.lock = threading.Lock()

    def add(self, what: str) -> None:
        with self.lock:
            self.events.append((what, threading.get_ident()))

    def names(self) -> list[str]:
        return [what for what, _ in self.events]

    def threads(self) -> set[int]:
        return {thread for _, thread in self.events}


@pytest.fixture
def threads() -> Threads:
    return Threads()


@pytest.fixture
def engine(tmp_path: Path, threads: Threads) -> Iterator[sa.Engine]:
    engine = sa.create_engine(
        f"sqlite:///{tmp_path / 'shop.db'}",
        poolclass=NullPool,
        connect_args={"check_same_thread": True},
    )
    Base.metadata.create_all(engine)

    def recorder(what: str) -> Any:
        def record(*_: object) -> None:
            threads.add(what)

        return record

    event.listen(engine, "commit", recorder("commit"))
    event.listen(engine, "rollback", recorder("rollback"))
    event.listen(engine, "checkin", recorder("closed"))
    yield engine
    engine.dispose()


@pytest.fixture
async def async_engine(tmp_path: Path) -> AsyncIterator[AsyncEngine]:
    engine = create_async_engine(f"sqlite+aiosqlite:///{tmp_path / 'shop.db'}")
    yield engine
    await engine.dispose()


@transactional
class Open(Command[int]):
    email: str
    fail: bool = False


class Gate:
    """Holds the handler after its write until the test lets it go."""

    def __init__(self) -> None:
        self.wrote = threading.Event()
        self.go = threading.Event()
        self.closed = True  # open it to make the handler wait


class OpenHandler(CommandHandler[Open, int]):
    @inject
    def __init__(self, session: Session, threads: Threads, gate: Gate) -> None:
        self.session = session
        self.threads = threads
        self.gate = gate

    def handle(self, request: Open) -> int:
        self.threads.add("handler")
        try:
            account = Account(email=request.email)
            self.session.add(account)
            self.session.flush()
            self.gate.wrote.set()
            if not self.gate.closed and not self.gate.go.wait(WAIT):
                raise AssertionError("the test never let the handler go")
            if request.fail:
                raise Boom("after the write")
            return account.id
        finally:
            self.threads.add("returned")


def make_mediator(
    threads: Threads,
    gate: Gate,
    module: SqlAlchemyModule,
    handlers: tuple[type[Any], ...] = (),
) -> Mediator:
    def bind(binder: Any) -> None:
        binder.bind(Threads, to=threads)
        binder.bind(Gate, to=gate)

    configure = MediatorModule(
        lambda m: m.add_handler(OpenHandler, *handlers).use_defaults()
    )
    return Injector([bind, configure, module]).get(Mediator)


def rows(engine: sa.Engine, threads: Threads) -> int:
    """The accounts written; the test's own read is left out of `threads`."""
    before = list(threads.events)
    with Session(engine) as session:
        count = count_rows(session, Account)
    threads.events[:] = before
    return count


async def test_under_send_the_handler_and_its_unit_share_one_thread_off_the_loop(
    engine: sa.Engine, threads: Threads
) -> None:
    mediator = make_mediator(threads, Gate(), SqlAlchemyModule(engine=engine))

    assert await mediator.send(Open(email="a@x")) == 1

    assert rows(engine, threads) == 1
    assert threads.names() == ["handler", "returned", "commit", "closed"]
    assert len(threads.threads()) == 1
    assert threading.get_ident() not in threads.threads()


async def test_a_failure_under_send_rolls_back_on_the_handlers_thread(
    engine: sa.Engine, threads: Threads
) -> None:
    mediator = make_mediator(threads, Gate(), SqlAlchemyModule(engine=engine))

    with pytest.raises(Boom):
        await mediator.send(Open(email="a@x", fail=True))

    assert rows(engine, threads) == 0
    assert threads.names() == ["handler", "returned", "rollback", "closed"]
    assert len(threads.threads()) == 1


def test_the_same_wiring_serves_send_sync_in_the_callers_thread(
    engine: sa.Engine, threads: Threads
) -> None:
    mediator = make_mediator(threads, Gate(), SqlAlchemyModule(engine=engine))

    assert mediator.send_sync(Open(email="a@x")) == 1
    with pytest.raises(Boom):
        mediator.send_sync(Open(email="b@x", fail=True))

    assert rows(engine, threads) == 1
    assert threads.names() == [
        *("handler", "returned", "commit", "closed"),
        *("handler", "returned", "rollback", "closed"),
    ]
    assert threads.threads() == {threading.get_ident()}


async def test_with_both_engines_a_def_handler_gets_the_sync_unit_of_work(
    engine: sa.Engine, async_engine: AsyncEngine, threads: Threads
) -> None:
    # The async unit would commit the AsyncSession and leave the Session's
    # write uncommitted, lost when the session closes.
    module = SqlAlchemyModule(engine=engine, async_engine=async_engine)
    mediator = make_mediator(threads, Gate(), module, ASYNC_HANDLERS)

    assert await mediator.send(Open(email="a@x")) == 1
    assert await mediator.send(OpenAccountAsync(email="b@x")) == 2
    assert mediator.send_sync(Open(email="c@x")) == 3

    assert rows(engine, threads) == 3
    assert threads.names().count("commit") == 2  # the async one is another engine


async def test_a_cancelled_send_rolls_back_once_the_handler_is_done(
    engine: sa.Engine, threads: Threads
) -> None:
    gate = Gate()
    gate.closed = False
    mediator = make_mediator(threads, gate, SqlAlchemyModule(engine=engine))
    send = asyncio.ensure_future(mediator.send(Open(email="a@x")))
    assert await asyncio.to_thread(gate.wrote.wait, WAIT)

    send.cancel()
    gate.go.set()
    with pytest.raises(asyncio.CancelledError):
        await send

    # The rollback waited for the abandoned handler, on its thread.
    assert rows(engine, threads) == 0
    assert threads.names() == ["handler", "returned", "rollback", "closed"]
    assert len(threads.threads()) == 1
