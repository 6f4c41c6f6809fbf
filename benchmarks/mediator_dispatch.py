"""Dispatch overhead per send: a direct call, hand-written dispatch, ours, the peers.

Every row sends one request to a trivial handler that returns a constant, so
what is left is the cost of getting there. Each row is timed with
`time.perf_counter` over many calls, best of several repeats, after a warm-up;
the repeats go round-robin over the rows so a slow moment hurts them alike.
Rows are reported in ns per send and as a ratio to the matching direct call
(`await handler.handle(req)` for the async rows, `handler.handle(req)` for the
sync ones). The figures include the loop that makes the calls, for every row.

Run it with ``make bench``: the peers (mediatr, diator, python-cqrs, lato) are
installed only in ``.venv-bench``. A peer that is not installed is reported as
such and skipped, so the script also runs in the dev ``.venv``.

The budgets are DESIGN section 8: ``send`` with no behaviors <= 2.5x direct,
<= 150 ns per behavior that applies, ~0 for one that does not; the sync path
likewise. And issue 3's: a request with no markers, sent through a mediator
built with ``use_defaults()`` (so the built-in behaviors are installed, and the
audit logger is off, as an unconfigured one is), costs <= 1 us over the same
request with no behaviors. And issue 29's: a ``@fallback`` query that
answers costs one link (<= 150 ns) over an unmarked one under
``use_defaults()``. This script only reports them: it never fails on a
timing.
"""

# No `from __future__ import annotations` here: mediatr and lato read the
# request type from the handler's annotations with `inspect.signature`, and
# string annotations would break mediatr's behavior lookup.

import asyncio
import gc
import importlib.metadata
import itertools
import math
import os
import platform
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from time import perf_counter
from typing import Any, ClassVar

from injector import Injector, singleton

from mediator import (
    AuditSink,
    FallbackHandler,
    Mediator,
    MediatorModule,
    Query,
    QueryHandler,
    Stage,
    fallback,
)

Call = Callable[[Any], Any]

DIRECT = "direct await handler.handle(req)"
SYNC_DIRECT = "direct handler.handle(req)"

REPEATS = 9  # best of
TARGET_SECONDS = 0.15  # per repeat and row: enough calls to dwarf timer resolution
CALIBRATE_SECONDS = 0.02
BEHAVIORS = 3

SEND_BUDGET_RATIO = 2.5  # DESIGN 8: send, no behaviors, <= 2.5x direct
BEHAVIOR_BUDGET_NS = 150.0  # DESIGN 8: each behavior that applies
SKIPPED_BUDGET_NS = 10.0  # DESIGN 8 says ~0; allow timing noise
DEFAULTS_BUDGET_NS = 1000.0  # issue 3: use_defaults(), no markers, over none


@dataclass
class Row:
    """One measured way of sending the request."""

    label: str
    call: Call
    request: Any
    is_async: bool
    baseline: str  # label of the direct-call row it is compared with
    # For a row with behaviors: the label of the same setup without them.
    without_behaviors: str | None = None
    # "send", "behavior", "skipped", "defaults" or "fallback" (one link: the
    # FallbackBehavior of a @fallback query that answers): which budget applies
    budget: str = ""
    expected: Any = 1  # what the handler returns: checked once before timing
    number: int = 0
    best: float = math.inf  # seconds per call

    @property
    def ns(self) -> float:
        return self.best * 1e9


@dataclass
class Section:
    """A group of rows printed under one heading."""

    title: str
    rows: list[Row]


# --- ours ------------------------------------------------------------------------


class Ping(Query[int]):
    n: int


class PingHandler(QueryHandler[Ping, int]):
    async def handle(self, request: Ping) -> int:
        return 1


class SyncPing(Query[int]):
    n: int


class SyncPingHandler(QueryHandler[SyncPing, int]):
    def handle(self, request: SyncPing) -> int:
        return 1


class SingletonPing(Query[int]):
    n: int


