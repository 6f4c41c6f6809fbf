"""A fallback handler in a module of its own: it knows its query by name only.

`split.queries` imports this module to write ``@fallback(StockFromShelf)``,
so this one cannot import the query back at run time.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mediator import FallbackHandler

if TYPE_CHECKING:
    from tests.mediator.fallback.split.queries import ShelfStock


class StockFromShelf(FallbackHandler["ShelfStock", int]):
    def handle(self, request: ShelfStock, failure: Exception) -> int:
        return 5
