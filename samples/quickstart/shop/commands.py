"""Requests that change the shop."""

from pydantic import Field

from mediator import Command, transactional
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
