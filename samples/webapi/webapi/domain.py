"""The orders domain: one table, one command, two queries and their handlers.

`PlaceOrder` reserves the stock at the inventory service (an HTTP call, through
a resilient client, with an ``Idempotency-Key`` so that its retries never
reserve twice) and then stores the order. It is `@retryable`: a transient
database failure runs it again, and the same key keeps the reservation
single. It is `@idempotent` with the key of the request context (the
``Idempotency-Key`` the caller sent with ``POST /orders``): the order sent
again under that key is answered with its first outcome, and the
inventory's key is derived from it (`derive_idempotency_key`), so every run
of the handler under one caller's key reserves under one inventory key.

`PlaceOrderHandler` reads, calls, then writes, and holds no transaction
across the call. The unit of work begins the database transaction at the
first write, so the read before the call takes no lock, and the write after
it (``session.add``, flushed when the unit of work commits) holds SQLite's
single write lock only while it commits. A flush before the call would begin
the transaction there and hold it, with the write lock, for as long as the
inventory takes to answer: concurrent orders would queue behind each other.
A database transaction cannot take in another service's effect anyway (seed
003, section 5.4: the order and the reservation cannot commit atomically),
so it gains nothing by being open during the call. One effect per key is the
idempotency record's work, not the transaction's: a rerun of the send under
the caller's key (the retry, the caller's own resend) asks the inventory
under the same derived key, which reserves once; a resend after the outcome
was recorded is answered from the record without running the handler; and
the order row, its primary key the order id, is written once.

`Stock`, the browsing route's query, may degrade and `PlaceOrder` may not
(seed 003, section 4.4: cached stock is fine for browsing, never for a
reservation). `Stock` asks the inventory for a sku's level; it is
`@retryable`, and `@fallback(LastKnownStock)`: once its retries gave up (the
inventory is down, or its client's breaker refuses), the level last seen is
the answer, marked degraded with its source and how old it is (`degraded`),
which `DomainErrorMiddleware` puts in the answer's ``Degraded`` header. A sku
the inventory says does not exist (404) is `NotFoundError`: an answer, never
replaced. A sku never seen before the outage has no fallback: the outage
reaches the caller (503). `PlaceOrder` is a command: its failure is a 503,
whatever the cache holds.

The existence check before the call is not a lock: two requests for one new
order id, each under its own key, can both pass it; the second then fails at
its write on the primary key (`ConflictError`, 409), after its reservation.
Undoing that reservation is a business operation of its own (a release
command), not a rollback; the sample leaves it out.
"""

from __future__ import annotations

from datetime import datetime

from injector import inject, singleton
from pydantic import BaseModel, Field
from sqlalchemy import Integer, String
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from http_resilience import HttpClientFactory
from mediator import (
    BusinessRuleError,
    Command,
    CommandHandler,
    FallbackHandler,
    NotFoundError,
    Query,
    QueryHandler,
    SystemWallClock,
    degraded,
    derive_idempotency_key,
    fallback,
    idempotent,
    transactional,
)
from mediator_resilience import retryable

INVENTORY = "inventory"
"""The name of the inventory's client in the `HttpClientFactory`."""


class Base(DeclarativeBase):
    pass


class OrderRow(Base):
    __tablename__ = "orders"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    sku: Mapped[str] = mapped_column(String(32))
    quantity: Mapped[int] = mapped_column(Integer)


class OrderView(BaseModel):
    """An order, as the service answers it."""

    order_id: str
    sku: str
    quantity: int


class Order(Query[OrderView]):
    """The order `order_id`, or `NotFoundError`."""

    order_id: str


@idempotent
@retryable
@transactional
class PlaceOrder(Command[OrderView]):
    """Reserve `quantity` of `sku` and record the order under `order_id`."""

    order_id: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9-]+$")
    sku: str = Field(min_length=1, max_length=32)
    quantity: int = Field(gt=0, le=100)


