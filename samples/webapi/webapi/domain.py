"""The orders domain: one table, two commands, two queries and their handlers.

Placing an order is two steps, joined by the outbox (seed 003, section 5.4:
the order and the inventory's reservation cannot commit atomically, so the
order commits with the intent to reserve, and the reservation follows):

- `PlaceOrder` stores the order, in state ``"reserving"``, and records a
  `ReserveStock` for it in the outbox (`Outbox.send`, ordered by the order
  id), both in its one transaction: they commit together or not at all. It
  calls nothing: the answer (202 Accepted) is the database's alone, and an
  inventory outage never reaches the caller. It is `@retryable` (a transient
  database failure runs it again) and `@idempotent` with the key of the
  request context (the ``Idempotency-Key`` the caller sent with ``POST
  /orders``): the order sent again under that key is answered with its first
  outcome, and records no second message.
- `ReserveStock`, delivered by the outbox's relay (`webapi.relay`) after the
  commit, at least once, under its message id as the idempotency key. Its
  handler reserves the stock at the inventory (an HTTP call through the
  resilient client, under ``derive_idempotency_key("reserve-stock")``: the
  same inventory key for every delivery of one message, so a redelivery
  reserves once) and then sets the order ``"reserved"``, or ``"rejected"``
  when the inventory has not enough stock: a final answer, recorded, and the
  message delivered; never retried. An outage (the client gave up, or its
  breaker refuses) raises: the relay tries the message again after its
  backoff, up to its budget, then holds it dead for an operator.

`ReserveStockHandler` reads, calls, then writes, and holds no transaction
across the call. The unit of work begins the database transaction at the
first write, so the read before the call takes no lock, and the write after
it (the order's state, flushed when the unit of work commits) holds SQLite's
single write lock only while it commits. One effect per message is the
idempotency record's work: a delivery after the outcome was recorded is
answered from the record without running the handler, and one whose
handler ran but whose commit failed asks the inventory again under the same
derived key, which reserves once.

An order is its caller's: it keeps the principal that placed it, and `Order`
answers it to that principal only (another caller gets the 404 of an order
that does not exist; one with no principal, 401).

`Stock`, the browsing route's query, may degrade and the reservation may
not (seed 003, section 4.4: cached stock is fine for browsing, never for a
reservation). `Stock` asks the inventory for a sku's level; it is
`@retryable`, and `@fallback(LastKnownStock)`: once its retries gave up (the
inventory is down, or its client's breaker refuses), the level last seen is
the answer, marked degraded with its source and how old it is (`degraded`),
which `DomainErrorMiddleware` puts in the answer's ``Degraded`` header. A sku
the inventory says does not exist (404) is `NotFoundError`: an answer, never
replaced. A sku never seen before the outage has no fallback: the outage
reaches the caller (503).

The existence check in `PlaceOrder` is not a lock: two requests for one new
order id, each under its own key, can both pass it; the second then fails at
its write on the primary key (`ConflictError`, 409), and its message rolls
back with it: nothing is reserved for it.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Final, Literal

from injector import inject, singleton
from pydantic import BaseModel, Field
from sqlalchemy import DateTime, Integer, String
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from http_resilience import HttpClientFactory
from mediator import (
    BusinessRuleError,
    Command,
    CommandHandler,
    FallbackHandler,
    ForbiddenError,
    NotFoundError,
    Outbox,
    Query,
    QueryHandler,
    SystemWallClock,
    current_principal,
    degraded,
    derive_idempotency_key,
    fallback,
    idempotent,
    transactional,
)
from mediator_resilience import retryable

INVENTORY = "inventory"
"""The name of the inventory's client in the `HttpClientFactory`."""

OrderState = Literal["reserving", "reserved", "rejected"]
"""Where an order is: waiting for its reservation, or settled either way."""

RESERVING: Final = "reserving"
RESERVED: Final = "reserved"
REJECTED: Final = "rejected"
_STATES: Final[dict[str, OrderState]] = {
    RESERVING: RESERVING,
    RESERVED: RESERVED,
    REJECTED: REJECTED,
}


def _utc(moment: datetime) -> datetime:
    """`moment` in UTC: SQLite gives back the UTC it was given, without a zone."""
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


ORDER_ID_PATTERN = r"^[A-Za-z0-9-]+$"
ORDER_ID_LENGTH = 64


class Base(DeclarativeBase):
    pass


class OrderRow(Base):
    __tablename__ = "orders"

    id: Mapped[str] = mapped_column(String(ORDER_ID_LENGTH), primary_key=True)
    owner: Mapped[str] = mapped_column(String(64))
    """The id of the principal that placed it: the one who may read it."""
    sku: Mapped[str] = mapped_column(String(32))
    quantity: Mapped[int] = mapped_column(Integer)
    state: Mapped[str] = mapped_column(String(16))
    placed_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    settled_at: Mapped[datetime | None] = mapped_column(
        DateTime(timezone=True), nullable=True
    )
    """When it was reserved or rejected; None while it is reserving."""

    def view(self) -> OrderView:
        return OrderView(
            order_id=self.id,
            sku=self.sku,
            quantity=self.quantity,
            state=_STATES[self.state],
            placed_at=_utc(self.placed_at),
            settled_at=None if self.settled_at is None else _utc(self.settled_at),
        )