class SingletonSyncPing(Query[int]):
    n: int


@singleton
class SingletonPingHandler(QueryHandler[SingletonPing, int]):
    """Built once, with the mediator: a send calls its bound `handle` directly."""

    async def handle(self, request: SingletonPing) -> int:
        return 1


@singleton
class SingletonSyncPingHandler(QueryHandler[SingletonSyncPing, int]):
    def handle(self, request: SingletonSyncPing) -> int:
        return 1


class CachedPing(FallbackHandler["FallbackPing", int]):
    def handle(self, request: "FallbackPing", failure: Exception) -> int:
        return 0


@fallback(CachedPing)
class FallbackPing(Query[int]):
    """A @fallback query whose handler answers: the fallback never runs."""

    n: int


@fallback(CachedPing)
class SyncFallbackPing(FallbackPing):
    pass


class FallbackPingHandler(QueryHandler[FallbackPing, int]):
    async def handle(self, request: FallbackPing) -> int:
        return 1


class SyncFallbackPingHandler(QueryHandler[SyncFallbackPing, int]):
    def handle(self, request: SyncFallbackPing) -> int:
        return 1


class NoOp:
    stage: ClassVar[Stage] = Stage.AUDIT

    async def handle(self, request: Any, next: Callable[[], Awaitable[Any]]) -> Any:
        return await next()

    def handle_sync(self, request: Any, next: Callable[[], Any]) -> Any:
        return next()


class NoOpElsewhere(NoOp):
    """A no-op that applies to no type sent here: it should cost nothing."""

    def applies_to(self, request_type: type[Any]) -> bool:
        return False


def _distinct(base: type[Any], count: int) -> list[type[Any]]:
    # A behavior class is registered once, so each link needs its own class.
    return [type(f"{base.__name__}{i}", (base,), {}) for i in range(1, count + 1)]


HANDLERS = (
    PingHandler,
    SyncPingHandler,
    SingletonPingHandler,
    SingletonSyncPingHandler,
)
FALLBACK_HANDLERS = (FallbackPingHandler, SyncFallbackPingHandler)


def _mediator(behaviors: list[type[Any]]) -> Mediator:
    # Hand-wired: use_defaults() would install the built-in behaviors too.
    module = MediatorModule(lambda m: m.add_handler(*HANDLERS).add_behavior(*behaviors))
    return Injector([module]).get(Mediator)


def _mediator_with_defaults() -> Mediator:
    """The built-in behaviors installed, the audit logger left as it is: off."""
    injector = Injector(
        [
            MediatorModule(
                lambda m: m.add_handler(*HANDLERS, *FALLBACK_HANDLERS).use_defaults()
            )
        ]
    )
    if injector.get(AuditSink).is_enabled():
        raise RuntimeError(
            "the audit sink is enabled (is the mediator.audit logger configured "
            "for INFO?), so the use_defaults() rows would measure audit records"
        )
    return injector.get(Mediator)


# --- hand-written references -----------------------------------------------------


async def _noop_behavior(request: Any, next: Callable[[], Awaitable[Any]]) -> Any:
    return await next()


def _closure_chain(inner: Call, count: int) -> Call:
    for _ in range(count):
        inner = _wrap(inner)
    return inner


def _wrap(inner: Call) -> Call:
    return lambda request: _noop_behavior(request, lambda: inner(request))


