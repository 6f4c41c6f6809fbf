"""Chaos: two real services in a chain keep one ceiling and one deadline.

Service A calls service B, B calls service C, and C is down. Each is its own
uvicorn on 127.0.0.1 and its own event loop; A and B are small ASGI apps
behind `ResilienceContextMiddleware`, each calling the next through a client
of an `HttpClientFactory` (the standard pipeline, 4 attempts, a 20 ms base
delay so a run takes seconds, not minutes). The load driver calls A at a
constant rate, each call with a deadline (``X-Request-Timeout-Ms``) and a
correlation id of its own, which the middleware of A and B carry on to C: C
counts what reaches it per call of A, and when.

B lets the error of a failed call escape its handler (the middleware answers
it); A answers B's status. So both ways a failure leaves a service are seen.

- C answers 503 to everything: at most 4 requests reach C per call of A (B
  retries C as far as its policy goes, says so, and A does not retry B).
- C never answers: every call of A ends within its deadline + 100 ms, and no
  request reaches C after A's deadline.

Each is compared with the same run with only the correlation id carried (no
deadline, no retry marker, no exhausted mark read or written): the figures
are recorded side by side. The breaker is kept shut (a minimum throughput no
run reaches) and, where the ceiling is measured, the retry budget is off: what
is measured is the layering, not the guards that would hide it.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Awaitable, Callable, Generator, MutableMapping
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from typing import Any, cast

import anyio.to_thread
import httpx
import pytest

from http_resilience import (
    HttpClientFactory,
    HttpResilienceOptions,
    ResilienceContextMiddleware,
    SystemClock,
)
from tests.support.fault_server import (
    ASGIApp,
    Message,
    Receive,
    Send,
    run_lifespan,
    serve_app,
)
from tests.support.figures import record
from tests.support.load import run_load

pytestmark = pytest.mark.anyio

CLOCK = SystemClock()
ATTEMPTS = 4  # the standard pipeline's: a first attempt and 3 retries
RATE = 10.0  # calls of A per second
DURATION = 3.0  # seconds of arrivals: 30 calls
IDLE_LIMIT = 15.0  # seconds the services get to finish what a run began
CORRELATION = b"x-correlation-id"

# What `ResilienceContextMiddleware` hands the app it wraps.
Scope = MutableMapping[str, Any]
AppReceive = Callable[[], Awaitable[Scope]]
AppSend = Callable[[Scope], Awaitable[None]]


class Gauge:
    """Requests a service is handling, readable from the test's thread."""

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._count = 0

    @contextmanager
    def held(self) -> Generator[None]:
        with self._changed:
            self._count += 1
        try:
            yield
        finally:
            with self._changed:
                self._count -= 1
                self._changed.notify_all()

    def wait_idle(self, limit: float) -> None:
        with self._changed:
            if not self._changed.wait_for(lambda: self._count == 0, timeout=limit):
                raise TimeoutError(f"{self._count} requests still running")


