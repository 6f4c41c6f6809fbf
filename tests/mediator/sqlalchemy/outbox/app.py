"""A small app for the outbox tests: commands that record messages, and receivers.

`PlaceOrder` (``@transactional``) writes an order and records the messages its
`Outgoing` list names with ``outbox.send`` / ``outbox.publish``. `Reserve`
(``@idempotent @transactional``) is the receiver that applies a message once: it
writes an ``applied`` row with the key it ran under. `Flaky` fails as `Faults`
says (a transient error whose text holds a fake secret, or a domain error);
`Slow` counts how many of it run at once. Every handler exists twice: plain
``def`` on a `Session` (`SYNC_HANDLERS`) and ``async def`` on an `AsyncSession`
(`ASYNC_HANDLERS`); a mediator is built with one set (`build`).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Annotated, Any, ClassVar, Literal

import sqlalchemy as sa
from anyio.lowlevel import checkpoint
from injector import Binder, Injector, Module, inject
from pydantic import BaseModel, Field, SecretStr
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession
from sqlalchemy.orm import Session

from mediator import (
    BusinessRuleError,
    Command,
    CommandHandler,
    Mediator,
    MediatorModule,
    Next,
    Notification,
    NotificationHandler,
    Outbox,
    Principal,
    Query,
    Sensitive,
    Stage,
    SyncNext,
    WallClock,
    current_correlation_id,
    current_idempotency_key,
    current_principal,
    idempotent,
    register_behavior,
    transactional,
)
from mediator.sqlalchemy import SqlAlchemyModule
from mediator_resilience import (
    ResilienceMediatorModule,
    ResilienceMediatorOptions,
    retryable,
)
from mediator_resilience.testing import FakeClock

SECRET = "sk-live-FAKE-0123456789"
"""A fake secret in a transient error's text: it must never reach the table."""