def _ours_and_references() -> list[Section]:
    handler = PingHandler()
    sync_handler = SyncPingHandler()
    handlers: dict[type[Any], Any] = {Ping: handler, SyncPing: sync_handler}

    def dict_dispatch(request: Any) -> Any:
        return handlers[type(request)].handle(request)

    plain = _mediator([])
    chained = _mediator(_distinct(NoOp, BEHAVIORS))
    skipped = _mediator(_distinct(NoOpElsewhere, BEHAVIORS))
    defaults = _mediator_with_defaults()
    ping, sync_ping = Ping(n=1), SyncPing(n=1)
    ours0, sync0 = "mediator.send, 0 behaviors", "mediator.send_sync, 0 behaviors"
    return [
        Section(
            "async",
            [
                Row(DIRECT, handler.handle, ping, True, DIRECT),
                Row("hand-written dict dispatch", dict_dispatch, ping, True, DIRECT),
                Row(
                    f"hand-written closure chain, {BEHAVIORS} behaviors",
                    _closure_chain(handler.handle, BEHAVIORS),
                    ping,
                    True,
                    DIRECT,
                    without_behaviors=DIRECT,
                ),
                Row(ours0, plain.send, ping, True, DIRECT, budget="send"),
                Row(
                    "mediator.send, 0 behaviors, @singleton handler",
                    plain.send,
                    SingletonPing(n=1),
                    True,
                    DIRECT,
                ),
                Row(
                    f"mediator.send, {BEHAVIORS} behaviors",
                    chained.send,
                    ping,
                    True,
                    DIRECT,
                    without_behaviors=ours0,
                    budget="behavior",
                ),
                Row(
                    f"mediator.send, {BEHAVIORS} behaviors that do not apply",
                    skipped.send,
                    ping,
                    True,
                    DIRECT,
                    without_behaviors=ours0,
                    budget="skipped",
                ),
                Row(
                    "mediator.send, use_defaults(), no markers",
                    defaults.send,
                    ping,
                    True,
                    DIRECT,
                    without_behaviors=ours0,
                    budget="defaults",
                ),
                Row(
                    "mediator.send, use_defaults(), @fallback, answered",
                    defaults.send,
                    FallbackPing(n=1),
                    True,
                    DIRECT,
                    without_behaviors="mediator.send, use_defaults(), no markers",
                    budget="fallback",
                ),
            ],
        ),
        Section(
            "sync",
            [
                Row(SYNC_DIRECT, sync_handler.handle, sync_ping, False, SYNC_DIRECT),
                Row(
                    "hand-written dict dispatch (sync)",
                    dict_dispatch,
                    sync_ping,
                    False,
                    SYNC_DIRECT,
                ),
                Row(
                    sync0, plain.send_sync, sync_ping, False, SYNC_DIRECT, budget="send"
                ),
                Row(
                    "mediator.send_sync, 0 behaviors, @singleton handler",
                    plain.send_sync,
                    SingletonSyncPing(n=1),
                    False,
                    SYNC_DIRECT,
                ),
                Row(
                    f"mediator.send_sync, {BEHAVIORS} behaviors",
                    chained.send_sync,
                    sync_ping,
                    False,
                    SYNC_DIRECT,
                    without_behaviors=sync0,
                    budget="behavior",
                ),
                Row(
                    "mediator.send_sync, use_defaults(), no markers",
                    defaults.send_sync,
                    sync_ping,
                    False,
                    SYNC_DIRECT,
                    without_behaviors=sync0,
                    budget="defaults",
                ),
                Row(
                    "mediator.send_sync, use_defaults(), @fallback, answered",
                    defaults.send_sync,
                    SyncFallbackPing(n=1),
                    False,
                    SYNC_DIRECT,
                    without_behaviors="mediator.send_sync, use_defaults(), no markers",
                    budget="fallback",
                ),
            ],
        ),
    ]


# --- peers, each set up the way its README shows -----------------------------------


def _peer_rows(
    name: str, zero: Call, three: Call, request: Any, expected: Any = 1
) -> list[Row]:
    label0 = f"{name}, 0 behaviors"
    return [
        Row(label0, zero, request, True, DIRECT, expected=expected),
        Row(
            f"{name}, {BEHAVIORS} behaviors",
            three,
            request,
            True,
            DIRECT,
            without_behaviors=label0,
            expected=expected,
        ),
    ]


