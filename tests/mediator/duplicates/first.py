from __future__ import annotations

from mediator import Query, QueryHandler


class Lookup(Query[int]):
    key: str


class FirstLookupHandler(QueryHandler[Lookup, int]):
    def handle(self, request: Lookup) -> int:
        return 1
