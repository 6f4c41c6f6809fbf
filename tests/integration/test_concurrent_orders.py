"""Issue 24's proof: no unit of work holds a lock across a call to another service.

Ten `@transactional` orders are sent at once. Each handler reads, then awaits a fake
dependency that waits on a barrier of ten, then writes. The barrier fills only if all
ten handlers are inside the call at the same time: a unit of work holding SQLite's
write lock (or an open PostgreSQL transaction on the rows it reads) across the call
would let one in and leave nine queued, and the barrier would time out. On a SQLite
file (aiosqlite, sqlite3) and PostgreSQL (psycopg async and sync), the async path and
the sync path on threads; with `@idempotent`, ten keys at once, and one key ten times
at once, which has one effect.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from injector import Injector, inject
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, create_async_engine
from sqlalchemy.orm import Session

from mediator import (
    Command,
    CommandHandler,
    ConflictError,
    Mediator,
    MediatorModule,
    Principal,
    acting_as,
    idempotent,
    transactional,
)
from mediator.sqlalchemy import SqlAlchemyModule, idempotency_table

pytestmark = pytest.mark.anyio

SHOP = Principal(id="shop")  # keyed orders are scoped by their caller

ORDERS = 10
# Generous, and below the test's own timeout, so that a stuck barrier says so.
BARRIER_TIMEOUT = 45.0

metadata = sa.MetaData()
orders = sa.Table(
    "concurrent_orders",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("sku", sa.String(20), nullable=False),
    sa.Column("customer", sa.String(40), nullable=False),
)
stock = sa.Table(
    "concurrent_stock",
    metadata,
    sa.Column("sku", sa.String(20), primary_key=True),
    sa.Column("price", sa.Integer, nullable=False),
)


class Dependency:
    """The other service: each call waits until `parties` calls are inside at once."""

    def __init__(self, parties: int) -> None:
        self.parties = parties
        self.barrier = asyncio.Barrier(parties)
        self.threads = threading.Barrier(parties, timeout=BARRIER_TIMEOUT)
        self.calls = 0

    async def call(self) -> None:
        self.calls += 1
        async with asyncio.timeout(BARRIER_TIMEOUT):
            await self.barrier.wait()

    def call_sync(self) -> None:
        self.calls += 1
        self.threads.wait()


DEPENDENCY: dict[str, Dependency] = {}


@transactional
class PlaceOrder(Command[int]):
    sku: str
    customer: str


@transactional
class PlaceOrderSync(Command[int]):
    sku: str
    customer: str


@idempotent(key="request_id")
@transactional
class PlaceKeyedOrder(Command[int]):
    request_id: str
    sku: str
    customer: str


class PlaceOrderHandler(CommandHandler[PlaceOrder, int]):
    @inject
    def __init__(self, session: AsyncSession) -> None:
        self.session = session

    async def handle(self, request: PlaceOrder) -> int:
        await place_async(self.session, request.sku, request.customer)
        return 0


class PlaceKeyedOrderHandler(CommandHandler[PlaceKeyedOrder, int]):
    @inject
    def __init__(self, session: AsyncSession) -> None:
        self.session = session

    async def handle(self, request: PlaceKeyedOrder) -> int:
        return await place_async(self.session, request.sku, request.customer)


async def place_async(session: AsyncSession, sku: str, customer: str) -> int:
    price = await session.scalar(sa.select(stock.c.price).where(stock.c.sku == sku))
    assert price is not None  # the read, before the call
    await DEPENDENCY["payments"].call()
    inserted = await session.execute(
        sa.insert(orders).values(sku=sku, customer=customer).returning(orders.c.id)
    )
    return int(inserted.scalar_one())


class PlaceOrderSyncHandler(CommandHandler[PlaceOrderSync, int]):
    @inject
    def __init__(self, session: Session) -> None:
        self.session = session

    def handle(self, request: PlaceOrderSync) -> int:
        price = self.session.scalar(
            sa.select(stock.c.price).where(stock.c.sku == request.sku)
        )
        assert price is not None
        DEPENDENCY["payments"].call_sync()
        inserted = self.session.execute(
            sa.insert(orders)
            .values(sku=request.sku, customer=request.customer)
            .returning(orders.c.id)
        )
        return int(inserted.scalar_one())


@dataclass
class Database:
    dialect: str
    engine: sa.Engine
    async_engine: AsyncEngine

    def orders(self) -> list[str]:
        with self.engine.connect() as connection:
            return sorted(connection.scalars(sa.select(orders.c.customer)))


@pytest.fixture(params=["sqlite", "postgresql"])
def database(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Database]:
    if request.param == "sqlite":
        path = tmp_path / "orders.db"
        url, async_url = f"sqlite:///{path}", f"sqlite+aiosqlite:///{path}"
    else:
        url = async_url = str(request.getfixturevalue("postgres_url"))
    # Pools large enough for ten sessions at once, so no send queues for a
    # connection (that would be the pool's limit, not the database's lock).
    pool = {"pool_size": ORDERS + 2, "max_overflow": 0}
    engine = sa.create_engine(url, **pool)
    async_engine = create_async_engine(async_url, **pool)
    for meta in (metadata, idempotency_table.metadata):
        meta.drop_all(engine)
        meta.create_all(engine)
    with engine.begin() as connection:
        connection.execute(sa.insert(stock).values(sku="A", price=100))
    try:
        yield Database(str(request.param), engine, async_engine)
    finally:
        asyncio.run(async_engine.dispose())
        for meta in (metadata, idempotency_table.metadata):
            meta.drop_all(engine)
        engine.dispose()


def build(
    database: Database, remaining_time: Callable[[], float | None] | None = None
) -> Mediator:
    handlers = (PlaceOrderHandler, PlaceOrderSyncHandler, PlaceKeyedOrderHandler)
    return Injector(
        [
            MediatorModule(lambda m: m.add_handler(*handlers).use_defaults()),
            SqlAlchemyModule(
                engine=database.engine,
                async_engine=database.async_engine,
                remaining_time=remaining_time,
            ),
        ]
    ).get(Mediator)


@pytest.mark.parametrize("deadline", [None, 600.0], ids=["no deadline", "deadline"])
async def test_ten_orders_are_inside_the_call_at_once(
    database: Database, deadline: float | None
) -> None:
    """With a deadline too: the first writes' waits are bounded, not serialised."""
    DEPENDENCY["payments"] = Dependency(ORDERS)
    mediator = build(database, None if deadline is None else lambda: deadline)

    placed = await asyncio.gather(
        *(mediator.send(PlaceOrder(sku="A", customer=f"c{n}")) for n in range(ORDERS))
    )

    assert placed == [0] * ORDERS
    assert database.orders() == sorted(f"c{n}" for n in range(ORDERS))