def _mediatr() -> list[Row]:
    # Handlers and behaviors live in module-level registries keyed by the request
    # type, and a behavior applies to its type's subclasses: two unrelated types.
    from mediatr import Mediator as MediatrMediator

    class PingM:
        def __init__(self, n: int) -> None:
            self.n = n

    class PingM3:
        def __init__(self, n: int) -> None:
            self.n = n

    class PingMHandler:
        async def handle(self, request: PingM) -> int:
            return 1

    class PingM3Handler:
        async def handle(self, request: PingM3) -> int:
            return 1

    class NoOpM:
        async def handle(self, request: PingM3, next: Callable[[], Any]) -> Any:
            return await next()

    MediatrMediator.register_handler(PingMHandler)
    MediatrMediator.register_handler(PingM3Handler)
    for behavior in _distinct(NoOpM, BEHAVIORS):
        MediatrMediator.register_behavior(behavior)
    mediator = MediatrMediator()
    label0 = "mediatr, 0 behaviors"
    return [
        Row(label0, mediator.send_async, PingM(n=1), True, DIRECT),
        Row(
            f"mediatr, {BEHAVIORS} behaviors",
            mediator.send_async,
            PingM3(n=1),
            True,
            DIRECT,
            without_behaviors=label0,
        ),
    ]


def _diator() -> list[Row]:
    from dataclasses import dataclass as _dataclass

    from di import Container, bind_by_type
    from di.dependent import Dependent
    from diator.container.di import DIContainer
    from diator.events import EventEmitter, EventMap
    from diator.mediator import Mediator as DiatorMediator
    from diator.middlewares import MiddlewareChain
    from diator.requests import Request, RequestHandler, RequestMap

    @_dataclass(frozen=True, kw_only=True)
    class PingD(Request):  # type: ignore[misc]
        n: int

    # diator types a response as a diator Response but does not check it.
    class PingDHandler(RequestHandler[PingD, None]):  # type: ignore[misc]
        def __init__(self) -> None:
            self._events: list[Any] = []

        @property
        def events(self) -> list[Any]:
            return self._events

        async def handle(self, request: PingD) -> int:
            return 1

    class NoOpD:
        async def __call__(self, request: Any, handle: Call) -> Any:
            return await handle(request)

    def build(middlewares: int) -> Any:
        external = Container()
        external.bind(
            bind_by_type(Dependent(PingDHandler, scope="request"), PingDHandler)
        )
        container = DIContainer()
        container.attach_external_container(external)
        request_map = RequestMap()
        request_map.bind(PingD, PingDHandler)
        chain = MiddlewareChain()
        for _ in range(middlewares):
            chain.add(NoOpD())
        emitter = EventEmitter(
            event_map=EventMap(), container=container, message_broker=None
        )
        return DiatorMediator(
            request_map=request_map,
            event_emitter=emitter,
            container=container,
            middleware_chain=chain,
        )

    return _peer_rows("diator", build(0).send, build(BEHAVIORS).send, PingD(n=1))


def _python_cqrs() -> list[Row]:
    # bootstrap() always appends its LoggingMiddleware, which calls to_dict() on
    # the request and the response on every send (so the handler returns a
    # cqrs.Response), whatever the log level. Both rows carry it; the
    # per-behavior figure is their difference, which cancels it.
    import cqrs
    import di
    from cqrs.bootstrap import requests as bootstrap

    class PongC(cqrs.Response):  # type: ignore[misc]
        value: int

    class PingC(cqrs.Request[PongC]):  # type: ignore[misc]
        n: int

    pong = PongC(value=1)

    class PingCHandler(cqrs.RequestHandler[PingC, PongC]):  # type: ignore[misc]
        @property
        def events(self) -> list[Any]:
            return []

        async def handle(self, request: PingC) -> Any:
            return pong

    class NoOpC:
        async def __call__(self, request: Any, handle: Call) -> Any:
            return await handle(request)

    def queries_mapper(mapper: Any) -> None:
        mapper.bind(PingC, PingCHandler)

    def build(middlewares: int) -> Any:
        return bootstrap.bootstrap(
            di_container=di.Container(),
            queries_mapper=queries_mapper,
            middlewares=[NoOpC() for _ in range(middlewares)],
        )

    return _peer_rows(
        "python-cqrs", build(0).send, build(BEHAVIORS).send, PingC(n=1), pong
    )


