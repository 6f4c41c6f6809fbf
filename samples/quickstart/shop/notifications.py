"""What the shop tells whoever listens."""

from decimal import Decimal

from mediator import Notification


class OrderPlaced(Notification):
    """An order was placed."""

    order_id: int
    customer: str
    total: Decimal
