"""Requests that read the shop."""

from mediator import Query, StreamQuery, authorize
from shop.model import Delivery, Order, PricedLine, SalesReport


class GetOrder(Query[Order]):
    """One order by its number."""

    order_id: int


class OrderLines(StreamQuery[PricedLine]):
    """The lines of one order with their prices, one at a time."""

    order_id: int


class GetDeliveries(Query[tuple[Delivery, ...]]):
    """Every delivery in the database, oldest first."""


@authorize(roles=["admin"])
class GetSalesReport(Query[SalesReport]):
    """The sales figures: only for admins."""
