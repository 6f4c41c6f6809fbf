"""Requests that change the shop."""

from pydantic import Field

from mediator import Command, transactional
from mediator_resilience import retryable
from shop.model import OrderLine


class PlaceOrder(Command[int]):
    """Place an order; the response is the new order's number."""

    customer: str
    lines: tuple[OrderLine, ...] = Field(min_length=1)


@transactional
class ReceiveDelivery(Command[int]):
    """Record a delivery in the database; the response is its number.

    `@transactional`: the handler's writes are committed when it returns and
    rolled back if it raises.
    """

    supplier: str
    lines: tuple[OrderLine, ...] = Field(min_length=1)


@retryable
@transactional
class RecordStocktake(Command[int]):
    """Record a stock count, valued at the market price; the response is its number.

    `@retryable` is safe here: everything the handler changes is in the
    transaction, which a failed attempt rolls back, and the price feed is only
    read. A command that sent an email or charged a card would not be.
    """

    sku: str
    counted: int = Field(ge=0)
