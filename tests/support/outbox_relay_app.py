"""An application whose relay runs as a worker process, for the tests that kill one.

``python -m mediator.sqlalchemy.outbox tests.support.outbox_relay_app:build_relay``
runs it; the test process records messages with `build_mediator` and `Record`.
Configured from the environment, so each relay process can be told apart:

- ``OUTBOX_APP_URL``: the database (``sqlite:///...``, ``postgresql+psycopg://...``).
- ``OUTBOX_APP_ASYNC``: ``1`` for an `AsyncEngine` (the relay's `run`), else an
  `Engine` (`run_sync`).
- ``OUTBOX_APP_CLOCK_OFFSET``: seconds added to the relay's and the idempotency
  behavior's wall clock: a relay started later "in the future", past a lease,
  without anyone waiting for it.
- ``OUTBOX_APP_LEASE``: the relay's lease and the idempotency claims' lease, in
  seconds (default 30).
- ``OUTBOX_APP_HOLD_AFTER_COMMIT``: a path. After the receiver's transaction
  commits, the delivery writes the message's number there and holds (at most
  ``HOLD_LIMIT`` s) before the relay can record its outcome: the test kills it then,
  or stops it and releases the delivery by creating the path
  ``OUTBOX_APP_RELEASE`` names.

The receiver, `Apply`, is ``@idempotent`` and ``@transactional``: its effect is a
row of `effects` (the message's number, ordering key and sequence number, and the
pid of the relay process), written once per message however often it comes. Every
delivery of it is a row of `deliveries` too (pid, number, start and end, by
``time.time()``, one clock for all the processes of this machine), written outside
the receiver's transaction so that duplicates show.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, ClassVar, Final

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
    Stage,
    SystemWallClock,
    WallClock,
    idempotent,
    transactional,
)
from mediator.sqlalchemy import OutboxRelay, SqlAlchemyModule

HOLD_LIMIT: Final = 120.0  # seconds a held delivery waits to be killed
HOLD_STEP: Final = 0.05  # seconds between looks for the release file

metadata = sa.MetaData()
effects = sa.Table(
    "relay_effects",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("n", sa.Integer, nullable=False),
    sa.Column("ordering_key", sa.String(50)),
    sa.Column("seq", sa.Integer, nullable=False),
    sa.Column("pid", sa.Integer, nullable=False),
)
deliveries = sa.Table(
    "relay_deliveries",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("n", sa.Integer, nullable=False),
    sa.Column("pid", sa.Integer, nullable=False),
    sa.Column("started", sa.Float, nullable=False),
    sa.Column("ended", sa.Float),
    sa.Column("outcome", sa.String(100)),
)


@idempotent
@transactional
class Apply(Command[None]):
    """Apply message `n`: the `seq`-th of its ordering key (None: no key)."""

    n: int
    key: str | None = None
    seq: int = 0


@transactional
class Record(Command[list[str]]):
    """Record one `Apply` per item, (n, key, seq), in one transaction."""

    items: list[tuple[int, str | None, int]]


class RecordHandler(CommandHandler[Record, list[str]]):
    @inject
    def __init__(self, session: Session, outbox: Outbox) -> None:
        self.session, self.outbox = session, outbox

    def handle(self, request: Record) -> list[str]:
        return [
            self.outbox.send(Apply(n=n, key=key, seq=seq), ordering_key=key)
            for n, key, seq in request.items
        ]


def _effect(request: Apply) -> Any:
    return sa.insert(effects).values(
        n=request.n, ordering_key=request.key, seq=request.seq, pid=os.getpid()
    )


class ApplyHandler(CommandHandler[Apply, None]):
    @inject
    def __init__(self, session: Session) -> None:
        self.session = session

    def handle(self, request: Apply) -> None:
        self.session.execute(_effect(request))


class AsyncApplyHandler(CommandHandler[Apply, None]):
    @inject
    def __init__(self, session: AsyncSession) -> None:
        self.session = session

    async def handle(self, request: Apply) -> None:
        await self.session.execute(_effect(request))


class DeliveryLog:
    """Logs each delivery of `Apply`, outside the receiver's transaction."""

    stage: ClassVar[Stage] = Stage(150, "DELIVERY_LOG")

    def __init__(
        self,
        engine: sa.Engine | AsyncEngine,
        hold: Path | None = None,
        release: Path | None = None,
    ) -> None:
        self.engine, self.hold, self.release = engine, hold, release

    def applies_to(self, request_type: type[Any]) -> bool:
        return request_type is Apply

    def _started(self, request: Apply) -> Any:
        return (
            sa.insert(deliveries)
            .values(n=request.n, pid=os.getpid(), started=time.time())
            .returning(deliveries.c.id)
        )

    @staticmethod
    def _ended(row: int, outcome: str) -> Any:
        return (
            sa.update(deliveries)
            .where(deliveries.c.id == row)
            .values(ended=time.time(), outcome=outcome)
        )

    async def handle(self, request: Apply, next: Any) -> Any:
        engine = self.engine
        assert isinstance(engine, AsyncEngine)
        async with engine.begin() as connection:
            row = (await connection.execute(self._started(request))).scalar_one()
        outcome = "error"
        try:
            response = await next()
            outcome = "done"
        finally:
            async with engine.begin() as connection:
                await connection.execute(self._ended(row, outcome))
        if self.hold is not None:
            await asyncio.to_thread(self._held, request)
        return response

    def handle_sync(self, request: Apply, next: Any) -> Any:
        engine = self.engine
        assert isinstance(engine, sa.Engine)
        with engine.begin() as connection:
            row = connection.execute(self._started(request)).scalar_one()
        outcome = "error"
        try:
            response = next()
            outcome = "done"
        finally:
            with engine.begin() as connection:
                connection.execute(self._ended(row, outcome))
        if self.hold is not None:
            self._held(request)
        return response

    def _held(self, request: Apply) -> None:
        """Say the receiver committed, and hold until released (or killed)."""
        assert self.hold is not None
        self.hold.write_text(str(request.n))
        pause = threading.Event()  # never set: each wait is a step of the bound
        for _ in range(int(HOLD_LIMIT / HOLD_STEP)):
            if self.release is not None and self.release.exists():
                return
            pause.wait(HOLD_STEP)
        raise TimeoutError("the test neither released nor killed this relay")


