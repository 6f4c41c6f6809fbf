"""A stock lookup that may degrade to a cache, and the fakes its tests share.

`GetStock` is ``@retryable @fallback``: its handler fails as `Outage` says,
its fallback answers from `StockFromCache`. Everything they do is written to
one `Journal`, in order.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from injector import Binder, Injector, Module, inject

from mediator import (
    AuditRecord,
    AuditSink,
    FallbackHandler,
    Mediator,
    MediatorModule,
    NotFoundError,
    Query,
    QueryHandler,
    WallClock,
    degraded,
    fallback,
)
from mediator_resilience import (
    ResilienceMediatorModule,
    ResilienceMediatorOptions,
    retryable,
)
from mediator_resilience.testing import FakeClock

NOW = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)
CACHED_AT = NOW - timedelta(seconds=42)


@dataclass
class Outage:
    """How the handlers and the fallback of one test behave, and what ran."""

    failures: int = 0  # how many calls of the handler fail before it answers
    error: BaseException = field(default_factory=lambda: ConnectionError("down"))
    fallback_error: BaseException | None = None
    journal: list[str] = field(default_factory=list[str])


class StockFromCache(FallbackHandler["GetStock", int]):
    @inject
    def __init__(self, outage: Outage) -> None:
        self.outage = outage

    def handle(self, request: GetStock, failure: Exception) -> int:
        self.outage.journal.append(f"fallback:{type(failure).__name__}")
        if self.outage.fallback_error is not None:
            raise self.outage.fallback_error
        degraded(source="stock-cache", as_of=CACHED_AT)
        return 7


class AsyncStockFromCache(FallbackHandler["GetStockAsync", int]):
    @inject
    def __init__(self, outage: Outage) -> None:
        self.outage = outage

    async def handle(self, request: GetStockAsync, failure: Exception) -> int:
        self.outage.journal.append(f"fallback:{type(failure).__name__}")
        if self.outage.fallback_error is not None:
            raise self.outage.fallback_error
        degraded(source="stock-cache", as_of=CACHED_AT)
        return 7


@retryable
@fallback(StockFromCache)
class GetStock(Query[int]):
    sku: str


@retryable
@fallback(AsyncStockFromCache)
class GetStockAsync(Query[int]):
    sku: str


def _attempt(outage: Outage) -> int:
    outage.journal.append("handler")
    if outage.journal.count("handler") <= outage.failures:
        raise outage.error
    return 40


class GetStockHandler(QueryHandler[GetStock, int]):
    @inject
    def __init__(self, outage: Outage) -> None:
        self.outage = outage

    def handle(self, request: GetStock) -> int:
        if request.sku == "gone":
            raise NotFoundError("no such sku")
        return _attempt(self.outage)


class GetStockAsyncHandler(QueryHandler[GetStockAsync, int]):
    @inject
    def __init__(self, outage: Outage) -> None:
        self.outage = outage

    async def handle(self, request: GetStockAsync) -> int:
        if request.sku == "gone":
            raise NotFoundError("no such sku")
        return _attempt(self.outage)


class Records:
    def __init__(self) -> None:
        self.records: list[AuditRecord] = []

    def is_enabled(self) -> bool:
        return True

    def write(self, record: AuditRecord) -> None:
        self.records.append(record)


class FixedWallClock:
    def now(self) -> datetime:
        return NOW


class Fakes(Module):
    def __init__(self, outage: Outage, records: Records) -> None:
        self.outage = outage
        self.records = records

    def configure(self, binder: Binder) -> None:
        binder.bind(Outage, to=self.outage)
        binder.bind(AuditSink, to=self.records)
        binder.bind(WallClock, to=FixedWallClock())


def shop(
    outage: Outage,
    records: Records | None = None,
    *handlers: type[Any],
    behaviors: tuple[object, ...] = (),
) -> tuple[Mediator, FakeClock]:
    """The mediator with the default chain, the retry module and the fakes.

    `handlers` are registered beside the stock lookups' own, and `behaviors`
    beside the default ones.
    """
    clock = FakeClock()
    module = MediatorModule(
        lambda m: (
            m.add_handler(GetStockHandler, GetStockAsyncHandler, *handlers)
            .add_behavior(*behaviors)
            .use_defaults()
        )
    )
    resilience = ResilienceMediatorModule(
        ResilienceMediatorOptions(use_jitter=False),
        clock=clock,
        random=random.Random(1).random,
    )
    injector = Injector([Fakes(outage, records or Records()), module, resilience])
    return injector.get(Mediator), clock
