"""The unit of work against a real PostgreSQL: commit, rollback, conflicts, and a
genuine serialization failure surfacing as the transient error."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator

import pytest
import sqlalchemy as sa
from injector import Injector, inject
from sqlalchemy import exc
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, create_async_engine
from sqlalchemy.orm import Session

from mediator import (
    Command,
    CommandHandler,
    ConflictError,
    Mediator,
    MediatorModule,
    TransientDatabaseError,
    transactional,
)
from mediator.sqlalchemy import SqlAlchemyModule
from tests.mediator._support.shop_db import (
    ASYNC_HANDLERS,
    SYNC_HANDLERS,
    Account,
    AddEntry,
    Base,
    Boom,
    Entry,
    OpenAccount,
    OpenAccountAsync,
    OpenWithEntry,
    count_rows,
)

pytestmark = pytest.mark.anyio


@pytest.fixture
def engine(postgres_url: str) -> Iterator[sa.Engine]:
    engine = sa.create_engine(postgres_url)
    Base.metadata.drop_all(engine)
    Base.metadata.create_all(engine)
    yield engine
    Base.metadata.drop_all(engine)
    engine.dispose()


@pytest.fixture
async def async_engine(postgres_url: str) -> AsyncIterator[AsyncEngine]:
    engine = create_async_engine(postgres_url, isolation_level="SERIALIZABLE")
    async with engine.begin() as connection:
        await connection.run_sync(Base.metadata.drop_all)
        await connection.run_sync(Base.metadata.create_all)
    yield engine
    async with engine.begin() as connection:
        await connection.run_sync(Base.metadata.drop_all)
    await engine.dispose()


def sync_mediator(engine: sa.Engine) -> Mediator:
    module = MediatorModule(lambda m: m.add_handler(*SYNC_HANDLERS).use_defaults())
    return Injector([module, SqlAlchemyModule(engine=engine)]).get(Mediator)


def test_commit_rollback_and_nested_join_on_postgres(engine: sa.Engine) -> None:
    mediator = sync_mediator(engine)

    kept = mediator.send_sync(OpenAccount(email="kept@example.org"))
    with pytest.raises(Boom):
        mediator.send_sync(OpenAccount(email="lost@example.org", fail_after_write=True))
    mediator.send_sync(OpenWithEntry(email="nested@example.org"))
    with pytest.raises(Boom):
        mediator.send_sync(OpenWithEntry(email="gone@example.org", fail_at_end=True))

    with Session(engine) as session:
        emails = sorted(session.scalars(sa.select(Account.email)))
        assert emails == ["kept@example.org", "nested@example.org"]
        assert count_rows(session, Entry) == 1
        assert session.get(Account, kept) is not None


def test_unique_and_foreign_key_violations_are_conflicts_on_postgres(
    engine: sa.Engine,
) -> None:
    mediator = sync_mediator(engine)
    mediator.send_sync(OpenAccount(email="dup@example.org"))

    with pytest.raises(ConflictError, match="unique constraint") as unique:
        mediator.send_sync(OpenAccount(email="dup@example.org"))
    with pytest.raises(ConflictError, match="foreign key constraint") as foreign:
        mediator.send_sync(AddEntry(account_id=404, note="orphan"))

    assert isinstance(unique.value.__cause__, exc.IntegrityError)
    assert isinstance(foreign.value.__cause__, exc.IntegrityError)
    assert "dup@example.org" not in str(unique.value)


async def test_the_async_path_commits_and_rolls_back_on_postgres(
    async_engine: AsyncEngine,
) -> None:
    module = MediatorModule(lambda m: m.add_handler(*ASYNC_HANDLERS).use_defaults())
    mediator = Injector([module, SqlAlchemyModule(async_engine=async_engine)]).get(
        Mediator
    )

    await mediator.send(OpenAccountAsync(email="kept@example.org"))
    with pytest.raises(Boom):
        await mediator.send(
            OpenAccountAsync(email="lost@example.org", fail_after_write=True)
        )

    async with async_engine.connect() as connection:
        emails = (await connection.scalars(sa.select(Account.email))).all()
    assert emails == ["kept@example.org"]


@transactional
class Deposit(Command[int]):
    """Reads the balance, waits at a gate, then writes balance + amount."""

    account_id: int
    amount: int
    gate: str


GATES: dict[str, tuple[asyncio.Event, asyncio.Event]] = {}


class DepositHandler(CommandHandler[Deposit, int]):
    @inject
    def __init__(self, session: AsyncSession) -> None:
        self.session = session

    async def handle(self, request: Deposit) -> int:
        read, go = GATES[request.gate]
        account = await self.session.get_one(Account, request.account_id)
        balance = account.balance
        read.set()  # this transaction has read the row
        await go.wait()  # until the test lets it write
        account.balance = balance + request.amount
        await self.session.flush()
        return account.balance


async def test_a_serialization_failure_surfaces_as_the_transient_error(
    async_engine: AsyncEngine,
) -> None:
    module = MediatorModule(lambda m: m.add_handler(DepositHandler).use_defaults())
    mediator = Injector([module, SqlAlchemyModule(async_engine=async_engine)]).get(
        Mediator
    )
    async with async_engine.begin() as connection:
        await connection.execute(
            sa.insert(Account).values(id=1, email="acc@example.org", balance=100)
        )
    GATES.clear()
    GATES["first"] = (asyncio.Event(), asyncio.Event())
    GATES["second"] = (asyncio.Event(), asyncio.Event())

    async with asyncio.timeout(20):
        first = asyncio.create_task(
            mediator.send(Deposit(account_id=1, amount=10, gate="first"))
        )
        second = asyncio.create_task(
            mediator.send(Deposit(account_id=1, amount=20, gate="second"))
        )
        await GATES["first"][0].wait()
        await GATES["second"][0].wait()  # both SERIALIZABLE transactions read 100
        GATES["first"][1].set()
        assert await first == 110  # the first writer commits
        GATES["second"][1].set()
        with pytest.raises(
            TransientDatabaseError, match="serialization failure"
        ) as caught:
            await second

    assert isinstance(caught.value.__cause__, exc.OperationalError)
    assert getattr(caught.value.__cause__.orig, "sqlstate", None) == "40001"
    async with async_engine.connect() as connection:
        balance = await connection.scalar(
            sa.select(Account.balance).where(Account.id == 1)
        )
    assert balance == 110  # the refused attempt wrote nothing