def test_ten_sync_orders_on_threads_are_inside_the_call_at_once(
    database: Database,
) -> None:
    DEPENDENCY["payments"] = Dependency(ORDERS)
    mediator = build(database)

    def place(n: int) -> int:
        return mediator.send_sync(PlaceOrderSync(sku="A", customer=f"c{n}"))

    with ThreadPoolExecutor(ORDERS) as pool:
        placed = list(pool.map(place, range(ORDERS)))

    assert len(set(placed)) == ORDERS  # ten rows, ten ids
    assert database.orders() == sorted(f"c{n}" for n in range(ORDERS))


async def test_ten_keyed_orders_are_inside_the_call_at_once(
    database: Database,
) -> None:
    DEPENDENCY["payments"] = Dependency(ORDERS)
    mediator = build(database)

    with acting_as(SHOP):
        placed = await asyncio.gather(
            *(
                mediator.send(
                    PlaceKeyedOrder(request_id=f"k{n}", sku="A", customer=f"c{n}")
                )
                for n in range(ORDERS)
            )
        )
        again = await mediator.send(
            PlaceKeyedOrder(request_id="k3", sku="A", customer="c3")
        )

    assert len(set(placed)) == ORDERS
    assert database.orders() == sorted(f"c{n}" for n in range(ORDERS))
    assert again == placed[3]  # replayed, no new row
    assert len(database.orders()) == ORDERS


async def test_one_key_sent_ten_times_at_once_has_one_effect(
    database: Database,
) -> None:
    """The first claim runs the handler; while it is in the call, the nine others
    find the key in flight (a 409 over HTTP), without waiting on any lock."""
    DEPENDENCY["payments"] = Dependency(2)  # the handler and the test
    mediator = build(database)
    request = PlaceKeyedOrder(request_id="same", sku="A", customer="once")

    async def send() -> Any:
        with acting_as(SHOP):
            try:
                return await mediator.send(request)
            except ConflictError as error:
                return error

    sends = [asyncio.create_task(send()) for _ in range(ORDERS)]
    refused: list[Any] = []
    async with asyncio.timeout(BARRIER_TIMEOUT):
        while len(refused) < ORDERS - 1:  # nine answered while one is in the call
            done, _ = await asyncio.wait(
                [s for s in sends if s not in refused],
                return_when=asyncio.FIRST_COMPLETED,
            )
            refused.extend(done)
    assert all(isinstance(s.result(), ConflictError) for s in refused)
    await DEPENDENCY["payments"].call()  # let the one in the call go on
    (winner,) = [s for s in sends if s not in refused]
    order = await winner

    assert database.orders() == ["once"]
    with acting_as(SHOP):
        assert await mediator.send(request) == order  # replayed
    assert database.orders() == ["once"]
