"""The frame of the HTTP guard scenarios: a client, 200 callers, the checks after.

`scenario` opens a `Scenario`: a real `httpx.AsyncClient` of at most
`CONNECTIONS` connections against the fault server, with two secrets
planted in every request (`SECRET` as a bearer token, `TOKEN` as a
``?token=`` query parameter) and every event it emits kept. When it ends, it
checks that tasks, fds and sockets are back to their baseline and that no
secret appears in the logs, events and exceptions the scenario let out
(httpx's own ``HTTP Request:`` line, which carries the whole URL, is dropped
meanwhile; every other record is watched).

`at_once` releases many calls together (`Scenario.wave`: `CALLERS` gets of
one route under one key), `kinds` counts their outcomes and `until` waits,
bounded, for what the server's counters show. `opened_breaker` opens the
breaker of a scenario on the `BREAKER` options and a `FakeClock`;
`all_refused` and `all_through` show a wave refused while it is open and
answered once it has closed again. `hedging` builds the hedged pipeline,
`hedged_calls` makes one hedged call per key, and `LaterCopiesElsewhere`
steers a call's later copies to another route. `SkippingClock` lets a test
skip a break while hedging runs in real time.
"""

from __future__ import annotations

import asyncio
import uuid
from collections import Counter
from collections.abc import AsyncGenerator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import TypeVar

import httpx
from anyio.lowlevel import checkpoint

from http_resilience import (
    BreakerEvent,
    Clock,
    HttpEvent,
    HttpResilienceOptions,
    ResiliencePipeline,
    SystemClock,
    create_async_client,
)
from http_resilience.testing import FakeClock
from tests.chaos.invariants import (
    SecretWatch,
    assert_back_to_baseline,
    leftovers,
    watch_secrets,
    without_httpx_request_lines,
)
from tests.support.fault_server import FaultServer

T = TypeVar("T")
E = TypeVar("E")

CALLERS = 200
CONNECTIONS = 16
LIMITS = httpx.Limits(
    max_connections=CONNECTIONS, max_keepalive_connections=CONNECTIONS
)
SECRET = f"sk-live-{uuid.uuid4().hex}"
TOKEN = f"tok-{uuid.uuid4().hex}"
CLOCK = SystemClock()
POLL = 0.005  # seconds, between two looks at the server's counters
POLL_LIMIT = 5.0  # seconds

BREAK = 3.0  # seconds, on the fake clock
BREAKER = HttpResilienceOptions.model_validate(
    {
        "max_retry_attempts": 0,  # one attempt per call: every hit is one call
        "minimum_throughput": 5,
        "failure_ratio": 0.5,
        "sampling_duration": 10,
        "break_duration": BREAK,
        "attempt_timeout": 2,
        "total_request_timeout": 5,
    }
)
FAILURES_TO_OPEN = 5

HEDGES = 2
# Calls in flight at once, each with up to HEDGES + 1 copies: within the pool.
HEDGED_CALLS = CONNECTIONS // (HEDGES + 1)


# --- the scenario's frame: baseline, secrets, client, leftovers -----------------------


@dataclass
class Scenario:
    """A client with secrets planted in every request, and what it let out."""

    client: httpx.AsyncClient
    server: FaultServer
    watch: SecretWatch
    events: list[HttpEvent] = field(default_factory=list[HttpEvent])

    def url(self, route: str, key: str) -> str:
        return f"{self.server.url}{route}?key={key}&token={TOKEN}"

    async def get(self, route: str, key: str) -> httpx.Response:
        return await self.client.get(self.url(route, key))

    def of(self, kind: type[E]) -> list[E]:
        return [event for event in self.events if isinstance(event, kind)]

    def keep(self, outcomes: list[httpx.Response | Exception]) -> None:
        """Show every exception to the secret watch."""
        for outcome in outcomes:
            if isinstance(outcome, Exception):
                self.watch.exception(outcome)

    async def wave(self, route: str, key: str) -> list[httpx.Response | Exception]:
        """`CALLERS` gets of `route` under `key` at once, kept for the watch."""
        outcomes = await at_once(CALLERS, lambda i: self.get(route, key))
        self.keep(outcomes)
        return outcomes


@asynccontextmanager
async def scenario(
    server: FaultServer,
    *,
    options: HttpResilienceOptions | None = None,
    pipeline: ResiliencePipeline | None = None,
    clock: Clock | None = None,
    later_copies_to: str | None = None,
) -> AsyncGenerator[Scenario]:
    """Run a scenario; afterwards check it left nothing behind and leaked nothing.

    `later_copies_to` sends every copy of a call after its first to that route
    instead (`LaterCopiesElsewhere`).
    """
    baseline = leftovers()
    with without_httpx_request_lines(), watch_secrets() as watch:
        events: list[HttpEvent] = []
        sender = httpx.AsyncHTTPTransport(limits=LIMITS)
        transport: httpx.AsyncBaseTransport = (
            sender
            if later_copies_to is None
            else LaterCopiesElsewhere(sender, later_copies_to)
        )
        client = create_async_client(
            "chaos",
            options,
            pipeline=pipeline,
            clock=clock,
            listeners=[watch.event, events.append],
            headers={"Authorization": f"Bearer {SECRET}"},
            transport=transport,
        )
        try:
            yield Scenario(client, server, watch, events)
        finally:
            await client.aclose()
        await assert_back_to_baseline(baseline)
    watch.assert_absent(SECRET, TOKEN)


