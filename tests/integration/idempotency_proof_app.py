"""The shop of the idempotency proof: commands, handlers, the mediator, the web app,
and what a spawned process runs (importable, so `spawn` can start it).

A handler's effect is one row in `proof_effects`, written in the unit of work's
transaction: counting the rows counts the committed effects.
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from multiprocessing.queues import Queue
from multiprocessing.synchronize import Barrier
from multiprocessing.synchronize import Event as EventType
from typing import TYPE_CHECKING, Any, ClassVar

import sqlalchemy as sa
from injector import Binder, Injector, InstanceProvider, Module, inject
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession
from sqlalchemy.orm import Session

from mediator import (
    Command,
    CommandHandler,
    ConflictError,
    IdempotencyOptions,
    Mediator,
    MediatorModule,
    Principal,
    Stage,
    TransientDatabaseError,
    WallClock,
    idempotent,
    is_replay,
    transactional,
)
from mediator.sqlalchemy import AsyncSqlAlchemyIdempotencyStore, SqlAlchemyModule

if TYPE_CHECKING:
    from fastapi import FastAPI

START = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
LEASE = timedelta(seconds=30)
CRASH_EXIT_CODE = 17

effects_metadata = sa.MetaData()
effects = sa.Table(
    "proof_effects",
    effects_metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("sku", sa.String(100), nullable=False),
)
"""One row per handler run that committed: the effect counted by the proof."""


class MovableClock:
    """The wall clock of the proof: fixed, moved forward by the test, never slept."""

    def __init__(self, now: datetime = START) -> None:
        self.current = now

    def now(self) -> datetime:
        return self.current

    def advance(self, by: timedelta) -> None:
        self.current += by


@dataclass
class Hooks:
    """What the handlers and the gate do besides their work (nothing by default).

    `after_write`: run by a handler after it wrote its row, inside the
    transaction; `before_transaction`: run by `Gate`, after the claim and before
    the unit of work begins.
    """

    after_write: Callable[[], Awaitable[None]] | None = None
    after_write_sync: Callable[[], None] | None = None
    before_transaction: Callable[[], Awaitable[None]] | None = None
    handled: list[str] = field(default_factory=list[str])


@idempotent(key="request_id")
@transactional
class PlaceOrder(Command[int]):
    """Key in a field (or, when None, from the request context); async handler."""

    request_id: str | None = None
    sku: str


@idempotent
@transactional
class PlaceOrderByHeader(Command[int]):
    """Key from the request context only: what the web route sends."""

    sku: str


@idempotent(key="request_id")
@transactional
class PlaceOrderSync(Command[int]):
    """The sync path's command (`send_sync`, a sync `Session`)."""

    request_id: str
    sku: str


async def _insert(session: AsyncSession, sku: str, hooks: Hooks) -> int:
    result = await session.execute(
        sa.insert(effects).values(sku=sku).returning(effects.c.id)
    )
    order_id = int(result.scalar_one())
    hooks.handled.append(sku)
    if hooks.after_write is not None:
        await hooks.after_write()
    return order_id


class PlaceOrderHandler(CommandHandler[PlaceOrder, int]):
    @inject
    def __init__(self, session: AsyncSession, hooks: Hooks) -> None:
        self.session = session
        self.hooks = hooks

    async def handle(self, request: PlaceOrder) -> int:
        return await _insert(self.session, request.sku, self.hooks)


class PlaceOrderByHeaderHandler(CommandHandler[PlaceOrderByHeader, int]):
    @inject
    def __init__(self, session: AsyncSession, hooks: Hooks) -> None:
        self.session = session
        self.hooks = hooks

    async def handle(self, request: PlaceOrderByHeader) -> int:
        return await _insert(self.session, request.sku, self.hooks)


class PlaceOrderSyncHandler(CommandHandler[PlaceOrderSync, int]):
    @inject
    def __init__(self, session: Session, hooks: Hooks) -> None:
        self.session = session
        self.hooks = hooks

    def handle(self, request: PlaceOrderSync) -> int:
        result = self.session.execute(
            sa.insert(effects).values(sku=request.sku).returning(effects.c.id)
        )
        order_id = int(result.scalar_one())
        self.hooks.handled.append(request.sku)
        if self.hooks.after_write_sync is not None:
            self.hooks.after_write_sync()
        return order_id


class Gate:
    """A behavior between idempotency and the transaction: the claim is held, no
    transaction is open yet, while `Hooks.before_transaction` runs."""

    stage: ClassVar[Stage] = Stage(450, "GATE")

    @inject
    def __init__(self, hooks: Hooks) -> None:
        self.hooks = hooks

    def applies_to(self, request_type: type[Any]) -> bool:
        return request_type is PlaceOrder

    async def handle(self, request: Any, next: Callable[[], Awaitable[Any]]) -> Any:
        if self.hooks.before_transaction is not None:
            await self.hooks.before_transaction()
        return await next()

    def handle_sync(self, request: Any, next: Callable[[], Any]) -> Any:
        return next()