class DeadService:
    """Service C: answers 503 at once, or never (waits for its caller to leave).

    Records each request's correlation id and arrival time.
    """

    def __init__(self, *, hang: bool) -> None:
        self.hang = hang
        self.ready = threading.Event()
        self.gauge = Gauge()
        self._lock = threading.Lock()
        self._arrivals: list[tuple[str, float]] = []

    def arrivals(self) -> list[tuple[str, float]]:
        with self._lock:
            return list(self._arrivals)

    async def __call__(self, scope: Message, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await run_lifespan(receive, send, self.ready)
            return
        with self.gauge.held():
            arrived = CLOCK.monotonic()
            headers: list[tuple[bytes, bytes]] = scope["headers"]
            key = next((v.decode() for k, v in headers if k == CORRELATION), "")
            with self._lock:
                self._arrivals.append((key, arrived))
            if self.hang:
                while (await receive())["type"] != "http.disconnect":
                    pass
                return
            await send({"type": "http.response.start", "status": 503, "headers": []})
            await send({"type": "http.response.body", "body": b"down"})


class Relay:
    """Service A or B: each request calls `downstream` once, resiliently.

    With `escape`, a failed call's error escapes the handler (as an unhandled
    ``raise_for_status()`` does); otherwise the service answers its status.
    """

    def __init__(
        self,
        name: str,
        downstream: str,
        options: HttpResilienceOptions,
        *,
        escape: bool,
    ) -> None:
        self.name = name
        self.downstream = downstream
        self.options = options
        self.escape = escape
        self.ready = threading.Event()
        self.gauge = Gauge()
        self._factory: HttpClientFactory | None = None
        self._client: httpx.AsyncClient | None = None

    async def __call__(self, scope: Scope, receive: AppReceive, send: AppSend) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        assert self._client is not None, "called before its lifespan started"
        with self.gauge.held():
            answer = await self._client.get(f"{self.downstream}/work")
            if self.escape:
                answer.raise_for_status()
            await send(
                {
                    "type": "http.response.start",
                    "status": answer.status_code,
                    "headers": [],
                }
            )
            await send({"type": "http.response.body", "body": answer.content})

    async def _lifespan(self, receive: AppReceive, send: AppSend) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                # The factory's clients carry the request's correlation id.
                self._factory = HttpClientFactory(
                    lambda clients: clients.add(self.name, self.options)
                )
                self._client = self._factory.async_client(self.name)
                self.ready.set()
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                if self._factory is not None:
                    await self._factory.aclose()
                await send({"type": "lifespan.shutdown.complete"})
                return


def options(*, carried: bool, budget: bool, **values: Any) -> HttpResilienceOptions:
    return HttpResilienceOptions.model_validate(
        {
            "base_delay": "20ms",
            "minimum_throughput": 10**9,  # the breaker never opens here
            "retry_budget_ratio": 0.2 if budget else None,
            "detect_nested_retries": carried,
            **values,
        }
    )


def wrapped(app: Relay, *, carried: bool) -> ASGIApp:
    """`app` behind the middleware: all of it, or only the correlation id."""
    middleware = (
        ResilienceContextMiddleware(app)
        if carried
        else ResilienceContextMiddleware(
            app, deadline_header=None, attempt_header=None, exhausted_header=None
        )
    )
    # The server hands it dicts, which are the mutable mappings it takes.
    return cast("ASGIApp", middleware)


@dataclass
class Chain:
    a_url: str
    a: Relay
    b: Relay
    c: DeadService

    def wait_idle(self) -> None:
        for gauge in (self.a.gauge, self.b.gauge, self.c.gauge):
            gauge.wait_idle(IDLE_LIMIT)


@contextmanager
def chain(*, hang: bool, carried: bool, **values: Any) -> Generator[Chain]:
    """Services C, B and A on loopback, each on a uvicorn of its own."""
    c = DeadService(hang=hang)
    with ExitStack() as stack:
        c_url = stack.enter_context(serve_app(c, c.ready, name="service c"))
        settings = options(carried=carried, **values)
        b = Relay("b", c_url, settings, escape=True)
        b_url = stack.enter_context(
            serve_app(wrapped(b, carried=carried), b.ready, name="service b")
        )
        a = Relay("a", b_url, settings, escape=False)
        a_url = stack.enter_context(
            serve_app(wrapped(a, carried=carried), a.ready, name="service a")
        )
        yield Chain(a_url, a, b, c)


@dataclass
class Drive:
    """What the load driver saw of each call of A, by its correlation id."""

    deadline_ms: int
    started: dict[str, float] = field(default_factory=dict[str, float])
    took: dict[str, float] = field(default_factory=dict[str, float])
    statuses: Counter[str] = field(default_factory=Counter[str])


async def drive(url: str, deadline_ms: int) -> tuple[Drive, Any]:
    seen = Drive(deadline_ms)
    # The driver waits longer than any run: what it measures is when A ends.
    async with httpx.AsyncClient(base_url=url, timeout=IDLE_LIMIT) as client:

        async def call(index: int) -> None:
            key = f"call-{index}"
            seen.started[key] = began = CLOCK.monotonic()
            try:
                answer = await client.get(
                    "/work",
                    headers={
                        "X-Request-Timeout-Ms": str(deadline_ms),
                        "X-Correlation-ID": key,
                    },
                )
                seen.statuses[str(answer.status_code)] += 1
            finally:
                seen.took[key] = CLOCK.monotonic() - began

        result = await run_load(call, rate=RATE, duration=DURATION, drain=IDLE_LIMIT)
    return seen, result


async def run(*, hang: bool, carried: bool, deadline_ms: int, **values: Any) -> Any:
    """One run: the driver's view, C's arrivals per call, and C's late arrivals."""
    with chain(hang=hang, carried=carried, **values) as services:
        seen, result = await drive(services.a_url, deadline_ms)
        await anyio.to_thread.run_sync(services.wait_idle)
        arrivals = services.c.arrivals()
    assert result.started == result.arrivals == round(RATE * DURATION)
    assert result.abandoned == 0
    per_call = Counter(key for key, _ in arrivals)
    assert set(per_call) <= set(seen.started), "a request reached C uncorrelated"
    late = [
        key
        for key, arrived in arrivals
        if arrived > seen.started[key] + deadline_ms / 1000
    ]
    return seen, result, per_call, late


async def test_at_most_4_requests_reach_a_dead_service_per_call() -> None:
    seen, result, per_call, _ = await run(
        hang=False, carried=True, deadline_ms=5000, budget=False
    )
    assert result.completed == len(seen.started)
    assert seen.statuses == {"503": len(seen.started)}
    assert max(per_call.values()) <= ATTEMPTS
    assert min(per_call[key] for key in seen.started) >= 1

    _, _, without, _ = await run(
        hang=False, carried=False, deadline_ms=5000, budget=False
    )
    # Without the marks, A retries what B already retried: attempts multiply.
    assert max(without.values()) > ATTEMPTS
    _, _, budgeted, _ = await run(
        hang=False, carried=True, deadline_ms=5000, budget=True
    )
    assert max(budgeted.values()) <= ATTEMPTS
    calls = len(seen.started)
    record(
        "two_services_dead_c",
        calls=calls,
        c_per_call_max=max(per_call.values()),
        c_per_call_mean=round(sum(per_call.values()) / calls, 2),
        c_per_call_max_without=max(without.values()),
        c_per_call_mean_without=round(sum(without.values()) / calls, 2),
        c_per_call_max_default_budget=max(budgeted.values()),
        c_per_call_mean_default_budget=round(sum(budgeted.values()) / calls, 2),
        a_p99_ms=round(result.p99 * 1000, 1),
    )


async def test_a_call_ends_by_its_deadline_and_nothing_reaches_c_after_it() -> None:
    deadline_ms = 600
    # A hung C is found by the attempt timeout: 1 s here, so the run without
    # the deadline carried ends in seconds too.
    timeouts = {"attempt_timeout": "1s", "total_request_timeout": "3s"}
    seen, result, per_call, late = await run(
        hang=True, carried=True, deadline_ms=deadline_ms, budget=False, **timeouts
    )
    limit = deadline_ms / 1000 + 0.1
    assert max(seen.took.values()) <= limit, sorted(seen.took.values())[-5:]
    assert late == []
    assert set(per_call) == set(seen.started)  # every call did reach C once

    without_seen, without_result, without, without_late = await run(
        hang=True, carried=False, deadline_ms=deadline_ms, budget=False, **timeouts
    )
    assert max(without_seen.took.values()) > limit
    assert without_late
    record(
        "two_services_hung_c",
        calls=len(seen.started),
        deadline_ms=deadline_ms,
        a_max_ms=round(max(seen.took.values()) * 1000, 1),
        a_p99_ms=round(result.p99 * 1000, 1),
        c_after_deadline=len(late),
        c_per_call_max=max(per_call.values()),
        a_max_ms_without=round(max(without_seen.took.values()) * 1000, 1),
        a_p99_ms_without=round(without_result.p99 * 1000, 1),
        c_after_deadline_without=len(without_late),
        c_per_call_max_without=max(without.values()),
    )