class OffsetClock:
    """The system's wall clock, `offset` ahead."""

    def __init__(self, offset: timedelta) -> None:
        self.offset = offset
        self._system = SystemWallClock()

    def now(self) -> datetime:
        return self._system.now() + self.offset


class _Settings(Module):
    def __init__(self, clock: WallClock, lease: timedelta) -> None:
        self.clock, self.lease = clock, lease

    def configure(self, binder: Binder) -> None:
        binder.bind(WallClock, to=self.clock)
        binder.bind(
            IdempotencyOptions,
            to=IdempotencyOptions(lease=self.lease, allow_anonymous=True),
        )


def lease() -> timedelta:
    return timedelta(seconds=float(os.environ.get("OUTBOX_APP_LEASE", "30")))


def clock() -> OffsetClock:
    offset = float(os.environ.get("OUTBOX_APP_CLOCK_OFFSET", "0"))
    return OffsetClock(timedelta(seconds=offset))


def build_mediator(
    engine: sa.Engine | AsyncEngine,
    *,
    wall_clock: WallClock | None = None,
    hold: Path | None = None,
    release: Path | None = None,
) -> Mediator:
    """The mediator: `Apply` with its log, and `Record` on an `Engine`."""
    handlers: tuple[type[Any], ...] = (
        (AsyncApplyHandler,)
        if isinstance(engine, AsyncEngine)
        else (RecordHandler, ApplyHandler)
    )
    database = (
        SqlAlchemyModule(async_engine=engine)
        if isinstance(engine, AsyncEngine)
        else SqlAlchemyModule(engine=engine)
    )
    modules = [
        MediatorModule(
            lambda m: (
                m.add_handler(*handlers)
                .add_behavior(DeliveryLog(engine, hold, release))
                .use_defaults()
            )
        ),
        database,
        _Settings(wall_clock or clock(), lease()),
    ]
    return Injector(modules).get(Mediator)


def build_relay() -> OutboxRelay:
    """The relay the environment describes (the worker's TARGET)."""
    url = os.environ["OUTBOX_APP_URL"]
    engine: sa.Engine | AsyncEngine = (
        create_async_engine(url)
        if os.environ.get("OUTBOX_APP_ASYNC") == "1"
        else sa.create_engine(url)
    )
    hold = os.environ.get("OUTBOX_APP_HOLD_AFTER_COMMIT")
    release = os.environ.get("OUTBOX_APP_RELEASE")
    wall_clock = clock()
    mediator = build_mediator(
        engine,
        wall_clock=wall_clock,
        hold=Path(hold) if hold else None,
        release=Path(release) if release else None,
    )
    return OutboxRelay(
        mediator,
        engine,
        lease=lease(),
        batch=int(os.environ.get("OUTBOX_APP_BATCH", "20")),
        base_delay=timedelta(milliseconds=200),
        max_delay=timedelta(seconds=2),
        poll_interval=timedelta(milliseconds=200),
        clock=wall_clock,
    )


not_a_relay = "a string, not an OutboxRelay"
