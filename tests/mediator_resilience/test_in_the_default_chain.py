"""Retry inside the default chain: once-per-request behaviors, per-attempt transactions,
on SQLite and on a real PostgreSQL serialization conflict."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest
import sqlalchemy as sa
from injector import Binder, Injector, Module, inject
from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

from mediator import (
    AuditRecord,
    AuditSink,
    Command,
    CommandHandler,
    FieldError,
    Mediator,
    MediatorModule,
    Policy,
    Principal,
    TransientDatabaseError,
    UnitOfWork,
    Validator,
    acting_as,
    authorize,
    transactional,
)
from mediator.sqlalchemy import SqlAlchemyModule
from mediator_resilience import (
    ResilienceMediatorModule,
    ResilienceMediatorOptions,
    retryable,
)
from mediator_resilience.testing import FakeClock

pytestmark = pytest.mark.anyio

COUNTS: dict[str, int] = {}


def count(name: str) -> None:
    COUNTS[name] = COUNTS.get(name, 0) + 1


class Anyone(Policy["Restock"]):
    def allows(self, principal: Principal, request: Restock) -> bool:
        count("authorization")
        return True


@retryable
@transactional
@authorize(policies=[Anyone])
class Restock(Command[str]):
    sku: str


class RestockValidator(Validator[Restock]):
    def validate(self, request: Restock) -> list[FieldError]:
        count("validation")
        return []


class RestockHandler(CommandHandler[Restock, str]):
    def handle(self, request: Restock) -> str:
        count("handler")
        if COUNTS["handler"] < 3:
            raise ConnectionError("flaky")
        return "restocked"


class CountingUnit:
    def savepoint(self) -> CountingUnit:
        return CountingUnit()

    def begin(self) -> None:
        count("begin")

    def commit(self) -> None:
        count("commit")

    def rollback(self) -> None:
        count("rollback")

    def translate_error(self, error: BaseException) -> BaseException:
        return error


class CountingSink:
    def is_enabled(self) -> bool:
        return True

    def write(self, record: AuditRecord) -> None:
        count("audit")


class Fakes(Module):
    def configure(self, binder: Binder) -> None:
        binder.bind(UnitOfWork, to=CountingUnit)
        binder.bind(AuditSink, to=CountingSink())


def resilience(clock: FakeClock | None = None) -> ResilienceMediatorModule:
    return ResilienceMediatorModule(
        ResilienceMediatorOptions(use_jitter=False),
        clock=clock or FakeClock(),
        random=random.Random(1).random,
    )


@pytest.mark.parametrize("resilience_first", [True, False])
def test_retry_runs_inside_the_once_per_request_behaviors_and_outside_the_transaction(
    resilience_first: bool,
) -> None:
    COUNTS.clear()
    mediator_module = MediatorModule(
        lambda m: (
            m.add_validator(RestockValidator).add_handler(RestockHandler).use_defaults()
        )
    )
    modules: list[Any] = [mediator_module, resilience(), Fakes()]
    if resilience_first:
        modules.reverse()
    mediator = Injector(modules).get(Mediator)

    with acting_as(Principal("clerk")):
        assert mediator.send_sync(Restock(sku="apple")) == "restocked"

    assert COUNTS == {
        "audit": 1,
        "validation": 1,
        "authorization": 1,
        "begin": 3,
        "handler": 3,
        "rollback": 2,
        "commit": 1,
    }


# --- SQLite: the failed attempts leave no rows ----------------------------------


class Base(DeclarativeBase):
    pass


class Shipment(Base):
    __tablename__ = "retry_shipments"

    id: Mapped[int] = mapped_column(primary_key=True)
    sku: Mapped[str]
    balance: Mapped[int] = mapped_column(default=0)


@retryable
@transactional
class Ship(Command[int]):
    sku: str


class ShipHandler(CommandHandler[Ship, int]):
    failures: ClassVar[int] = 0

    @inject
    def __init__(self, session: Session) -> None:
        self.session = session

    def handle(self, request: Ship) -> int:
        shipment = Shipment(sku=request.sku)
        self.session.add(shipment)
        self.session.flush()  # the row exists in this attempt's transaction
        if ShipHandler.failures < 2:
            ShipHandler.failures += 1
            raise TransientDatabaseError("database is locked")
        return shipment.id


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[sa.Engine]:
    engine = sa.create_engine(f"sqlite:///{tmp_path / 'retry.db'}")
    Base.metadata.create_all(engine)
    yield engine
    engine.dispose()


def test_failed_attempts_leave_no_rows_on_sqlite(engine: sa.Engine) -> None:
    ShipHandler.failures = 0
    clock = FakeClock()
    module = MediatorModule(lambda m: m.add_handler(ShipHandler).use_defaults())
    mediator = Injector(
        [module, SqlAlchemyModule(engine=engine), resilience(clock)]
    ).get(Mediator)

    mediator.send_sync(Ship(sku="pear"))

    with Session(engine) as session:
        assert [s.sku for s in session.scalars(sa.select(Shipment))] == ["pear"]
    assert clock.sleeps == pytest.approx([0.2, 0.4])


def test_failed_attempts_leave_no_rows_on_postgres(postgres_url: str) -> None:
    ShipHandler.failures = 0
    engine = sa.create_engine(postgres_url)
    Base.metadata.drop_all(engine)
    Base.metadata.create_all(engine)
    try:
        module = MediatorModule(lambda m: m.add_handler(ShipHandler).use_defaults())
        mediator = Injector(
            [module, SqlAlchemyModule(engine=engine), resilience()]
        ).get(Mediator)

        mediator.send_sync(Ship(sku="plum"))

        with Session(engine) as session:
            assert [s.sku for s in session.scalars(sa.select(Shipment))] == ["plum"]
    finally:
        Base.metadata.drop_all(engine)
        engine.dispose()


# --- PostgreSQL: a real serialization conflict, resolved by retry ---------------


@retryable
@transactional
class AddStock(Command[int]):
    shipment_id: int
    amount: int
    gate: str


GATES: dict[str, tuple[asyncio.Event, asyncio.Event]] = {}
ATTEMPTS: dict[str, int] = {}


class AddStockHandler(CommandHandler[AddStock, int]):
    @inject
    def __init__(self, session: AsyncSession) -> None:
        self.session = session

    async def handle(self, request: AddStock) -> int:
        ATTEMPTS[request.gate] = ATTEMPTS.get(request.gate, 0) + 1
        shipment = await self.session.get_one(Shipment, request.shipment_id)
        balance = shipment.balance
        if ATTEMPTS[request.gate] == 1:  # only the first attempts wait for each other
            read, go = GATES[request.gate]
            read.set()
            await go.wait()
        shipment.balance = balance + request.amount
        await self.session.flush()
        return shipment.balance


async def test_a_serialization_conflict_ends_with_both_commands_committed(
    postgres_url: str,
) -> None:
    engine = create_async_engine(postgres_url, isolation_level="SERIALIZABLE")
    async with engine.begin() as connection:
        await connection.run_sync(Base.metadata.drop_all)
        await connection.run_sync(Base.metadata.create_all)
        await connection.execute(
            sa.insert(Shipment).values(id=1, sku="fig", balance=100)
        )
    GATES.clear()
    ATTEMPTS.clear()
    GATES.update(
        first=(asyncio.Event(), asyncio.Event()),
        second=(asyncio.Event(), asyncio.Event()),
    )
    clock = FakeClock()
    module = MediatorModule(lambda m: m.add_handler(AddStockHandler).use_defaults())
    mediator = Injector(
        [module, SqlAlchemyModule(async_engine=engine), resilience(clock)]
    ).get(Mediator)
    try:
        async with asyncio.timeout(20):
            first = asyncio.create_task(
                mediator.send(AddStock(shipment_id=1, amount=10, gate="first"))
            )
            second = asyncio.create_task(
                mediator.send(AddStock(shipment_id=1, amount=20, gate="second"))
            )
            await GATES["first"][0].wait()
            await GATES["second"][
                0
            ].wait()  # both read 100 in SERIALIZABLE transactions
            GATES["first"][1].set()
            assert await first == 110
            GATES["second"][1].set()
            assert await second == 130  # refused once (40001), then retried afresh

        assert ATTEMPTS == {"first": 1, "second": 2}
        assert clock.sleeps == pytest.approx([0.2])
        async with engine.connect() as connection:
            balance = await connection.scalar(
                sa.select(Shipment.balance).where(Shipment.id == 1)
            )
        assert balance == 130
    finally:
        async with engine.begin() as connection:
            await connection.run_sync(Base.metadata.drop_all)
        await engine.dispose()
