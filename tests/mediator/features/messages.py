from __future__ import annotations

from decimal import Decimal

from mediator import Command, Notification, Query, StreamQuery


class GetPrice(Query[Decimal]):
    sku: str


class Charge(Command[str]):
    amount: Decimal


class ListSkus(StreamQuery[str]):
    count: int


class Charged(Notification):
    charge_id: str
