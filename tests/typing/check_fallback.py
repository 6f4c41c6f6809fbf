"""Type-checked only (mypy --strict and pyright strict), never run.

A fallback handler is typed like a query handler: `FallbackHandler[Q, R]`
takes the query (by forward reference, as ``@fallback`` above the query needs
it defined first) and its response type, `handle` gets the query and the
failure and returns `R`, and a send of the marked query is still typed `R`.
What is wrong is an error, pinned by the ``# type: ignore[...]`` comments
below: mypy (``warn_unused_ignores``) and pyright (the setting on the first
line) both report one that is unneeded.
"""
# pyright: reportUnnecessaryTypeIgnoreComment=true

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import assert_type

from fastapi import FastAPI

from mediator import (
    Command,
    Degradation,
    FallbackHandler,
    Mediator,
    Query,
    QueryHandler,
    degradation,
    degraded,
    fallback,
)
from mediator.asgi import DomainErrorMiddleware


class Stock(Query[int]):
    """Stands in for the marked query in the wrong handlers below."""

    sku: str


class StockFromCache(FallbackHandler["GetStock", int]):
    def handle(self, request: GetStock, failure: Exception) -> int:
        degraded(source="stock-cache", as_of=datetime(2030, 1, 1, tzinfo=UTC))
        return len(request.sku)


class AsyncStockFromCache(FallbackHandler["GetStock", int]):
    async def handle(self, request: GetStock, failure: Exception) -> int:
        return 0


@fallback(StockFromCache)
class GetStock(Query[int]):
    sku: str


@fallback(AsyncStockFromCache)
class GetStockToo(GetStock):
    pass


class GetStockHandler(QueryHandler[GetStock, int]):
    def handle(self, request: GetStock) -> int:
        return 1


class ReturnsText(FallbackHandler[Stock, int]):
    def handle(self, request: Stock, failure: Exception) -> str:  # type: ignore[override]
        return "none"


class TakesAnother(FallbackHandler[Stock, int]):
    def handle(self, request: GetStock, failure: Exception) -> int:  # type: ignore[override]
        return 0


class Reserve(Command[int]):
    sku: str


class ForACommand(FallbackHandler[Reserve, int]):  # type: ignore[type-var]
    def handle(self, request: Reserve, failure: Exception) -> int:
        return 0


def a_command_is_refused() -> None:
    fallback(StockFromCache)(Reserve)  # type: ignore[type-var]


async def sends(mediator: Mediator) -> None:
    assert_type(await mediator.send(GetStock(sku="A")), int)
    assert_type(mediator.send_sync(GetStockToo(sku="A")), int)
    found = degradation()
    assert_type(found, Degradation | None)
    if found is not None:
        assert_type(found.source, str)
        assert_type(found.as_of, datetime | None)
        assert_type(found.age, timedelta | None)
        assert_type(found.failure, str)
    degraded(source="stock-cache")
    degraded("stock-cache")  # type: ignore[call-arg]


def web(app: FastAPI) -> None:
    app.add_middleware(DomainErrorMiddleware, degradation_header=True)
    DomainErrorMiddleware(app, degradation_header=True)
    DomainErrorMiddleware(app, degradation_header="yes")  # type: ignore[arg-type]
