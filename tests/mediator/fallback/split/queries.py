"""A ``@fallback`` query whose fallback handler lives in another module."""

from __future__ import annotations

from mediator import Query, QueryHandler, fallback
from tests.mediator.fallback.split.fallbacks import StockFromShelf


@fallback(StockFromShelf)
class ShelfStock(Query[int]):
    sku: str


class ShelfStockHandler(QueryHandler[ShelfStock, int]):
    def handle(self, request: ShelfStock) -> int:
        raise OSError("down")
