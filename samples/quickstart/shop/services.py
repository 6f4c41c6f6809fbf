"""What the handlers depend on, built by injector.

`Database`, `Catalog`, `PriceFeed` and `SalesLedger` are singletons. `UnitOfWork` is
request-scoped: every service that asks for it during one send gets the same
instance, so the stock reservations and the new order are committed together.
(The deliveries are kept in SQLite instead, through the SQLAlchemy session that
`mediator.sqlalchemy` provides: see `shop.handlers.deliveries`.)
"""

import itertools
from collections.abc import Callable, Mapping
from decimal import Decimal

from injector import inject, singleton

from mediator import BusinessRuleError, NotFoundError, request_scope
from shop.model import Order, OrderLine


@singleton
class Database:
    """The shop's state, in memory."""

    def __init__(self) -> None:
        self.stock: dict[str, int] = {"apple": 10, "pear": 5, "plum": 0}
        self.orders: dict[int, Order] = {}
        self._order_ids = itertools.count(1)

    def new_order_id(self) -> int:
        """The next free order number."""
        return next(self._order_ids)


PRICES: Mapping[str, Decimal] = {
    "apple": Decimal("0.70"),
    "pear": Decimal("0.50"),
    "plum": Decimal("0.40"),
}

MARKET_PRICES: Mapping[str, Decimal] = {
    "apple": Decimal("0.55"),
    "pear": Decimal("0.35"),
    "plum": Decimal("0.30"),
}


@singleton
class Catalog:
    """Unit prices by product."""

    def price(self, sku: str) -> Decimal:
        """The unit price of `sku`.

        Raises:
            NotFoundError: The shop does not sell `sku`.
        """
        try:
            return PRICES[sku]
        except KeyError:
            raise NotFoundError(f"no product {sku!r}") from None


@singleton
class PriceFeed:
    """The wholesale market's current prices, over an unreliable network.

    Of every three calls, the first two fail with `ConnectionError`, so a
    `@retryable` request that calls it once per attempt succeeds on its third.
    """

    def __init__(self) -> None:
        self._calls = itertools.count(1)

    def price(self, sku: str) -> Decimal:
        """The market price of one unit of `sku`.

        Raises:
            ConnectionError: The feed did not answer (two calls out of three).
            NotFoundError: The market does not trade `sku`.
        """
        if next(self._calls) % 3 != 0:
            raise ConnectionError("the market price feed did not answer")
        try:
            return MARKET_PRICES[sku]
        except KeyError:
            raise NotFoundError(f"no market price for {sku!r}") from None


@singleton
class SalesLedger:
    """Running sales figures."""

    def __init__(self) -> None:
        self.orders = 0
        self.revenue = Decimal(0)


_unit_of_work_ids = itertools.count(1)


@request_scope
class UnitOfWork:
    """Collects the changes of one send and applies them together on `commit`."""

    @inject
    def __init__(self, database: Database) -> None:
        self.id = next(_unit_of_work_ids)
        self.database = database
        self._changes: list[tuple[str, Callable[[Database], None]]] = []

    def add(self, description: str, change: Callable[[Database], None]) -> None:
        """Queue a change; nothing is written before `commit`."""
        self._changes.append((description, change))

    def commit(self) -> None:
        """Apply every queued change."""
        for _, change in self._changes:
            change(self.database)
        done = ", ".join(description for description, _ in self._changes)
        print(f"   unit of work {self.id} committed: {done}")
        self._changes.clear()


class Inventory:
    """Reserves stock, through the unit of work of the current send."""

    @inject
    def __init__(self, unit_of_work: UnitOfWork) -> None:
        self.unit_of_work = unit_of_work

    def reserve(self, line: OrderLine) -> None:
        """Queue taking `line.quantity` units out of stock.

        Raises:
            BusinessRuleError: Not enough stock.
        """
        available = self.unit_of_work.database.stock.get(line.sku, 0)
        if available < line.quantity:
            raise BusinessRuleError(
                f"only {available} x {line.sku} in stock, {line.quantity} ordered"
            )

        def take(database: Database) -> None:
            database.stock[line.sku] -= line.quantity

        self.unit_of_work.add(f"reserve {line.quantity} x {line.sku}", take)


class OrderRepository:
    """Saves orders, through the unit of work of the current send."""

    @inject
    def __init__(self, unit_of_work: UnitOfWork) -> None:
        self.unit_of_work = unit_of_work

    def add(self, order: Order) -> None:
        """Queue saving `order`."""

        def save(database: Database) -> None:
            database.orders[order.id] = order

        self.unit_of_work.add(f"save order {order.id}", save)
