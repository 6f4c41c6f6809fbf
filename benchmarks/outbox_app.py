"""The application `outbox.py` measures: a command recording outbox messages, and
their receiver, a trivial ``@idempotent @transactional`` command.

A module of its own (beside the script, not ``__main__``) because the relay
processes import it to deliver: ``python -m mediator.sqlalchemy.outbox
outbox_app:build_relay --app-dir benchmarks``, the database from
``OUTBOX_BENCH_URL`` (an `AsyncEngine` when ``OUTBOX_BENCH_ASYNC`` is ``1``).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import sqlalchemy as sa
from injector import Binder, Injector, Module, inject
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, create_async_engine
from sqlalchemy.orm import Session

from mediator import (
    Command,
    CommandHandler,
    IdempotencyOptions,
    Mediator,
    MediatorModule,
    Outbox,
    idempotent,
    transactional,
)
from mediator.sqlalchemy import OutboxRelay, SqlAlchemyModule

BATCH = 100
POLL = timedelta(milliseconds=100)
# Connections per relay process: four of them stay under the bench cluster's
# max_connections (50, concurrent_orders.py's), with room for the script's own.
POOL = {"pool_size": 8, "max_overflow": 0}

metadata = sa.MetaData()
orders = sa.Table(
    "bench_outbox_orders",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("n", sa.Integer, nullable=False),
)
reserved = sa.Table(
    "bench_outbox_reserved",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("n", sa.Integer, nullable=False),
)


@idempotent
@transactional
class Reserve(Command[None]):
    n: int


@transactional
class PlaceOrder(Command[None]):
    """Insert an order; with `message`, record a `Reserve` in the outbox too."""

    n: int
    message: bool = False
    ordering_key: str | None = None


@transactional
class RecordMany(Command[None]):
    """Record `Reserve` messages in one transaction, (n, ordering key) each."""

    items: list[tuple[int, str | None]]


class PlaceOrderHandler(CommandHandler[PlaceOrder, None]):
    @inject
    def __init__(self, session: Session, outbox: Outbox) -> None:
        self.session, self.outbox = session, outbox

    def handle(self, request: PlaceOrder) -> None:
        self.session.execute(sa.insert(orders).values(n=request.n))
        if request.message:
            self.outbox.send(Reserve(n=request.n), ordering_key=request.ordering_key)


class RecordManyHandler(CommandHandler[RecordMany, None]):
    @inject
    def __init__(self, outbox: Outbox) -> None:
        self.outbox = outbox

    def handle(self, request: RecordMany) -> None:
        for n, key in request.items:
            self.outbox.send(Reserve(n=n), ordering_key=key)


class ReserveHandler(CommandHandler[Reserve, None]):
    @inject
    def __init__(self, session: Session) -> None:
        self.session = session

    def handle(self, request: Reserve) -> None:
        self.session.execute(sa.insert(reserved).values(n=request.n))


class AsyncReserveHandler(CommandHandler[Reserve, None]):
    @inject
    def __init__(self, session: AsyncSession) -> None:
        self.session = session

    async def handle(self, request: Reserve) -> None:
        await self.session.execute(sa.insert(reserved).values(n=request.n))


def _anonymous(binder: Binder) -> None:
    binder.bind(IdempotencyOptions, to=IdempotencyOptions(allow_anonymous=True))


def build_mediator(engine: sa.Engine | AsyncEngine) -> Mediator:
    """`PlaceOrder` and `RecordMany` on an `Engine`; `Reserve` on either."""
    handlers: tuple[type[Any], ...]
    if isinstance(engine, AsyncEngine):
        handlers = (AsyncReserveHandler,)
        database = SqlAlchemyModule(async_engine=engine)
    else:
        handlers = (PlaceOrderHandler, RecordManyHandler, ReserveHandler)
        database = SqlAlchemyModule(engine=engine)
    modules: list[Module | Callable[[Binder], None]] = [
        MediatorModule(lambda m: m.add_handler(*handlers).use_defaults()),
        database,
        _anonymous,
    ]
    return Injector(modules).get(Mediator)


def relay_for(engine: sa.Engine | AsyncEngine) -> OutboxRelay:
    return OutboxRelay(build_mediator(engine), engine, batch=BATCH, poll_interval=POLL)


def build_relay() -> OutboxRelay:
    """The worker's TARGET: the relay on the environment's database."""
    url = os.environ["OUTBOX_BENCH_URL"]
    engine: sa.Engine | AsyncEngine = (
        create_async_engine(url, **POOL)
        if os.environ.get("OUTBOX_BENCH_ASYNC") == "1"
        else sa.create_engine(url, **POOL)
    )
    return relay_for(engine)
