"""Two handlers of `OrderPlaced`: `publish` delivers to both, in this order."""

from injector import inject

from mediator import NotificationHandler
from shop.notifications import OrderPlaced
from shop.services import SalesLedger


class SendConfirmation(NotificationHandler[OrderPlaced]):
    async def handle(self, notification: OrderPlaced) -> None:
        print(
            f"   email to {notification.customer}: "
            f"your order {notification.order_id} is confirmed"
        )


class RecordSale(NotificationHandler[OrderPlaced]):
    # A plain def works as well as async def; the mediator tells them apart once,
    # at start-up.
    @inject
    def __init__(self, ledger: SalesLedger) -> None:
        self.ledger = ledger

    def handle(self, notification: OrderPlaced) -> None:
        self.ledger.orders += 1
        self.ledger.revenue += notification.total
        print(
            f"   sales ledger: {self.ledger.orders} order(s), "
            f"{self.ledger.revenue} in revenue"
        )
