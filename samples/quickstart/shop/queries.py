"""Requests that read the shop."""

from decimal import Decimal

from mediator import Query, StreamQuery, authorize
from mediator_resilience import retryable
from shop.model import Delivery, Order, PricedLine, SalesReport, Stocktake


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


@retryable
class GetMarketPrice(Query[Decimal]):
    """The market price of one unit of a product, from the flaky `PriceFeed`.

    `@retryable`: reading a price twice does no harm, so a failed attempt may be
    sent again.
    """

    sku: str


class GetStocktakes(Query[tuple[Stocktake, ...]]):
    """Every stocktake in the database, oldest first."""