class PlaceOrderHandler(CommandHandler[PlaceOrder, OrderView]):
    @inject
    def __init__(self, session: AsyncSession, clients: HttpClientFactory) -> None:
        self.session = session
        self.inventory = clients.async_client(INVENTORY)

    async def handle(self, request: PlaceOrder) -> OrderView:
        # A read: no transaction begins, no lock is taken.
        if await self.session.get(OrderRow, request.order_id) is not None:
            raise BusinessRuleError(f"order {request.order_id} exists already")
        # The same for every run of this send under the caller's key; the
        # order id stands in when the handler runs outside an idempotent send.
        key = derive_idempotency_key("reserve-stock") or f"order-{request.order_id}"
        answer = await self.inventory.post(
            "/reservations",
            json={"sku": request.sku, "quantity": request.quantity},
            headers={"Idempotency-Key": key},
        )
        if answer.status_code == 409:  # Conflict
            raise BusinessRuleError(f"not enough {request.sku} in stock")
        # The client gave up (it retried, or its breaker is open): an outage,
        # which ResilienceErrorMiddleware answers 503 (or 502).
        answer.raise_for_status()
        # The first write, after the call: the transaction begins here.
        self.session.add(
            OrderRow(id=request.order_id, sku=request.sku, quantity=request.quantity)
        )
        return OrderView(
            order_id=request.order_id, sku=request.sku, quantity=request.quantity
        )


class OrderHandler(QueryHandler[Order, OrderView]):
    @inject
    def __init__(self, session: AsyncSession) -> None:
        self.session = session

    async def handle(self, request: Order) -> OrderView:
        row = await self.session.get(OrderRow, request.order_id)
        if row is None:
            raise NotFoundError(f"no order {request.order_id}")
        return OrderView(order_id=row.id, sku=row.sku, quantity=row.quantity)


SKU_PATTERN = r"^[A-Za-z0-9-]+$"
"""What a sku may be: it goes into the inventory's URL, so nothing else."""
SKU_LENGTH = 32


class StockView(BaseModel):
    """What is left of a sku, as the inventory last said."""

    sku: str
    available: int


@singleton
class SeenStock:
    """The level each sku last had, and when: what a degraded read answers."""

    def __init__(self) -> None:
        self.levels: dict[str, tuple[StockView, datetime]] = {}
        self.clock = SystemWallClock()  # the one FallbackBehavior ages it by


class LastKnownStock(FallbackHandler["Stock", StockView]):
    """The level last seen, degraded: from the ``stock-cache``, as old as it is."""

    @inject
    def __init__(self, seen: SeenStock) -> None:
        self.seen = seen

    async def handle(self, request: Stock, failure: Exception) -> StockView:
        found = self.seen.levels.get(request.sku)
        if found is None:
            # Nothing seen before the outage: no degraded answer to give, and
            # the caller gets the outage itself.
            raise LookupError(f"no level of {request.sku} seen yet")
        view, as_of = found
        degraded(source="stock-cache", as_of=as_of)
        return view


@retryable
@fallback(LastKnownStock)
class Stock(Query[StockView]):
    """What is left of `sku`, or `NotFoundError`; degraded in an outage."""

    sku: str = Field(min_length=1, max_length=SKU_LENGTH, pattern=SKU_PATTERN)


class StockHandler(QueryHandler[Stock, StockView]):
    @inject
    def __init__(self, clients: HttpClientFactory, seen: SeenStock) -> None:
        self.inventory = clients.async_client(INVENTORY)
        self.seen = seen

    async def handle(self, request: Stock) -> StockView:
        answer = await self.inventory.get(f"/stock/{request.sku}")
        if answer.status_code == 404:  # Not Found: an answer, not an outage
            raise NotFoundError(f"no sku {request.sku}")
        answer.raise_for_status()  # the client gave up: an outage
        view = StockView.model_validate(answer.json())
        self.seen.levels[request.sku] = (view, self.seen.clock.now())
        return view


HANDLERS = (PlaceOrderHandler, OrderHandler, StockHandler)
