from __future__ import annotations

from collections.abc import AsyncIterator
from decimal import Decimal
from typing import Any, Generic, TypeVar

from mediator import QueryHandler, Request, RequestHandler, StreamHandler
from tests.mediator.features.messages import GetPrice, ListSkus

R = TypeVar("R")
TReq = TypeVar("TReq", bound=Request[Any])


class CachedHandler(RequestHandler[TReq, R], Generic[TReq, R]):
    """A generic intermediate class: not a handler by itself, so never registered."""


class GetPriceHandler(QueryHandler[GetPrice, Decimal]):
    async def handle(self, request: GetPrice) -> Decimal:
        return Decimal("9.99") if request.sku == "A" else Decimal("1.00")


class ListSkusHandler(StreamHandler[ListSkus, str]):
    async def handle(self, query: ListSkus) -> AsyncIterator[str]:
        for index in range(query.count):
            yield f"sku-{index}"
