"""Handlers of the order requests: a command, a query and a stream."""

from collections.abc import AsyncIterator
from decimal import Decimal

from injector import inject

from mediator import CommandHandler, NotFoundError, QueryHandler, StreamHandler
from shop.commands import PlaceOrder
from shop.model import Order, PricedLine
from shop.queries import GetOrder, OrderLines
from shop.services import Catalog, Database, Inventory, OrderRepository, UnitOfWork


class PlaceOrderHandler(CommandHandler[PlaceOrder, int]):
    # Inventory, OrderRepository and this handler all get the same UnitOfWork:
    # it is request-scoped, so there is one per send.
    @inject
    def __init__(
        self,
        database: Database,
        catalog: Catalog,
        inventory: Inventory,
        orders: OrderRepository,
        unit_of_work: UnitOfWork,
    ) -> None:
        self.database = database
        self.catalog = catalog
        self.inventory = inventory
        self.orders = orders
        self.unit_of_work = unit_of_work

    async def handle(self, request: PlaceOrder) -> int:
        total = sum(
            (self.catalog.price(line.sku) * line.quantity for line in request.lines),
            Decimal(0),
        )
        for line in request.lines:
            self.inventory.reserve(line)
        order = Order(
            id=self.database.new_order_id(),
            customer=request.customer,
            lines=request.lines,
            total=total,
        )
        self.orders.add(order)
        self.unit_of_work.commit()
        return order.id


class GetOrderHandler(QueryHandler[GetOrder, Order]):
    # Queries read the database directly: they change nothing, so they need no
    # unit of work.
    @inject
    def __init__(self, database: Database) -> None:
        self.database = database

    def handle(self, request: GetOrder) -> Order:
        try:
            return self.database.orders[request.order_id]
        except KeyError:
            raise NotFoundError(f"no order {request.order_id}") from None


class OrderLinesHandler(StreamHandler[OrderLines, PricedLine]):
    @inject
    def __init__(self, database: Database, catalog: Catalog) -> None:
        self.database = database
        self.catalog = catalog

    async def handle(self, query: OrderLines) -> AsyncIterator[PricedLine]:
        order = self.database.orders.get(query.order_id)
        if order is None:
            raise NotFoundError(f"no order {query.order_id}")
        for line in order.lines:
            yield PricedLine(
                sku=line.sku,
                quantity=line.quantity,
                unit_price=self.catalog.price(line.sku),
            )
