"""Requests that read the shop."""

from mediator import Query, StreamQuery
from shop.model import Order, PricedLine


class GetOrder(Query[Order]):
    """One order by its number."""

    order_id: int


class OrderLines(StreamQuery[PricedLine]):
    """The lines of one order with their prices, one at a time."""

    order_id: int
