"""Requests that change the shop."""

from pydantic import Field

from mediator import Command
from shop.model import OrderLine


class PlaceOrder(Command[int]):
    """Place an order; the response is the new order's number."""

    customer: str
    lines: tuple[OrderLine, ...] = Field(min_length=1)
