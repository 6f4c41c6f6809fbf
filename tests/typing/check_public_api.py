"""Type-checked only (mypy --strict and pyright strict), never run.

`send` returns the request's response type; `stream` yields the query's item type.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from decimal import Decimal
from typing import assert_type

from mediator import (
    Command,
    CommandHandler,
    Mediator,
    Query,
    QueryHandler,
    StreamHandler,
    StreamQuery,
)
from mediator_resilience import retryable


class GetPrice(Query[Decimal]):
    sku: str


class PlaceOrder(Command[int]):
    sku: str
    quantity: int


class ListSkus(StreamQuery[str]):
    prefix: str


class GetPriceHandler(QueryHandler[GetPrice, Decimal]):
    async def handle(self, request: GetPrice) -> Decimal:
        return Decimal(1)


class PlaceOrderHandler(CommandHandler[PlaceOrder, int]):
    def handle(self, request: PlaceOrder) -> int:
        return request.quantity


class ListSkusHandler(StreamHandler[ListSkus, str]):
    async def handle(self, query: ListSkus) -> AsyncIterator[str]:
        yield query.prefix


async def typed_sends(mediator: Mediator) -> None:
    assert_type(await mediator.send(GetPrice(sku="A")), Decimal)
    assert_type(await mediator.send(PlaceOrder(sku="A", quantity=2)), int)
    assert_type(mediator.send_sync(PlaceOrder(sku="A", quantity=2)), int)
    async for sku in mediator.stream(ListSkus(prefix="A")):
        assert_type(sku, str)


@retryable
class GetStock(Query[int]):
    sku: str


async def typed_retryable(mediator: Mediator) -> None:
    assert_type(GetStock, type[GetStock])  # the marker keeps the class as it is
    assert_type(await mediator.send(GetStock(sku="A")), int)