def _lato() -> list[Row]:
    # Transaction middlewares wrap every call of an Application, so each row
    # gets its own Application.
    from lato import Application
    from lato import Query as LatoQuery

    class PingL(LatoQuery):  # type: ignore[misc]
        n: int

    async def handle_ping(query: PingL) -> int:
        return 1

    async def noop(ctx: Any, call_next: Callable[[], Awaitable[Any]]) -> Any:
        return await call_next()

    def build(middlewares: int) -> Any:
        app = Application("bench")
        app.handler(PingL)(handle_ping)
        for _ in range(middlewares):
            app.transaction_middleware(noop)
        return app

    return _peer_rows(
        "lato", build(0).execute_async, build(BEHAVIORS).execute_async, PingL(n=1)
    )


PEERS: list[tuple[str, str, Callable[[], list[Row]]]] = [
    ("mediatr", "mediatr", _mediatr),
    ("diator", "diator", _diator),
    ("python-cqrs", "python-cqrs", _python_cqrs),
    ("lato", "lato", _lato),
]


def _peers() -> tuple[Section, list[str]]:
    rows: list[Row] = []
    notes: list[str] = []
    for name, distribution, setup in PEERS:
        try:
            version = importlib.metadata.version(distribution)
        except importlib.metadata.PackageNotFoundError:
            notes.append(f"{name}: not installed (run `make bench`), skipped")
            continue
        rows.extend(setup())
        notes.append(f"{name} {version}")
    return Section("peers, async", rows), notes


# --- timing ------------------------------------------------------------------------


async def _time_async(call: Call, request: Any, number: int) -> float:
    calls = itertools.repeat(None, number)  # timeit's loop: cheaper than range()
    start = perf_counter()
    for _ in calls:
        await call(request)
    return perf_counter() - start


def _time_sync(call: Call, request: Any, number: int) -> float:
    calls = itertools.repeat(None, number)
    start = perf_counter()
    for _ in calls:
        call(request)
    return perf_counter() - start


def _loop_ns() -> float:
    """What the timing loop itself costs per call: included in every row."""
    number = 1_000_000
    best = math.inf
    for _ in range(REPEATS):
        calls = itertools.repeat(None, number)
        start = perf_counter()
        for _ in calls:
            pass
        best = min(best, perf_counter() - start)
    return best / number * 1e9


class _Timer:
    """Times rows: the async ones on one event loop, the sync ones outside any."""

    def __init__(self, runner: asyncio.Runner) -> None:
        self._runner = runner

    def time(self, row: Row, number: int) -> float:
        gc.collect()
        gc.disable()
        try:
            if row.is_async:
                return self._runner.run(_time_async(row.call, row.request, number))
            return _time_sync(row.call, row.request, number)
        finally:
            gc.enable()

    def check(self, row: Row) -> None:
        if row.is_async:
            result = self._runner.run(_once(row.call, row.request))
        else:
            result = row.call(row.request)
        if result != row.expected:
            raise RuntimeError(f"{row.label} returned {result!r}, not {row.expected!r}")

    def calibrate(self, row: Row) -> None:
        """Warm the row up and pick how many calls one repeat makes."""
        number = 1
        while True:
            elapsed = self.time(row, number)
            if elapsed >= CALIBRATE_SECONDS:
                break
            number *= 10
        row.number = max(1, int(number * TARGET_SECONDS / elapsed))


async def _once(call: Call, request: Any) -> Any:
    return await call(request)