class OrderView(BaseModel):
    """An order, as the service answers it."""

    order_id: str
    sku: str
    quantity: int
    state: OrderState
    placed_at: datetime
    settled_at: datetime | None = None


CLOCK: Final = SystemWallClock()
"""When orders are placed and settled."""


def _owner() -> str:
    """The caller's id, the owner of what it places; ForbiddenError without one."""
    principal = current_principal()
    if principal is None:
        # The middleware answers 401 when the request has no principal at all.
        raise ForbiddenError("an order is its caller's: this request names none")
    return principal.id


class Order(Query[OrderView]):
    """The caller's order `order_id`, or `NotFoundError`."""

    order_id: str


@idempotent
@retryable
@transactional
class PlaceOrder(Command[OrderView]):
    """Record the order under `order_id`, and its reservation in the outbox."""

    order_id: str = Field(
        min_length=1, max_length=ORDER_ID_LENGTH, pattern=ORDER_ID_PATTERN
    )
    sku: str = Field(min_length=1, max_length=32)
    quantity: int = Field(gt=0, le=100)


class PlaceOrderHandler(CommandHandler[PlaceOrder, OrderView]):
    @inject
    def __init__(self, session: AsyncSession, outbox: Outbox) -> None:
        self.session = session
        self.outbox = outbox

    async def handle(self, request: PlaceOrder) -> OrderView:
        owner = _owner()
        if await self.session.get(OrderRow, request.order_id) is not None:
            raise BusinessRuleError(f"order {request.order_id} exists already")
        row = OrderRow(
            id=request.order_id,
            owner=owner,
            sku=request.sku,
            quantity=request.quantity,
            state=RESERVING,
            placed_at=CLOCK.now(),
            settled_at=None,
        )
        self.session.add(row)
        # In this transaction: it commits with the order, or rolls back with
        # it. The relay sends it after the commit; one order's messages in
        # the order recorded.
        self.outbox.send(
            ReserveStock(
                order_id=request.order_id, sku=request.sku, quantity=request.quantity
            ),
            ordering_key=request.order_id,
        )
        return row.view()


@idempotent
@transactional
class ReserveStock(Command[OrderView]):
    """Reserve the order's stock at the inventory, then settle the order.

    Delivered by the outbox's relay; its idempotency key is the message id.
    """

    order_id: str = Field(
        min_length=1, max_length=ORDER_ID_LENGTH, pattern=ORDER_ID_PATTERN
    )
    sku: str = Field(min_length=1, max_length=32)
    quantity: int = Field(gt=0, le=100)


class ReserveStockHandler(CommandHandler[ReserveStock, OrderView]):
    @inject
    def __init__(self, session: AsyncSession, clients: HttpClientFactory) -> None:
        self.session = session
        self.inventory = clients.async_client(INVENTORY)

    async def handle(self, request: ReserveStock) -> OrderView:
        # A read: no transaction begins, no lock is taken.
        row = await self.session.get(OrderRow, request.order_id)
        if row is None:
            # Final: the relay holds the message dead, with this reason.
            raise NotFoundError(f"no order {request.order_id} to reserve for")
        if row.state != RESERVING:
            return row.view()  # settled by an earlier delivery
        # The same for every delivery of this message (its id is the key);
        # the order id stands in when it is sent outside an idempotent send.
        key = derive_idempotency_key("reserve-stock") or f"order-{request.order_id}"
        answer = await self.inventory.post(
            "/reservations",
            json={"sku": request.sku, "quantity": request.quantity},
            headers={"Idempotency-Key": key},
        )
        if answer.status_code == 409:  # Conflict: not enough stock, an answer
            row.state = REJECTED
        else:
            # The client gave up (it retried, or its breaker is open): an
            # outage; the relay delivers the message again after its backoff.
            answer.raise_for_status()
            row.state = RESERVED
        # The first write, after the call: the transaction begins at the
        # flush, when the unit of work commits.
        row.settled_at = CLOCK.now()
        return row.view()


class OrderHandler(QueryHandler[Order, OrderView]):
    @inject
    def __init__(self, session: AsyncSession) -> None:
        self.session = session

    async def handle(self, request: Order) -> OrderView:
        owner = _owner()
        row = await self.session.get(OrderRow, request.order_id)
        # Another caller's order is answered as one that does not exist: its
        # id tells that caller nothing.
        if row is None or row.owner != owner:
            raise NotFoundError(f"no order {request.order_id}")
        return row.view()


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


HANDLERS = (PlaceOrderHandler, ReserveStockHandler, OrderHandler, StockHandler)