def build_mediator(
    *,
    engine: sa.Engine | None = None,
    async_engine: AsyncEngine | None = None,
    clock: WallClock | None = None,
    hooks: Hooks | None = None,
) -> Mediator:
    """The mediator with `use_defaults()`, the SQLAlchemy module, the clock."""
    bound_hooks = hooks if hooks is not None else Hooks()
    bound_clock = clock if clock is not None else MovableClock()

    class Settings(Module):
        def configure(self, binder: Binder) -> None:
            binder.bind(Hooks, to=InstanceProvider(bound_hooks))
            binder.bind(WallClock, to=InstanceProvider(bound_clock))
            # The proof's workers send without a principal: they opt in.
            options = IdempotencyOptions(lease=LEASE, allow_anonymous=True)
            binder.bind(IdempotencyOptions, to=InstanceProvider(options))

    # The handlers of the side that has an engine: each needs its own session.
    handlers: list[type[Any]] = []
    if async_engine is not None:
        handlers += [PlaceOrderHandler, PlaceOrderByHeaderHandler]
    if engine is not None:
        handlers.append(PlaceOrderSyncHandler)
    module = MediatorModule(
        lambda m: m.add_handler(*handlers).add_behavior(Gate).use_defaults()
    )
    sqlalchemy = SqlAlchemyModule(engine=engine, async_engine=async_engine)
    return Injector([module, sqlalchemy, Settings()]).get(Mediator)


def tenant_of(scope: MutableMapping[str, Any]) -> Principal | None:
    """The test's stand-in for authentication: ``X-User: <id>/<tenant>``."""
    for name, value in scope.get("headers", ()):
        if bytes(name).lower() == b"x-user":
            user, _, tenant = bytes(value).decode("ascii").partition("/")
            return Principal(user, claims={"tenant": tenant})
    return None


def create_app(
    mediator: Mediator, async_engine: AsyncEngine, *, keep_answers: bool
) -> FastAPI:
    """``POST /orders`` (key: the header) and ``POST /orders-by-field`` (the body's
    ``request_id``); the middlewares in the documented order. With `keep_answers`
    the idempotency middleware keeps and replays HTTP answers too."""
    # Imported here: the spawned processes do not need the web stack.
    from fastapi import FastAPI

    from mediator.asgi import (
        DomainErrorMiddleware,
        IdempotencyKeyMiddleware,
        RequestContextMiddleware,
    )

    app = FastAPI()

    @app.post("/orders", status_code=201)
    async def place_order(order: PlaceOrderByHeader) -> dict[str, int]:
        return {"order": await mediator.send(order)}

    @app.post("/orders-by-field", status_code=201)
    async def place_order_by_field(order: PlaceOrder) -> dict[str, int]:
        return {"order": await mediator.send(order)}

    store = AsyncSqlAlchemyIdempotencyStore(async_engine)
    app.add_middleware(DomainErrorMiddleware)
    app.add_middleware(
        IdempotencyKeyMiddleware,
        store_factory=(lambda: store) if keep_answers else None,
        required=["/orders"],
        anonymous=["/"],  # most proofs post without a principal
    )
    app.add_middleware(RequestContextMiddleware, principal=tenant_of)
    return app


# --- what a spawned process runs ----------------------------------------------------


def _sync_mediator(
    url: str, now: str, hooks: Hooks, busy_timeout: float | None = None
) -> tuple[sa.Engine, Mediator]:
    timeout = {} if busy_timeout is None else {"timeout": busy_timeout}
    engine = sa.create_engine(url, connect_args=timeout)
    clock = MovableClock(datetime.fromisoformat(now))
    return engine, build_mediator(engine=engine, clock=clock, hooks=hooks)


def send_at_once(
    url: str,
    now: str,
    key: str,
    start: Barrier,
    answers: Queue[str],
    others_answered: EventType | None,
    busy_timeout: float | None,
) -> None:
    """Connect, wait for the others at `start`, send, report how it ended.

    ``created <id>``, ``replayed <id>``, ``conflict``, ``transient`` (a
    `TransientDatabaseError`), or ``error <repr>``. Given `others_answered`,
    the handler (which runs in one process only) waits for it after its write,
    so that every other send meets the claim in flight. `busy_timeout`: how
    long SQLite waits for its write lock (seconds).
    """
    hooks = Hooks()
    if others_answered is not None:
        hooks.after_write_sync = lambda: _wait(others_answered)
    engine, mediator = _sync_mediator(url, now, hooks, busy_timeout)
    try:
        with engine.connect():
            pass  # connected (and configured) before the race starts
        start.wait(timeout=60)
        try:
            order = mediator.send_sync(PlaceOrderSync(request_id=key, sku="A"))
        except ConflictError:
            answers.put("conflict")
        except TransientDatabaseError:
            answers.put("transient")
        else:
            answers.put(f"{'replayed' if is_replay() else 'created'} {order}")
    except BaseException as error:
        answers.put(f"error {error!r}")
        raise
    finally:
        engine.dispose()


def _wait(event: EventType) -> None:
    if not event.wait(timeout=60):
        raise TimeoutError("the other processes did not answer within 60 s")


def crash_after_write(url: str, now: str, key: str) -> None:
    """Send; the handler writes its row, then the process dies before the commit."""

    def die() -> None:
        os._exit(CRASH_EXIT_CODE)

    _, mediator = _sync_mediator(url, now, Hooks(after_write_sync=die))
    mediator.send_sync(PlaceOrderSync(request_id=key, sku="crashed"))
    raise AssertionError(
        "the handler should have ended the process"
    )  # pragma: no cover


__all__ = [
    "CRASH_EXIT_CODE",
    "LEASE",
    "START",
    "Gate",
    "Hooks",
    "MovableClock",
    "PlaceOrder",
    "PlaceOrderByHeader",
    "PlaceOrderSync",
    "build_mediator",
    "crash_after_write",
    "create_app",
    "effects",
    "effects_metadata",
    "send_at_once",
    "tenant_of",
]