def _measure(rows: list[Row]) -> None:
    with asyncio.Runner() as runner:
        timer = _Timer(runner)
        for row in rows:
            timer.check(row)
            timer.calibrate(row)
        for _ in range(REPEATS):
            for row in rows:
                elapsed = timer.time(row, row.number)
                row.best = min(row.best, elapsed / row.number)


# --- report ------------------------------------------------------------------------


def _verdict(
    row: Row, ratio: float, over: float | None, per_behavior: float | None
) -> tuple[str, str]:
    if row.budget == "defaults" and over is not None:
        return f"<= {DEFAULTS_BUDGET_NS / 1000:.0f} us over none", _met(
            over <= DEFAULTS_BUDGET_NS
        )
    if row.budget == "send":
        return f"<= {SEND_BUDGET_RATIO}x", _met(ratio <= SEND_BUDGET_RATIO)
    if row.budget in ("behavior", "fallback") and per_behavior is not None:
        return f"<= {BEHAVIOR_BUDGET_NS:.0f} ns/beh", _met(
            per_behavior <= BEHAVIOR_BUDGET_NS
        )
    if row.budget == "skipped" and per_behavior is not None:
        return "~0 ns/beh", _met(abs(per_behavior) <= SKIPPED_BUDGET_NS)
    return "", ""


def _met(ok: bool) -> str:
    return "met" if ok else "MISSED"


def _report(
    sections: list[Section], notes: list[str], loop_ns: float, seconds: float
) -> str:
    by_label = {row.label: row for section in sections for row in section.rows}
    header = (
        "path",
        "ns/op",
        "x direct",
        "ns over none",
        "ns/behavior",
        "budget",
        "met?",
    )
    lines = [
        "| " + " | ".join(header) + " |",
        "| --- | ---: | ---: | ---: | ---: | --- | --- |",
    ]
    for section in sections:
        lines.append(f"| **{section.title}** | | | | | | |")
        for row in section.rows:
            ratio = row.best / by_label[row.baseline].best
            over: float | None = None
            per_behavior: float | None = None
            if row.without_behaviors is not None:
                over = row.ns - by_label[row.without_behaviors].ns
                if row.budget == "fallback":
                    per_behavior = over  # one link: FallbackBehavior
                elif row.budget != "defaults":
                    per_behavior = over / BEHAVIORS
            budget, verdict = _verdict(row, ratio, over, per_behavior)
            cells = (
                row.label,
                f"{row.ns:,.0f}",
                f"{ratio:.2f}",
                "" if over is None else f"{round(over):,}",
                "" if per_behavior is None else f"{round(per_behavior):,}",
                budget,
                verdict,
            )
            lines.append("| " + " | ".join(cells) + " |")
    cores = os.cpu_count()
    about = (
        f"Python {platform.python_version()} ({sys.implementation.name}), "
        f"{platform.system()} {platform.machine()}, {cores} cores; "
        f"mediator-core {importlib.metadata.version('mediator-core')}, "
        f"injector {importlib.metadata.version('injector')}, "
        f"pydantic {importlib.metadata.version('pydantic')}; " + "; ".join(notes)
    )
    footer = (
        f"ns/op: best of {REPEATS} repeats of ~{TARGET_SECONDS:.2f} s per row; it "
        f"includes the timing loop itself ({loop_ns:.0f} ns per call). "
        "ns over none: the row minus the same send with no behaviors. "
        f"ns/behavior: that over the {BEHAVIORS} behaviors. "
        f"Run took {seconds:.0f} s."
    )
    return "\n".join([about, "", *lines, "", footer])


def main() -> None:
    started = perf_counter()
    sections = _ours_and_references()
    peers, notes = _peers()
    if peers.rows:
        sections.append(peers)
    _measure([row for section in sections for row in section.rows])
    loop_ns = _loop_ns()
    print(_report(sections, notes, loop_ns, perf_counter() - started))


if __name__ == "__main__":
    main()
