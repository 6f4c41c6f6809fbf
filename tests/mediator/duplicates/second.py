from __future__ import annotations

from mediator import QueryHandler
from tests.mediator.duplicates.first import Lookup


class SecondLookupHandler(QueryHandler[Lookup, int]):
    def handle(self, request: Lookup) -> int:
        return 2