metadata = sa.MetaData()
orders = sa.Table(
    "outbox_test_orders",
    metadata,
    sa.Column("id", sa.String(64), primary_key=True),
)
applied = sa.Table(
    "outbox_test_applied",
    metadata,
    sa.Column("n", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("order_id", sa.String(64), nullable=False),
    sa.Column("key", sa.String(255)),
)


# --- what the recording command records -------------------------------------------

What = Literal["reserve", "flaky", "slow", "notify", "unhandled", "secret", "query"]


class Outgoing(BaseModel):
    """One message `PlaceOrder` records: what, its value, its ordering key."""

    what: What
    value: str
    ordering_key: str | None = None


@transactional
class PlaceOrder(Command[list[str]]):
    """Writes the order, records `outgoing`, then fails if asked; the message ids."""

    order_id: str
    outgoing: list[Outgoing] = Field(default_factory=list[Outgoing])
    fail: bool = False


@retryable
@transactional
class PlaceOrderRetried(Command[list[str]]):
    """`PlaceOrder` whose first `Attempts.failures` attempts fail after recording."""

    order_id: str
    outgoing: list[Outgoing] = Field(default_factory=list[Outgoing])


@transactional
class PlaceOrderNested(Command[list[str]]):
    """Records `outgoing`, then sends `Inner`, which records and fails; caught."""

    order_id: str
    outgoing: list[Outgoing] = Field(default_factory=list[Outgoing])
    inner: list[Outgoing] = Field(default_factory=list[Outgoing])


@transactional
class Inner(Command[None]):
    """A nested send in a savepoint: records `outgoing`, then fails."""

    outgoing: list[Outgoing] = Field(default_factory=list[Outgoing])


@transactional
class Probe(Command[None]):
    """Hands its handler's `Outbox` to `Probing.use` (what it raises propagates)."""


class Unrecorded(Command[None]):
    """Not ``@transactional``, and its handler takes the outbox: no mediator builds."""

    order_id: str


@idempotent
@transactional
class Reserve(Command[None]):
    """The idempotent receiver: applies a message once."""

    order_id: str


class Flaky(Command[None]):
    """A receiver whose failures `Faults` controls."""

    name: str


class Slow(Command[None]):
    """A receiver that counts the deliveries running at once (`Overlap`)."""

    name: str


class Unhandled(Command[None]):
    """A command no handler takes."""

    name: str


class OrderPlaced(Notification):
    order_id: str


class WithSecret(Command[None]):
    card: Annotated[str, Sensitive()]


class WithSecretStr(Command[None]):
    password: SecretStr


class Card(BaseModel):
    number: SecretStr


class WithNestedSecret(Command[None]):
    """A secret inside a list of models: its JSON would hold ``**********``."""

    cards: list[Card]


class Lookup(Query[str]):
    name: str


class Shipped(Notification):
    """A notification with a sensitive field."""

    token: SecretStr


def message_of(outgoing: Outgoing) -> Command[Any] | Notification:
    match outgoing.what:
        case "reserve":
            return Reserve(order_id=outgoing.value)
        case "flaky":
            return Flaky(name=outgoing.value)
        case "slow":
            return Slow(name=outgoing.value)
        case "notify":
            return OrderPlaced(order_id=outgoing.value)
        case "unhandled":
            return Unhandled(name=outgoing.value)
        case "secret":
            return WithSecret(card=outgoing.value)
        case "query":
            return Lookup(name=outgoing.value)  # type: ignore[return-value] # refused


def record(outbox: Outbox, outgoing: list[Outgoing]) -> list[str]:
    ids: list[str] = []
    for one in outgoing:
        message = message_of(one)
        if isinstance(message, Notification):
            ids.append(outbox.publish(message, ordering_key=one.ordering_key))
        else:
            ids.append(outbox.send(message, ordering_key=one.ordering_key))
    return ids


# --- what the receivers saw -------------------------------------------------------


@dataclass(frozen=True)
class Seen:
    """One run of a receiver's handler, with the context it ran in."""

    what: str
    value: str
    key: str | None
    principal: Principal | None
    correlation_id: str | None
    thread: int


class Observed:
    """Every receiver run, in order (thread-safe: sync relays deliver in threads)."""

    lock: ClassVar[threading.Lock] = threading.Lock()
    runs: ClassVar[list[Seen]] = []

    @classmethod
    def reset(cls) -> None:
        with cls.lock:
            cls.runs = []

    @classmethod
    def saw(cls, what: str, value: str) -> None:
        seen = Seen(
            what,
            value,
            current_idempotency_key(),
            current_principal(),
            current_correlation_id(),
            threading.get_ident(),
        )
        with cls.lock:
            cls.runs.append(seen)

    @classmethod
    def of(cls, what: str) -> list[Seen]:
        with cls.lock:
            return [seen for seen in cls.runs if seen.what == what]


class During:
    """Called by `PlaceOrder`'s handler after it recorded and flushed, before the
    commit (the sync handler calls `hook`, the async one awaits `ahook`)."""

    def __init__(self) -> None:
        self.hook: Callable[[], Any] | None = None
        self.ahook: Callable[[], Awaitable[Any]] | None = None

    def reset(self) -> None:
        self.hook = self.ahook = None


during = During()


class Probing:
    """What `Probe`'s handler does with its outbox."""

    use: ClassVar[Callable[[Outbox], Any] | None] = None


class Attempts:
    """How many attempts of `PlaceOrderRetried` fail (after recording), and counts."""

    failures: ClassVar[int] = 0
    made: ClassVar[int] = 0

    @classmethod
    def reset(cls, failures: int = 0) -> None:
        cls.failures = failures
        cls.made = 0

    @classmethod
    def attempt(cls) -> None:
        cls.made += 1
        if cls.made <= cls.failures:
            raise RuntimeError(f"attempt {cls.made} fails")


class Faults:
    """What each delivery of a `Flaky` message does, by name: in turn, then "ok"."""

    plan: ClassVar[dict[str, list[Literal["transient", "domain", "ok"]]]] = {}

    @classmethod
    def reset(cls) -> None:
        cls.plan = {}

    @classmethod
    def fail(cls, name: str) -> None:
        Observed.saw("flaky", name)
        steps = cls.plan.get(name, [])
        step = steps.pop(0) if steps else "ok"
        if step == "transient":
            raise RuntimeError(f"connect to https://inventory/?token={SECRET} failed")
        if step == "domain":
            raise BusinessRuleError(f"out of stock for {name}")


class Overlap:
    """Counts `Slow` runs at once; each waits (bounded) until `target` overlap."""

    target: ClassVar[int] = 1
    running: ClassVar[int] = 0
    most: ClassVar[int] = 0
    reached: ClassVar[threading.Event] = threading.Event()
    areached: ClassVar[asyncio.Event] = asyncio.Event()
    lock: ClassVar[threading.Lock] = threading.Lock()
    WAIT: ClassVar[float] = 5.0  # seconds: far longer than a round needs

    @classmethod
    def reset(cls, target: int) -> None:
        cls.target, cls.running, cls.most = target, 0, 0
        cls.reached = threading.Event()
        cls.areached = asyncio.Event()

    @classmethod
    def enter(cls) -> bool:
        with cls.lock:
            cls.running += 1
            cls.most = max(cls.most, cls.running)
            if cls.running >= cls.target:
                cls.reached.set()
                cls.areached.set()
            return cls.reached.is_set()

    @classmethod
    def leave(cls) -> None:
        with cls.lock:
            cls.running -= 1


# --- handlers, sync --------------------------------------------------------------


class PlaceOrderHandler(CommandHandler[PlaceOrder, list[str]]):
    @inject
    def __init__(self, session: Session, outbox: Outbox) -> None:
        self.session, self.outbox = session, outbox

    def handle(self, request: PlaceOrder) -> list[str]:
        self.session.execute(sa.insert(orders).values(id=request.order_id))
        ids = record(self.outbox, request.outgoing)
        if during.hook is not None:
            self.session.flush()
            during.hook()
        if request.fail:
            raise RuntimeError("the handler fails after recording")
        return ids


class PlaceOrderRetriedHandler(CommandHandler[PlaceOrderRetried, list[str]]):
    @inject
    def __init__(self, session: Session, outbox: Outbox) -> None:
        self.session, self.outbox = session, outbox

    def handle(self, request: PlaceOrderRetried) -> list[str]:
        self.session.execute(sa.insert(orders).values(id=request.order_id))
        ids = record(self.outbox, request.outgoing)
        self.session.flush()
        Attempts.attempt()
        return ids


class PlaceOrderNestedHandler(CommandHandler[PlaceOrderNested, list[str]]):
    @inject
    def __init__(self, session: Session, outbox: Outbox, mediator: Mediator) -> None:
        self.session, self.outbox, self.mediator = session, outbox, mediator

    def handle(self, request: PlaceOrderNested) -> list[str]:
        self.session.execute(sa.insert(orders).values(id=request.order_id))
        ids = record(self.outbox, request.outgoing)
        with contextlib.suppress(RuntimeError):
            self.mediator.send_sync(Inner(outgoing=request.inner))
        return ids


class InnerHandler(CommandHandler[Inner, None]):
    @inject
    def __init__(self, session: Session, outbox: Outbox) -> None:
        self.session, self.outbox = session, outbox

    def handle(self, request: Inner) -> None:
        Observed.saw("inner", "")
        record(self.outbox, request.outgoing)
        self.session.flush()
        raise RuntimeError("the nested send fails after recording")


class ProbeHandler(CommandHandler[Probe, None]):
    @inject
    def __init__(self, outbox: Outbox) -> None:
        self.outbox = outbox

    def handle(self, request: Probe) -> None:
        if Probing.use is not None:
            Probing.use(self.outbox)


class UnrecordedHandler(CommandHandler[Unrecorded, None]):
    @inject
    def __init__(self, outbox: Outbox) -> None:
        self.outbox = outbox

    def handle(self, request: Unrecorded) -> None:
        self.outbox.send(Reserve(order_id=request.order_id))


class ReserveHandler(CommandHandler[Reserve, None]):
    @inject
    def __init__(self, session: Session) -> None:
        self.session = session

    def handle(self, request: Reserve) -> None:
        Observed.saw("reserve", request.order_id)
        self.session.execute(
            sa.insert(applied).values(
                order_id=request.order_id, key=current_idempotency_key()
            )
        )


class FlakyHandler(CommandHandler[Flaky, None]):
    def handle(self, request: Flaky) -> None:
        Faults.fail(request.name)


class SlowHandler(CommandHandler[Slow, None]):
    def handle(self, request: Slow) -> None:
        Observed.saw("slow", request.name)
        try:
            if not Overlap.enter():
                Overlap.reached.wait(Overlap.WAIT)
        finally:
            Overlap.leave()


class OrderPlacedHandler(NotificationHandler[OrderPlaced]):
    def handle(self, notification: OrderPlaced) -> None:
        Observed.saw("notify", notification.order_id)


# --- handlers, async ---------------------------------------------------------------


class PlaceOrderAsyncHandler(CommandHandler[PlaceOrder, list[str]]):
    @inject
    def __init__(self, session: AsyncSession, outbox: Outbox) -> None:
        self.session, self.outbox = session, outbox

    async def handle(self, request: PlaceOrder) -> list[str]:
        await self.session.execute(sa.insert(orders).values(id=request.order_id))
        ids = record(self.outbox, request.outgoing)
        if during.ahook is not None:
            await self.session.flush()
            await during.ahook()
        if request.fail:
            raise RuntimeError("the handler fails after recording")
        return ids


class PlaceOrderRetriedAsyncHandler(CommandHandler[PlaceOrderRetried, list[str]]):
    @inject
    def __init__(self, session: AsyncSession, outbox: Outbox) -> None:
        self.session, self.outbox = session, outbox

    async def handle(self, request: PlaceOrderRetried) -> list[str]:
        await self.session.execute(sa.insert(orders).values(id=request.order_id))
        ids = record(self.outbox, request.outgoing)
        await self.session.flush()
        Attempts.attempt()
        return ids


class PlaceOrderNestedAsyncHandler(CommandHandler[PlaceOrderNested, list[str]]):
    @inject
    def __init__(
        self, session: AsyncSession, outbox: Outbox, mediator: Mediator
    ) -> None:
        self.session, self.outbox, self.mediator = session, outbox, mediator

    async def handle(self, request: PlaceOrderNested) -> list[str]:
        await self.session.execute(sa.insert(orders).values(id=request.order_id))
        ids = record(self.outbox, request.outgoing)
        with contextlib.suppress(RuntimeError):
            await self.mediator.send(Inner(outgoing=request.inner))
        return ids


class InnerAsyncHandler(CommandHandler[Inner, None]):
    @inject
    def __init__(self, session: AsyncSession, outbox: Outbox) -> None:
        self.session, self.outbox = session, outbox

    async def handle(self, request: Inner) -> None:
        Observed.saw("inner", "")
        record(self.outbox, request.outgoing)
        await self.session.flush()
        raise RuntimeError("the nested send fails after recording")


class ProbeAsyncHandler(CommandHandler[Probe, None]):
    @inject
    def __init__(self, outbox: Outbox) -> None:
        self.outbox = outbox

    async def handle(self, request: Probe) -> None:
        if Probing.use is not None:
            Probing.use(self.outbox)


class UnrecordedAsyncHandler(CommandHandler[Unrecorded, None]):
    @inject
    def __init__(self, outbox: Outbox) -> None:
        self.outbox = outbox

    async def handle(self, request: Unrecorded) -> None:
        self.outbox.send(Reserve(order_id=request.order_id))


class ReserveAsyncHandler(CommandHandler[Reserve, None]):
    @inject
    def __init__(self, session: AsyncSession) -> None:
        self.session = session

    async def handle(self, request: Reserve) -> None:
        Observed.saw("reserve", request.order_id)
        await self.session.execute(
            sa.insert(applied).values(
                order_id=request.order_id, key=current_idempotency_key()
            )
        )


class FlakyAsyncHandler(CommandHandler[Flaky, None]):
    async def handle(self, request: Flaky) -> None:
        Faults.fail(request.name)


class SlowAsyncHandler(CommandHandler[Slow, None]):
    async def handle(self, request: Slow) -> None:
        Observed.saw("slow", request.name)
        try:
            if not Overlap.enter():
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(Overlap.areached.wait(), Overlap.WAIT)
            # Let the other deliveries run before this one ends: one past the
            # relay's bound would start now, and be counted.
            for _ in range(10):
                await checkpoint()
        finally:
            Overlap.leave()


class OrderPlacedAsyncHandler(NotificationHandler[OrderPlaced]):
    async def handle(self, notification: OrderPlaced) -> None:
        Observed.saw("notify", notification.order_id)


SYNC_HANDLERS: tuple[type[Any], ...] = (
    PlaceOrderHandler,
    PlaceOrderRetriedHandler,
    PlaceOrderNestedHandler,
    InnerHandler,
    ProbeHandler,
    ReserveHandler,
    FlakyHandler,
    SlowHandler,
    OrderPlacedHandler,
)
ASYNC_HANDLERS: tuple[type[Any], ...] = (
    PlaceOrderAsyncHandler,
    PlaceOrderRetriedAsyncHandler,
    PlaceOrderNestedAsyncHandler,
    InnerAsyncHandler,
    ProbeAsyncHandler,
    ReserveAsyncHandler,
    FlakyAsyncHandler,
    SlowAsyncHandler,
    OrderPlacedAsyncHandler,
)


# --- a hook between a delivery and its recorded outcome ----------------------------


@dataclass
class AfterReserve:
    """Runs `then` once, after a `Reserve` send returns (its transaction over).

    Outermost in the chain, so it runs after the receiver committed and before
    the relay that delivered records the outcome: where a second relay may
    take the message over once the first one's lease ran out.
    """

    then: Callable[[], Any] | None = None

    def take(self) -> Callable[[], Any] | None:
        then, self.then = self.then, None
        return then


after_reserve = AfterReserve()


class AfterReserveBehavior:
    stage: ClassVar[Stage] = Stage(10, "AFTER_RESERVE")

    def applies_to(self, request_type: type[Any]) -> bool:
        return request_type is Reserve

    async def handle(self, request: Any, next: Next[Any]) -> Any:
        response = await next()
        then = after_reserve.take()
        if then is not None:
            await then()
        return response

    def handle_sync(self, request: Any, next: SyncNext[Any]) -> Any:
        response = next()
        then = after_reserve.take()
        if then is not None:
            then()
        return response


class AfterReserveModule(Module):
    def configure(self, binder: Any) -> None:
        register_behavior(binder, AfterReserveBehavior)


def build(
    kind: Literal["sync", "async"],
    engine: sa.Engine,
    async_engine: AsyncEngine,
    *,
    wall_clock: WallClock | None = None,
) -> Mediator:
    """A mediator with the default chain, retry and the handlers of `kind`;
    `wall_clock`, if given, is bound as its `WallClock`."""
    handlers = SYNC_HANDLERS if kind == "sync" else ASYNC_HANDLERS
    database = (
        SqlAlchemyModule(engine=engine)
        if kind == "sync"
        else SqlAlchemyModule(async_engine=async_engine)
    )
    resilience = ResilienceMediatorModule(
        ResilienceMediatorOptions(max_retry_attempts=3, use_jitter=False),
        clock=FakeClock(),
    )
    modules: list[Module | Callable[[Binder], None]] = [
        MediatorModule(lambda m: m.add_handler(*handlers).use_defaults()),
        resilience,
        database,
        AfterReserveModule(),
    ]
    if wall_clock is not None:
        bound = wall_clock
        modules.append(lambda binder: binder.bind(WallClock, to=bound))
    return Injector(modules).get(Mediator)
