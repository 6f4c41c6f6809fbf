"""TransactionBehavior and mediator.sqlalchemy on SQLite, sync and async."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from injector import Injector, Module, inject
from sqlalchemy import event, exc
from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine
from sqlalchemy.orm import Session

from mediator import (
    Command,
    CommandHandler,
    ConfigurationError,
    ConflictError,
    Mediator,
    MediatorModule,
    Next,
    Stage,
    SyncNext,
    SyncPathError,
    TransientDatabaseError,
    UnitOfWork,
    UnresolvableDependencyError,
    in_unit_of_work,
    is_transactional,
    transactional,
)
from mediator.sqlalchemy import SqlAlchemyModule, prepare_sqlite
from tests.mediator._support.shop_db import (
    ASYNC_HANDLERS,
    SYNC_HANDLERS,
    Account,
    AddEntry,
    Base,
    Boom,
    CountAccounts,
    Entry,
    OpenAccount,
    OpenAccountAsync,
    OpenWithEntry,
    count_rows,
)

pytestmark = pytest.mark.anyio


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[sa.Engine]:
    engine = sa.create_engine(f"sqlite:///{tmp_path / 'shop.db'}")
    prepare_sqlite(engine)
    Base.metadata.create_all(engine)
    yield engine
    engine.dispose()


def make_mediator(
    engine: sa.Engine, *extra: Module, behaviors: tuple[Any, ...] = ()
) -> Mediator:
    module = MediatorModule(
        lambda m: m.add_handler(*SYNC_HANDLERS).add_behavior(*behaviors).use_defaults()
    )
    return Injector([module, SqlAlchemyModule(engine=engine), *extra]).get(Mediator)


def rows(engine: sa.Engine, model: type[Base]) -> int:
    with Session(engine) as session:
        return count_rows(session, model)


def test_a_transactional_command_is_committed(engine: sa.Engine) -> None:
    mediator = make_mediator(engine)

    account_id = mediator.send_sync(OpenAccount(email="ada@example.org"))

    with Session(engine) as session:
        assert session.get(Account, account_id) is not None


def test_a_failure_rolls_the_writes_back_and_is_raised_unchanged(
    engine: sa.Engine,
) -> None:
    mediator = make_mediator(engine)

    with pytest.raises(Boom, match="after the write"):
        mediator.send_sync(OpenAccount(email="ada@example.org", fail_after_write=True))

    assert rows(engine, Account) == 0


def test_a_nested_send_joins_the_outer_transaction(engine: sa.Engine) -> None:
    commits: list[object] = []
    event.listen(engine, "commit", commits.append)
    mediator = make_mediator(engine)

    mediator.send_sync(OpenWithEntry(email="grace@example.org"))

    assert (rows(engine, Account), rows(engine, Entry)) == (1, 1)
    assert len(commits) == 1  # the nested AddEntry did not commit on its own


def test_a_failure_after_a_nested_send_rolls_back_both(engine: sa.Engine) -> None:
    mediator = make_mediator(engine)

    with pytest.raises(Boom):
        mediator.send_sync(OpenWithEntry(email="grace@example.org", fail_at_end=True))

    assert (rows(engine, Account), rows(engine, Entry)) == (0, 0)


class TryTwice:
    """A stand-in for retry: on a failure, runs the rest of the chain once more."""

    stage = Stage.RETRY
    failures: list[str]

    def __init__(self) -> None:
        self.failures = []

    async def handle(self, request: Any, next: Next[Any]) -> Any:
        try:
            return await next()
        except Exception as error:
            self.failures.append(type(error).__name__)
            return await next()

    def handle_sync(self, request: Any, next: SyncNext[Any]) -> Any:
        try:
            return next()
        except Exception as error:
            self.failures.append(type(error).__name__)
            return next()


@transactional
class FlakyOpen(Command[int]):
    email: str


ATTEMPTS: list[int] = []


class FlakyOpenHandler(CommandHandler[FlakyOpen, int]):
    """Fails its first attempt after writing; records what each attempt sees."""

    @inject
    def __init__(self, session: Session) -> None:
        self.session = session

    def handle(self, request: FlakyOpen) -> int:
        ATTEMPTS.append(count_rows(self.session, Account))
        self.session.add(Account(email=f"{request.email}-{len(ATTEMPTS)}"))
        self.session.flush()
        if len(ATTEMPTS) == 1:
            raise Boom("first attempt")
        return len(ATTEMPTS)


def test_each_attempt_runs_in_its_own_transaction(engine: sa.Engine) -> None:
    ATTEMPTS.clear()
    attempts = ATTEMPTS
    retry = TryTwice()
    module = MediatorModule(
        lambda m: m.add_handler(FlakyOpenHandler).add_behavior(retry).use_defaults()
    )
    mediator = Injector([module, SqlAlchemyModule(engine=engine)]).get(Mediator)

    assert mediator.send_sync(FlakyOpen(email="x")) == 2

    assert retry.failures == ["Boom"]
    assert attempts == [0, 0]  # the second attempt did not see the first one's write
    with Session(engine) as session:
        assert [a.email for a in session.scalars(sa.select(Account))] == ["x-2"]


def test_a_unique_violation_is_a_conflict_with_the_driver_error_as_cause(
    engine: sa.Engine,
) -> None:
    mediator = make_mediator(engine)
    mediator.send_sync(OpenAccount(email="dup@example.org"))

    with pytest.raises(
        ConflictError, match=r"conflicts with existing data \(unique"
    ) as caught:
        mediator.send_sync(OpenAccount(email="dup@example.org"))

    assert isinstance(caught.value.__cause__, exc.IntegrityError)
    assert "dup@example.org" not in str(caught.value)  # values stay in the cause
    assert rows(engine, Account) == 1


def test_a_foreign_key_violation_is_a_conflict(engine: sa.Engine) -> None:
    mediator = make_mediator(engine)

    with pytest.raises(ConflictError, match="foreign key"):
        mediator.send_sync(AddEntry(account_id=404, note="orphan"))

    assert rows(engine, Entry) == 0


def test_a_locked_database_is_a_transient_error(tmp_path: Path) -> None:
    path = tmp_path / "locked.db"
    engine = sa.create_engine(f"sqlite:///{path}", connect_args={"timeout": 0.05})
    prepare_sqlite(engine)
    Base.metadata.create_all(engine)
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")  # another writer holds the write lock
    try:
        mediator = make_mediator(engine)
        with pytest.raises(
            TransientDatabaseError, match="database is locked"
        ) as caught:
            mediator.send_sync(OpenAccount(email="late@example.org"))
        assert isinstance(caught.value.__cause__, exc.OperationalError)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
        engine.dispose()


def test_eight_concurrent_writers_never_hit_a_locked_database(
    engine: sa.Engine,
) -> None:
    mediator = make_mediator(engine)
    failures: list[BaseException] = []
    start = threading.Barrier(8)

    def writer(index: int) -> None:
        start.wait(timeout=10)
        for n in range(25):
            try:
                # Read, then write: the pattern that deadlocks under a deferred BEGIN.
                mediator.send_sync(CountAccounts())
                mediator.send_sync(OpenAccount(email=f"w{index}-{n}@example.org"))
            except BaseException as error:
                failures.append(error)

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)

    assert failures == []
    assert rows(engine, Account) == 200


def test_the_session_is_closed_when_the_send_ends(engine: sa.Engine) -> None:
    mediator = make_mediator(engine)

    assert mediator.send_sync(CountAccounts()) == 0  # a read, not in a unit of work

    assert engine.pool.checkedout() == 0  # type: ignore[attr-defined]


def test_a_transactional_request_needs_a_unit_of_work() -> None:
    class Plain(CommandHandler[FlakyOpen, int]):
        def handle(self, request: FlakyOpen) -> int:
            return 0

    module = MediatorModule(lambda m: m.add_handler(Plain).use_defaults())

    with pytest.raises(
        ConfigurationError,
        match=r"FlakyOpen \(module .*\) is @transactional but no UnitOfWork",
    ):
        Injector([module]).get(Mediator)


def test_a_handler_needing_a_session_without_the_module_is_named() -> None:
    module = MediatorModule(lambda m: m.add_handler(*SYNC_HANDLERS).use_defaults())

    with pytest.raises(
        UnresolvableDependencyError, match="OpenAccountHandler -> Session"
    ):
        Injector([module]).get(Mediator)


def test_transactional_is_a_bare_marker_on_request_classes() -> None:
    class Child(OpenAccount):
        pass

    assert is_transactional(OpenAccount)
    assert is_transactional(Child(email="c"))  # inherited, and asked of instances
    assert not is_transactional(CountAccounts)
    with pytest.raises(TypeError, match="bare class decorator"):
        transactional()
    with pytest.raises(TypeError, match="bare class decorator"):
        transactional("yes")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="goes on Command or Query classes"):
        transactional(int)


# --- async, on aiosqlite --------------------------------------------------------


async def test_the_async_path_commits_and_rolls_back(tmp_path: Path) -> None:
    engine = create_async_engine(f"sqlite+aiosqlite:///{tmp_path / 'async.db'}")
    async with engine.begin() as connection:
        await connection.run_sync(Base.metadata.create_all)
    module = MediatorModule(lambda m: m.add_handler(*ASYNC_HANDLERS).use_defaults())
    mediator = Injector([module, SqlAlchemyModule(async_engine=engine)]).get(Mediator)
    try:
        kept = await mediator.send(OpenAccountAsync(email="kept@example.org"))
        with pytest.raises(Boom):
            await mediator.send(
                OpenAccountAsync(email="lost@example.org", fail_after_write=True)
            )
        with pytest.raises(ConflictError):
            await mediator.send(OpenAccountAsync(email="kept@example.org"))

        async with engine.connect() as connection:
            emails = (
                await connection.execute(sa.select(Account.id, Account.email))
            ).all()
        assert [tuple(row) for row in emails] == [(kept, "kept@example.org")]
    finally:
        await engine.dispose()


async def test_eight_concurrent_async_writers_never_hit_a_locked_database(
    tmp_path: Path,
) -> None:
    engine = create_async_engine(f"sqlite+aiosqlite:///{tmp_path / 'busy.db'}")
    async with engine.begin() as connection:
        await connection.run_sync(Base.metadata.create_all)
    module = MediatorModule(lambda m: m.add_handler(*ASYNC_HANDLERS).use_defaults())
    mediator = Injector([module, SqlAlchemyModule(async_engine=engine)]).get(Mediator)

    async def writer(index: int) -> None:
        for n in range(25):
            await mediator.send(OpenAccountAsync(email=f"a{index}-{n}@example.org"))

    try:
        async with asyncio.timeout(60):
            await asyncio.gather(*(writer(i) for i in range(8)))
        async with engine.connect() as connection:
            total = await connection.scalar(
                sa.select(sa.func.count()).select_from(Account)
            )
        assert total == 200
    finally:
        await engine.dispose()


async def test_the_async_path_runs_a_sync_unit_of_work_when_no_async_one_is_bound(
    engine: sa.Engine,
) -> None:
    mediator = make_mediator(engine)

    await mediator.send(OpenAccount(email="kept@example.org"))
    with pytest.raises(Boom):
        await mediator.send(
            OpenAccount(email="lost@example.org", fail_after_write=True)
        )
    with pytest.raises(ConflictError):
        await mediator.send(OpenAccount(email="kept@example.org"))

    assert rows(engine, Account) == 1


# --- nested sends: a savepoint per attempt ---------------------------------------


@transactional
class Nest(Command[None]):
    """Writes `name`, then sends `then` (the next level), if any."""

    names: tuple[str, ...]


INNER_ATTEMPTS: list[bool] = []  # whether each attempt ran inside a unit of work


class NestHandler(CommandHandler[Nest, None]):
    """The last level fails its first attempt after writing."""

    @inject
    def __init__(self, session: Session, mediator: Mediator) -> None:
        self.session = session
        self.mediator = mediator

    def handle(self, request: Nest) -> None:
        name, *rest = request.names
        if rest:
            self.session.add(Account(email=name))
            self.session.flush()
            self.mediator.send_sync(Nest(names=tuple(rest)))
            return
        INNER_ATTEMPTS.append(in_unit_of_work())
        self.session.add(Account(email=f"{name}-{len(INNER_ATTEMPTS)}"))
        self.session.flush()
        if len(INNER_ATTEMPTS) == 1:
            raise Boom("first nested attempt")


@transactional
class NestAsync(Command[None]):
    names: tuple[str, ...]


class NestAsyncHandler(CommandHandler[NestAsync, None]):
    @inject
    def __init__(self, session: AsyncSession, mediator: Mediator) -> None:
        self.session = session
        self.mediator = mediator

    async def handle(self, request: NestAsync) -> None:
        name, *rest = request.names
        if rest:
            self.session.add(Account(email=name))
            await self.session.flush()
            await self.mediator.send(NestAsync(names=tuple(rest)))
            return
        INNER_ATTEMPTS.append(in_unit_of_work())
        self.session.add(Account(email=f"{name}-{len(INNER_ATTEMPTS)}"))
        await self.session.flush()
        if len(INNER_ATTEMPTS) == 1:
            raise Boom("first nested attempt")


def emails(engine: sa.Engine) -> list[str]:
    with Session(engine) as session:
        return sorted(session.scalars(sa.select(Account.email)))


@pytest.mark.parametrize(
    ("names", "kept"),
    [
        (("outer", "inner"), ["inner-2", "outer"]),
        (("outer", "middle", "inner"), ["inner-2", "middle", "outer"]),
    ],
)
def test_a_retried_nested_attempt_rolls_back_to_its_savepoint(
    engine: sa.Engine, names: tuple[str, ...], kept: list[str]
) -> None:
    INNER_ATTEMPTS.clear()
    statements: list[str] = []
    event.listen(
        engine, "before_cursor_execute", lambda *args: statements.append(args[2])
    )
    retry = TryTwice()
    module = MediatorModule(
        lambda m: m.add_handler(NestHandler).add_behavior(retry).use_defaults()
    )
    mediator = Injector([module, SqlAlchemyModule(engine=engine)]).get(Mediator)

    mediator.send_sync(Nest(names=names))

    assert retry.failures == ["Boom"]  # the innermost send's, retried there
    assert INNER_ATTEMPTS == [True, True]
    assert emails(engine) == kept
    assert any(s.startswith("ROLLBACK TO SAVEPOINT") for s in statements)
    assert not in_unit_of_work()


async def test_a_retried_nested_async_attempt_rolls_back_to_its_savepoint(
    tmp_path: Path,
) -> None:
    INNER_ATTEMPTS.clear()
    async_engine = create_async_engine(f"sqlite+aiosqlite:///{tmp_path / 'n.db'}")
    async with async_engine.begin() as connection:
        await connection.run_sync(Base.metadata.create_all)
    retry = TryTwice()
    module = MediatorModule(
        lambda m: m.add_handler(NestAsyncHandler).add_behavior(retry).use_defaults()
    )
    mediator = Injector([module, SqlAlchemyModule(async_engine=async_engine)]).get(
        Mediator
    )
    try:
        await mediator.send(NestAsync(names=("outer", "middle", "inner")))

        async with async_engine.connect() as connection:
            kept = sorted(await connection.scalars(sa.select(Account.email)))
        assert kept == ["inner-2", "middle", "outer"]
        assert retry.failures == ["Boom"]
    finally:
        await async_engine.dispose()


async def test_the_async_path_takes_savepoints_of_a_sync_unit_of_work(
    engine: sa.Engine,
) -> None:
    INNER_ATTEMPTS.clear()
    retry = TryTwice()
    module = MediatorModule(
        lambda m: m.add_handler(NestHandler).add_behavior(retry).use_defaults()
    )
    mediator = Injector([module, SqlAlchemyModule(engine=engine)]).get(Mediator)

    await mediator.send(Nest(names=("outer", "inner")))

    assert emails(engine) == ["inner-2", "outer"]


class FailingSavepoint:
    """A unit of work whose savepoints cannot be rolled back to."""

    def __init__(self, trace: list[str], depth: int = 0) -> None:
        self.trace = trace
        self.depth = depth

    def begin(self) -> None:
        self.trace.append(f"begin {self.depth}")

    def commit(self) -> None:
        self.trace.append(f"commit {self.depth}")

    def rollback(self) -> None:
        self.trace.append(f"rollback {self.depth}")
        if self.depth:
            raise OSError("connection reset")

    def savepoint(self) -> FailingSavepoint:
        return FailingSavepoint(self.trace, self.depth + 1)

    def translate_error(self, error: BaseException) -> BaseException:
        return error


@transactional
class Plain(Command[None]):
    nested: bool


class PlainHandler(CommandHandler[Plain, None]):
    @inject
    def __init__(self, mediator: Mediator) -> None:
        self.mediator = mediator

    def handle(self, request: Plain) -> None:
        if request.nested:
            self.mediator.send_sync(Plain(nested=False))
            return
        raise Boom("nested")


def test_a_savepoint_that_cannot_be_rolled_back_to_loses_the_transaction() -> None:
    trace: list[str] = []

    class Units(Module):
        def configure(self, binder: Any) -> None:
            binder.bind(UnitOfWork, to=lambda: FailingSavepoint(trace))

    module = MediatorModule(lambda m: m.add_handler(PlainHandler).use_defaults())
    mediator = Injector([module, Units()]).get(Mediator)

    with pytest.raises(TransientDatabaseError) as caught:
        mediator.send_sync(Plain(nested=True))

    assert str(caught.value) == (
        "the transaction was lost, try again (rolling back to a savepoint failed)"
    )
    assert isinstance(caught.value.__cause__, Boom)
    assert caught.value.__cause__.__notes__ == [
        "rolling back also failed: OSError: connection reset"
    ]
    assert trace == ["begin 0", "begin 1", "rollback 1", "rollback 0"]


async def test_send_sync_inside_an_async_unit_of_work_is_refused(
    tmp_path: Path,
) -> None:
    @transactional
    class Outer(Command[None]):
        pass

    class OuterHandler(CommandHandler[Outer, None]):
        @inject
        def __init__(self, mediator: Mediator) -> None:
            self.mediator = mediator

        async def handle(self, request: Outer) -> None:
            self.mediator.send_sync(Plain(nested=False))

    async_engine = create_async_engine(f"sqlite+aiosqlite:///{tmp_path / 's.db'}")
    module = MediatorModule(
        lambda m: m.add_handler(OuterHandler, PlainHandler).use_defaults()
    )
    mediator = Injector(
        [
            module,
            SqlAlchemyModule(
                engine=sa.create_engine("sqlite://"), async_engine=async_engine
            ),
        ]
    ).get(Mediator)
    try:
        with pytest.raises(
            SyncPathError, match=r"Plain is @transactional and was sent"
        ):
            await mediator.send(Outer())
    finally:
        await async_engine.dispose()


@transactional
class PlainAsync(Command[None]):
    nested: bool


class PlainAsyncHandler(CommandHandler[PlainAsync, None]):
    @inject
    def __init__(self, mediator: Mediator) -> None:
        self.mediator = mediator

    async def handle(self, request: PlainAsync) -> None:
        if request.nested:
            await self.mediator.send(PlainAsync(nested=False))
            return
        raise Boom("nested")


async def test_an_async_savepoint_that_cannot_be_rolled_back_to_loses_it() -> None:
    trace: list[str] = []

    class Units(Module):
        def configure(self, binder: Any) -> None:
            binder.bind(UnitOfWork, to=lambda: FailingSavepoint(trace))

    module = MediatorModule(lambda m: m.add_handler(PlainAsyncHandler).use_defaults())
    mediator = Injector([module, Units()]).get(Mediator)

    with pytest.raises(TransientDatabaseError, match="the transaction was lost"):
        await mediator.send(PlainAsync(nested=True))

    assert trace == ["begin 0", "begin 1", "rollback 1", "rollback 0"]


@transactional
class Stops(Command[None]):
    pass


class StopsHandler(CommandHandler[Stops, None]):
    def handle(self, request: Stops) -> None:
        raise StopIteration("from the handler")


def test_a_failure_passes_through_the_unit_of_work_as_it_is() -> None:
    trace: list[str] = []

    class Units(Module):
        def configure(self, binder: Any) -> None:
            binder.bind(UnitOfWork, to=lambda: FailingSavepoint(trace))

    module = MediatorModule(lambda m: m.add_handler(StopsHandler).use_defaults())
    mediator = Injector([module, Units()]).get(Mediator)

    # Even a StopIteration, which a generator would turn into a RuntimeError.
    with pytest.raises(StopIteration, match="from the handler"):
        mediator.send_sync(Stops())

    assert trace == ["begin 0", "rollback 0"]