async def at_once(
    count: int, call: Callable[[int], Awaitable[T]]
) -> list[T | Exception]:
    """Run `call(0)` ... `call(count - 1)` in tasks released together."""
    start = asyncio.Event()
    waiting = 0

    async def one(index: int) -> T | Exception:
        nonlocal waiting
        waiting += 1
        await start.wait()
        try:
            return await call(index)
        except Exception as error:
            return error

    tasks = [asyncio.create_task(one(index)) for index in range(count)]
    await checkpoint()  # every task runs to the start line
    assert waiting == count
    start.set()
    return await asyncio.gather(*tasks)


async def until(condition: Callable[[], bool], what: str) -> None:
    """Wait, a bounded time, for a condition the server's counters show."""
    deadline = CLOCK.monotonic() + POLL_LIMIT
    while not condition():
        assert CLOCK.monotonic() < deadline, f"not within {POLL_LIMIT} s: {what}"
        await CLOCK.sleep(POLL)


def kinds(outcomes: list[httpx.Response | Exception]) -> Counter[str]:
    """Each outcome as its status code or its exception's class name, counted."""
    return Counter(
        str(outcome.status_code)
        if isinstance(outcome, httpx.Response)
        else type(outcome).__name__
        for outcome in outcomes
    )


def key(name: str) -> str:
    return f"{name}-{uuid.uuid4().hex}"


# --- the breaker ---------------------------------------------------------------------


def transitions(run: Scenario) -> list[tuple[str, str]]:
    return [(event.previous, event.current) for event in run.of(BreakerEvent)]


async def open_the_breaker(run: Scenario) -> None:
    failing = key("failing")
    for _ in range(FAILURES_TO_OPEN):
        assert (await run.get("/status/503", failing)).status_code == 503
    assert run.server.hits(failing) == FAILURES_TO_OPEN
    assert transitions(run)[-1] == ("closed", "open")


@asynccontextmanager
async def opened_breaker(
    server: FaultServer,
) -> AsyncGenerator[tuple[Scenario, FakeClock]]:
    """A scenario on the `BREAKER` options and a `FakeClock`, its breaker open."""
    clock = FakeClock()
    async with scenario(server, options=BREAKER, clock=clock) as run:
        await open_the_breaker(run)
        yield run, clock


async def all_refused(run: Scenario, name: str) -> list[httpx.Response | Exception]:
    """200 callers at once while the breaker is open: none may reach the server."""
    refused = key(name)
    outcomes = await run.wave("/healthy", refused)
    assert kinds(outcomes) == {"BrokenCircuitError": CALLERS}
    assert run.server.hits(refused) == 0
    return outcomes


async def all_through(run: Scenario, name: str) -> str:
    """200 callers at once, the breaker closed again: all answered. Their key."""
    after = key(name)
    flowing = await run.wave("/healthy", after)
    assert kinds(flowing) == {"200": CALLERS}, kinds(flowing)
    return after


# --- hedging -------------------------------------------------------------------------


def hedging(delay: float) -> ResiliencePipeline:
    # The limiter outside keeps every copy of every admitted call within the
    # client's 16 connections: no copy waits in httpx's pool, so each reaches
    # the server when it is sent.
    return (
        ResiliencePipeline()
        .add_limiter(concurrency_limit=HEDGED_CALLS, queue_limit=CALLERS)
        .add_hedging(delay=delay, max_hedged_attempts=HEDGES)
        .add_timeout("2s")
    )


async def hedged_calls(
    run: Scenario, route: str
) -> tuple[list[str], list[httpx.Response | Exception]]:
    """200 logical calls at once, each under a key of its own."""
    keys = [key(f"hedged-{index}") for index in range(CALLERS)]
    tasks_before = len(asyncio.all_tasks())
    outcomes = await at_once(CALLERS, lambda i: run.get(route, keys[i]))
    # Each call waited for its losers: no copy's task outlives its call.
    assert len(asyncio.all_tasks()) <= tasks_before
    run.keep(outcomes)
    assert kinds(outcomes) == {"200": CALLERS}
    for name in keys:
        await run.server.wait_idle(name)
    return keys, outcomes


class LaterCopiesElsewhere(httpx.AsyncBaseTransport):
    """Sends a call's first copy as it is and every later copy to another route.

    It sits under the pipeline, around the transport that sends, and tells a
    call by its ``?key=``. The fault server has no route whose later hits are
    slower than its first (``/hedge`` is the reverse), and with one route for
    every copy a loser would end at the server a hedge delay after the winner:
    a loser cancelled a little late, on a busy machine, would be counted as
    answered. Sent to a route that takes seconds, a loser still running when
    its call returns can only have been left running.
    """

    def __init__(self, inner: httpx.AsyncBaseTransport, route: str) -> None:
        self._inner = inner
        self._route = route
        self._seen: set[str] = set()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        key = request.url.params["key"]
        if key in self._seen:
            request.url = request.url.copy_with(path=self._route)
        self._seen.add(key)
        return await self._inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self._inner.aclose()


# --- the breaker under hedging -------------------------------------------------------


class SkippingClock:
    """The system clock, plus the time the test skipped with `advance`.

    Hedging's delays and the server's sleeps take real time, while a breaker's
    break is skipped at once: no test waits seconds for it.
    """

    def __init__(self) -> None:
        self.skipped = 0.0

    def monotonic(self) -> float:
        return CLOCK.monotonic() + self.skipped

    async def sleep(self, seconds: float) -> None:
        await CLOCK.sleep(seconds)

    def sleep_sync(self, seconds: float) -> None:
        CLOCK.sleep_sync(seconds)

    def advance(self, seconds: float) -> None:
        self.skipped += seconds
