from __future__ import annotations

from injector import inject

from mediator import CommandHandler, NotificationHandler
from tests.mediator.features.messages import Charge, Charged


class Ledger:
    def __init__(self) -> None:
        self.lines: list[str] = []


class ChargeHandler(CommandHandler[Charge, str]):
    @inject
    def __init__(self, ledger: Ledger) -> None:
        self.ledger = ledger

    def handle(self, request: Charge) -> str:
        self.ledger.lines.append(f"charge {request.amount}")
        return f"ch-{len(self.ledger.lines)}"


class RecordCharge(NotificationHandler[Charged]):
    @inject
    def __init__(self, ledger: Ledger) -> None:
        self.ledger = ledger

    async def handle(self, notification: Charged) -> None:
        self.ledger.lines.append(f"recorded {notification.charge_id}")
