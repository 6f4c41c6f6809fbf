"""What a resilient client costs per request over bare httpx, and what it sends.

Run by `make bench`. The script starts a small ASGI app under uvicorn on
127.0.0.1, in a child process so the server does not share the client's GIL,
and measures in one run, side by side:

1. Per-request time, async and sync: bare httpx; httpx-retries'
   `RetryTransport`; tenacity's `@retry` around the call; the stacked peers,
   what a user builds from the best single-purpose peers for the standard
   pipeline's five strategies (see `stacked_async` and `stacked_sync`); ours,
   the standard pipeline with its defaults (the "ours" rows). On loopback, ours
   is built by `http_resilience.create_async_client` / `create_client`; in
   process, where `httpx.MockTransport` answers and no socket is touched, by
   wrapping the mock in `AsyncResilientTransport` / `ResilientTransport`, and
   the stacked peers wrap the same mock. Every row is one
   long-lived client sending sequential GETs to a 200; the figure is us per
   request, best of `REPEATS` runs taken round-robin over the rows, and the
   difference from bare httpx of the same kind. A second bare client, measured
   like the others, shows how far two identical rows land apart on loopback:
   a difference below that is noise. Budgets, in process, async and sync, the
   ratios printed under each table: the standard pipeline's overhead over bare
   <= 0.6x the stacked peers' overhead (issue 27), and <= 2.5x httpx-retries'
   overhead (DESIGN section 8).
2. Physical requests per logical call against an endpoint that always answers
   503, counted by the server: ours (defaults but a 1 ms base delay, so the
   table costs no time), httpx-retries with its defaults (no backoff), stamina
   around httpx with its defaults (in stamina's test mode: no waits, its own
   attempt count), and stamina around a client on httpx-retries. Budget: <= 4.
3. In process, what single pieces cost, each against the same path without
   it, best of `REPEATS` runs taken round-robin: a factory client with its
   correlation id on against the same factory with `correlation_header=None`,
   through `client.get`, async and sync (budget: <= +2 us); the circuit breaker
   alone, `ResilientTransport` with a pipeline of `add_retry().add_breaker()`
   against `add_retry()`, called directly (budget: <= 0.5 us per call); the
   retry budget and the published quota together, the default
   `ResilientTransport` against one with `retry_budget_ratio=None` and
   `quota_reserve=None`, called directly (budget: <= 1 us per call); reading
   the quota a typical answer publishes (``RateLimit`` fields whose remaining
   count changes on every answer) (budget: <= 2 us); and the default per-host
   registry (1,024 hosts) with requests round-robin over
   100,000 distinct hosts against 10, through a default `ResilientTransport`
   called directly, each request built per call (budget: <= 1.5x per request).

Our rows are skipped with a note while `http_resilience` does not export what
they use. This script only reports: it never fails on a timing.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import importlib.util
import logging
import platform
import sys
import threading
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import child_server  # benchmarks/: beside this script
import httpx
from tenacity import (
    retry,
    retry_if_exception_type,
    stop_after_attempt,
    wait_exponential_jitter,
)

import http_resilience

LOOPBACK_REQUESTS = 800
IN_PROCESS_REQUESTS = 2_000
REPEATS = 7
WARM_UP = 200
LOGICAL_CALLS = 3
BUDGET_OVERHEAD_RATIO = 2.5  # ours over bare / httpx-retries over bare
BUDGET_STACK_RATIO = 0.6  # ours over bare / the stacked peers over bare
# The stacked peers, set as the standard pipeline's defaults are.
STACK_CONCURRENCY = 1_000
STACK_TOTAL_TIMEOUT_S = 30.0
STACK_ATTEMPT_TIMEOUT_S = 10.0
STACK_RETRIES = 3
STACK_BREAK_S = 5
BUDGET_CORRELATION_US = 2.0
BUDGET_BREAKER_US = 0.5
BUDGET_RETRY_BUDGET_US = 1.0
BUDGET_QUOTA_READ_US = 2.0
QUOTA_READS = 20_000
BUDGET_HOSTS_RATIO = 1.5
PIECE_REQUESTS = 2_000  # per row and repeat, through a client
BREAKER_CALLS = 10_000  # per row and repeat, the transport called directly
HOST_REQUESTS = 10_000  # per row and repeat
HOST_REPEATS = 5
MANY_HOSTS = 100_000
FEW_HOSTS = 10
BUDGET_AMPLIFICATION = 4.0
# A server left behind by a parent that died stops on its own after this long.
SERVER_LIFETIME_S = 300
SERVE_FLAG = child_server.SERVE_FLAG
MOCK_URL = "http://bench.invalid/ok"
STACK_LABEL = "stacked single-purpose peers"
BUDGET_BASELINE_US = 1.0  # issue 28: each host's baseline, per request
RULES_OFF_LABEL = "ours, the adaptive rules off"
RULES_OFF = http_resilience.HttpResilienceOptions(
    adaptive_timeout_factor=None, breaker_baseline_factor=None, slow_call_factor=None
)

Message = dict[str, Any]
AsyncCall = Callable[[], Awaitable[httpx.Response]]
SyncCall = Callable[[], httpx.Response]


# --- the server (child process) ----------------------------------------------


@dataclass
class BenchApp:
    """`/ok` 200; `/fail/KEY` 503, counted per key; `/hits/KEY` the count."""

    hits: Counter[str] = field(default_factory=Counter[str])

    async def __call__(
        self,
        scope: Message,
        receive: Callable[[], Awaitable[Message]],
        send: Callable[[Message], Awaitable[None]],
    ) -> None:
        if scope["type"] != "http":
            return
        path: str = scope["path"]
        status, body = 404, b"no such route"
        if path == "/ok":
            status, body = 200, b"ok"
        elif path.startswith("/fail/"):
            self.hits[path.removeprefix("/fail/")] += 1
            status, body = 503, b"unavailable"
        elif path.startswith("/hits/"):
            status, body = 200, str(self.hits[path.removeprefix("/hits/")]).encode()
        headers = [
            (b"content-type", b"text/plain"),
            (b"content-length", str(len(body)).encode()),
        ]
        start = {"type": "http.response.start", "status": status}
        await send({**start, "headers": headers})
        await send({"type": "http.response.body", "body": body})


def serve() -> None:
    """Serve `BenchApp` until stdin closes, SIGTERM, or `SERVER_LIFETIME_S`."""
    child_server.serve(BenchApp(), lifetime=SERVER_LIFETIME_S)


def local_server() -> contextlib.AbstractContextManager[str]:
    """Start the server in a child process; yield its base URL; stop it."""
    return child_server.child_server(__file__)


# --- the clients ---------------------------------------------------------------


def ours(name: str) -> Any | None:
    """`http_resilience.<name>`, or None while the package does not export it."""
    return getattr(http_resilience, name, None)


def not_yet(name: str) -> str:
    return f"skipped: http_resilience does not export {name} yet"


def ok(request: httpx.Request) -> httpx.Response:
    return httpx.Response(200, content=b"ok")


def retry_transport(inner: Any = None) -> Any:
    from httpx_retries import RetryTransport

    return RetryTransport(transport=inner)


def tenacity_async(client: httpx.AsyncClient, url: str) -> AsyncCall:
    @retry(
        stop=stop_after_attempt(4),
        wait=wait_exponential_jitter(multiplier=2),
        retry=retry_if_exception_type(httpx.TransportError),
        reraise=True,
    )
    async def get() -> httpx.Response:
        return await client.get(url)

    return get


def tenacity_sync(client: httpx.Client, url: str) -> SyncCall:
    @retry(
        stop=stop_after_attempt(4),
        wait=wait_exponential_jitter(multiplier=2),
        retry=retry_if_exception_type(httpx.TransportError),
        reraise=True,
    )
    def get() -> httpx.Response:
        return client.get(url)

    return get


# --- the stacked peers ----------------------------------------------------------


def stack_missing() -> str:
    """Why the stacked peers' rows are skipped, or "" when they run."""
    if importlib.util.find_spec("circuitbreaker") is None:
        return "skipped: circuitbreaker is not installed"
    return ""


def host_breaker(host: str, send: Any) -> Any:
    """`send` behind a `circuitbreaker` breaker of its own for `host`.

    Decorated as circuitbreaker's README shows, counting what it advises:
    transport errors and timeouts (the attempt timeout raises one), not 5xx
    answers: it sees only exceptions, and an answer is not one. Consecutive
    failures (5 by default) open it; ours counts a failure ratio over a
    window, 5xx included.
    """
    from circuitbreaker import CircuitBreaker

    breaker = CircuitBreaker(
        recovery_timeout=STACK_BREAK_S,
        expected_exception=httpx.TransportError,
        name=f"bench {host}",
    )
    return breaker(send)


def stack_retry(attempts: httpx.AsyncBaseTransport | httpx.BaseTransport) -> Any:
    """httpx-retries around the attempts, with our retry defaults."""
    from httpx_retries import Retry, RetryTransport

    # 3 retries, 2 s, 4 s, 8 s (with jitter), at most 30 s: our defaults.
    retry = Retry(total=STACK_RETRIES, backoff_factor=1.0, max_backoff_wait=30.0)
    return RetryTransport(transport=attempts, retry=retry)


class AsyncStackAttempt(httpx.AsyncBaseTransport):
    """One attempt of the async stack: the host's breaker, the attempt timeout."""

    def __init__(self, inner: httpx.AsyncBaseTransport) -> None:
        self.inner = inner
        self.sends: dict[str, Callable[[httpx.Request], Awaitable[httpx.Response]]]
        self.sends = {}

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        host = request.url.host
        send = self.sends.get(host)
        if send is None:
            send = self.sends[host] = host_breaker(host, self.attempt)
        return await send(request)

    async def attempt(self, request: httpx.Request) -> httpx.Response:
        try:
            async with asyncio.timeout(STACK_ATTEMPT_TIMEOUT_S):
                return await self.inner.handle_async_request(request)
        except TimeoutError as error:
            # httpx-retries retries httpx's timeouts, not asyncio's.
            raise httpx.TimeoutException(
                "attempt timed out", request=request
            ) from error

    async def aclose(self) -> None:
        await self.inner.aclose()


class SyncStackAttempt(httpx.BaseTransport):
    """One attempt of the sync stack: the host's breaker."""

    def __init__(self, inner: httpx.BaseTransport) -> None:
        self.inner = inner
        self.sends: dict[str, Callable[[httpx.Request], httpx.Response]] = {}

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        host = request.url.host
        send = self.sends.get(host)
        if send is None:
            send = self.sends[host] = host_breaker(host, self.inner.handle_request)
        return send(request)

    def close(self) -> None:
        self.inner.close()


def stacked_async(client: httpx.AsyncClient, url: str) -> AsyncCall:
    """The best single-purpose peers for the standard pipeline's five strategies.

    Outermost first, as ours orders them: `asyncio.Semaphore` as the
    concurrency limiter and `asyncio.timeout` for the total, around the call;
    httpx-retries' `RetryTransport` for the retry, as the client's transport;
    inside it, per attempt, a `circuitbreaker` breaker per host and
    `asyncio.timeout` for the attempt (`AsyncStackAttempt`). Each is set as
    our defaults are (`STACK_*`), and composed as its docs show.
    """
    limiter = asyncio.Semaphore(STACK_CONCURRENCY)

    async def get() -> httpx.Response:
        async with limiter, asyncio.timeout(STACK_TOTAL_TIMEOUT_S):
            return await client.get(url)

    return get


def stacked_sync(client: httpx.Client, url: str) -> SyncCall:
    """The sync twin of `stacked_async`, with what a sync user has for time.

    `threading.BoundedSemaphore` is the limiter; httpx-retries and a
    `circuitbreaker` breaker per host as in the async stack
    (`SyncStackAttempt`). There is no sync `asyncio.timeout`, so the timeouts
    are httpx's own config, `httpx.Timeout(STACK_ATTEMPT_TIMEOUT_S)` on the
    client: a limit on each phase of each attempt (connect, write, read, pool),
    not a deadline, and no total at all (httpx-retries' `total_timeout` bounds
    only its sleeps). In process it costs nothing: `MockTransport` never reads
    it. So the sync stack does less than ours for its time, and less than the
    async stack.
    """
    limiter = threading.BoundedSemaphore(STACK_CONCURRENCY)

    def get() -> httpx.Response:
        with limiter:
            return client.get(url)

    return get


@dataclass
class Row:
    label: str
    note: str = ""  # why it was skipped
    best: float = float("inf")  # seconds per request

    @property
    def us(self) -> float:
        return self.best * 1e6


@dataclass
class AsyncRow(Row):
    call: AsyncCall | None = None


@dataclass
class SyncRow(Row):
    call: SyncCall | None = None


@dataclass
class Section:
    title: str
    requests: int
    rows: list[Row]


async def async_rows(
    stack: contextlib.AsyncExitStack, url: str, *, loopback: bool
) -> list[AsyncRow]:
    async def client(transport: Any = None) -> httpx.AsyncClient:
        return await stack.enter_async_context(httpx.AsyncClient(transport=transport))

    inner = None if loopback else httpx.MockTransport(ok)
    bare = await client(inner)
    peer = await client(retry_transport(inner))
    rows = [
        AsyncRow("bare httpx.AsyncClient", call=lambda: bare.get(url)),
        AsyncRow("httpx-retries RetryTransport", call=lambda: peer.get(url)),
        AsyncRow("tenacity @retry around the call", call=tenacity_async(bare, url)),
    ]
    if missing := stack_missing():
        rows.append(AsyncRow(STACK_LABEL, note=missing))
    else:
        attempts = AsyncStackAttempt(inner or httpx.AsyncHTTPTransport())
        stacked = await client(stack_retry(attempts))
        rows.append(AsyncRow(STACK_LABEL, call=stacked_async(stacked, url)))
    if loopback:
        again = await client()
        rows.insert(1, AsyncRow("bare, a second client", call=lambda: again.get(url)))
    name = "create_async_client" if loopback else "AsyncResilientTransport"
    label = f"ours: {name}"
    factory = ours(name)
    if factory is None:
        rows.append(AsyncRow(label, note=not_yet(name)))
    else:
        built = factory() if loopback else httpx.AsyncClient(transport=factory(inner))
        resilient = await stack.enter_async_context(built)
        rows.append(AsyncRow(label, call=lambda: resilient.get(url)))
        if not loopback:
            unlearned = await stack.enter_async_context(
                httpx.AsyncClient(transport=factory(inner, options=RULES_OFF))
            )
            rows.append(AsyncRow(RULES_OFF_LABEL, call=lambda: unlearned.get(url)))
    return rows


def sync_rows(
    stack: contextlib.ExitStack, url: str, *, loopback: bool
) -> list[SyncRow]:
    def client(transport: Any = None) -> httpx.Client:
        return stack.enter_context(httpx.Client(transport=transport))

    inner = None if loopback else httpx.MockTransport(ok)
    bare = client(inner)
    peer = client(retry_transport(inner))
    rows = [
        SyncRow("bare httpx.Client", call=lambda: bare.get(url)),
        SyncRow("httpx-retries RetryTransport", call=lambda: peer.get(url)),
        SyncRow("tenacity @retry around the call", call=tenacity_sync(bare, url)),
    ]
    if missing := stack_missing():
        rows.append(SyncRow(STACK_LABEL, note=missing))
    else:
        attempts = SyncStackAttempt(inner or httpx.HTTPTransport())
        stacked = stack.enter_context(
            httpx.Client(
                transport=stack_retry(attempts), timeout=STACK_ATTEMPT_TIMEOUT_S
            )
        )
        rows.append(SyncRow(STACK_LABEL, call=stacked_sync(stacked, url)))
    if loopback:
        again = client()
        rows.insert(1, SyncRow("bare, a second client", call=lambda: again.get(url)))
    name = "create_client" if loopback else "ResilientTransport"
    label = f"ours: {name}"
    factory = ours(name)
    if factory is None:
        rows.append(SyncRow(label, note=not_yet(name)))
    else:
        built = factory() if loopback else httpx.Client(transport=factory(inner))
        resilient = stack.enter_context(built)
        rows.append(SyncRow(label, call=lambda: resilient.get(url)))
        if not loopback:
            unlearned = stack.enter_context(
                httpx.Client(transport=factory(inner, options=RULES_OFF))
            )
            rows.append(SyncRow(RULES_OFF_LABEL, call=lambda: unlearned.get(url)))
    return rows


# --- per-request time ----------------------------------------------------------


async def measure_async(rows: list[AsyncRow], requests: int) -> None:
    runnable = [(row, row.call) for row in rows if row.call is not None]
    for row, call in runnable:
        for _ in range(WARM_UP):
            response = await call()
            assert response.status_code == 200, (row.label, response.status_code)
    for _ in range(REPEATS):
        for row, call in runnable:
            gc.collect()
            started = time.perf_counter()
            for _ in range(requests):
                await call()
            row.best = min(row.best, (time.perf_counter() - started) / requests)


def measure_sync(rows: list[SyncRow], requests: int) -> None:
    runnable = [(row, row.call) for row in rows if row.call is not None]
    for row, call in runnable:
        for _ in range(WARM_UP):
            response = call()
            assert response.status_code == 200, (row.label, response.status_code)
    for _ in range(REPEATS):
        for row, call in runnable:
            gc.collect()
            started = time.perf_counter()
            for _ in range(requests):
                call()
            row.best = min(row.best, (time.perf_counter() - started) / requests)


def report_time(sections: list[Section]) -> None:
    print(
        f"HTTP per-request time, us (best of {REPEATS}; "
        f"Python {platform.python_version()}, httpx {httpx.__version__})"
    )
    print(f"{'path':<46} {'us/req':>8} {'over bare':>10}")
    for section in sections:
        print(f"{section.title} ({section.requests:,} GETs per row)")
        bare = section.rows[0].us
        for row in section.rows:
            label = f"  {row.label}"
            if row.note:
                print(f"{label:<46} {row.note}")
            elif row is section.rows[0]:
                print(f"{label:<46} {row.us:>8.1f}")
            else:
                print(f"{label:<46} {row.us:>8.1f} {row.us - bare:>+10.1f}")
        if "in process" in section.title:
            report_ratio(section)


def report_ratio(section: Section) -> None:
    """Ours' overhead over the stacked peers', then over httpx-retries'."""
    bare = section.rows[0]
    mine = next(row for row in section.rows if row.label.startswith("ours"))
    for peer_label, name, budget in (
        (STACK_LABEL, "stacked peers", BUDGET_STACK_RATIO),
        ("httpx-retries RetryTransport", "httpx-retries", BUDGET_OVERHEAD_RATIO),
    ):
        peer = next(row for row in section.rows if row.label == peer_label)
        label = f"  RATIO ours overhead / {name} overhead"
        if mine.note or peer.note or peer.us <= bare.us:
            print(f"{label:<46} {'n/a':>8}")
            continue
        ratio = (mine.us - bare.us) / (peer.us - bare.us)
        verdict = "within" if ratio <= budget else "OVER"
        print(f"{label:<46} {ratio:>7.2f}x {'':>10} {f'<={budget}x':>8}  {verdict}")
    unlearned = next(
        (row for row in section.rows if row.label == RULES_OFF_LABEL), None
    )
    if unlearned is not None and not (mine.note or unlearned.note):
        # Issue 28: what each host's baseline (learning, the three rules) costs.
        cost = mine.us - unlearned.us
        verdict = "within" if cost <= BUDGET_BASELINE_US else "OVER"
        label = "  COST the baseline (ours - rules off), us"
        bound = f"<={BUDGET_BASELINE_US}"
        print(f"{label:<46} {cost:>+8.2f} {'':>10} {bound:>8}  {verdict}")


# --- amplification -------------------------------------------------------------


@dataclass
class Amplification:
    label: str
    per_call: float | None = None
    note: str = ""


async def physical_requests(
    base: str, key: str, call: Callable[[str], Awaitable[object]]
) -> float:
    """Physical requests per logical call, as the server counted them."""
    url = f"{base}/fail/{key}"
    for _ in range(LOGICAL_CALLS):
        with contextlib.suppress(httpx.HTTPError):
            await call(url)
    async with httpx.AsyncClient() as counter:
        hits = int((await counter.get(f"{base}/hits/{key}")).text)
    return hits / LOGICAL_CALLS


async def our_amplification(base: str) -> Amplification:
    label = "ours, defaults but a 1 ms base delay"
    factory = ours("create_async_client")
    options_class = ours("HttpResilienceOptions")
    if factory is None or options_class is None:
        missing = "create_async_client" if factory is None else "HttpResilienceOptions"
        return Amplification(label, note=not_yet(missing))
    try:
        options = options_class.model_validate({"base_delay": 0.001})
    except Exception as error:  # the options may not take this form yet
        return Amplification(label, note=f"skipped: {type(error).__name__}: {error}")
    async with factory(options=options) as client:

        async def call(url: str) -> object:
            return await client.get(url)

        # Each retry is logged as a warning; the table is what this shows.
        logging.disable(logging.WARNING)
        try:
            per_call = await physical_requests(base, "ours", call)
        finally:
            logging.disable(logging.NOTSET)
    return Amplification(label, per_call)


async def stamina_amplification(base: str) -> list[Amplification]:
    try:
        import stamina
    except ImportError:
        return [Amplification("stamina", note="skipped: stamina is not installed")]
    rows: list[Amplification] = []
    # No hooks: stamina's default logging hook would print every retry.
    hooks = stamina.instrumentation.get_on_retry_hooks()
    stamina.instrumentation.set_on_retry_hooks([])
    try:
        async with (
            httpx.AsyncClient() as plain,
            httpx.AsyncClient(transport=retry_transport()) as layered,
        ):
            for label, key, client in (
                ("stamina around httpx, defaults", "stamina", plain),
                ("stamina on httpx-retries, defaults", "stamina-layered", layered),
            ):

                @stamina.retry(on=httpx.HTTPError)  # type: ignore[untyped-decorator,unused-ignore]
                async def call(url: str, client: httpx.AsyncClient = client) -> object:
                    response = await client.get(url)
                    return response.raise_for_status()

                # Test mode: no waits; cap=True keeps stamina's attempt count.
                with stamina.set_testing(True, attempts=1_000_000, cap=True):
                    per_call = await physical_requests(base, key, call)
                rows.append(Amplification(label, per_call))
    finally:
        stamina.instrumentation.set_on_retry_hooks(hooks)
    return rows


async def measure_amplification(base: str) -> list[Amplification]:
    rows = [await our_amplification(base)]
    async with httpx.AsyncClient(transport=retry_transport()) as peer:

        async def call(url: str) -> object:
            return await peer.get(url)

        per_call = await physical_requests(base, "httpx-retries", call)
    rows.append(Amplification("httpx-retries, defaults", per_call))
    return rows + await stamina_amplification(base)


def report_amplification(rows: list[Amplification]) -> None:
    print(
        "Physical requests per logical call, endpoint always 503 "
        f"({LOGICAL_CALLS} calls each, counted by the server)"
    )
    print(f"{'client':<46} {'req/call':>8} {'budget':>8}  verdict")
    for row in rows:
        label = f"  {row.label}"
        if row.per_call is None:
            print(f"{label:<46} {row.note}")
        elif row.label.startswith("ours"):
            verdict = "within" if row.per_call <= BUDGET_AMPLIFICATION else "OVER"
            budget = f"<={BUDGET_AMPLIFICATION:.0f}"
            print(f"{label:<46} {row.per_call:>8.1f} {budget:>8}  {verdict}")
        else:
            print(f"{label:<46} {row.per_call:>8.1f}")


# --- single pieces, in process ------------------------------------------------


@dataclass
class Piece:
    """One piece's cost: `with_it` against `without`, and its budget."""

    label: str
    unit: str  # "us" (a difference) or "x" (a ratio)
    budget: float
    with_it: float = float("inf")  # us per request
    without: float = float("inf")
    note: str = ""

    @property
    def figure(self) -> float:
        if self.unit == "x":
            return self.with_it / self.without
        return self.with_it - self.without


def factory_clients(header: bool) -> Any:
    factory_class = ours("HttpClientFactory")
    assert factory_class is not None
    arguments = {} if header else {"correlation_header": None}

    def configure(clients: Any) -> object:
        return clients.add("bench", transport=httpx.MockTransport(ok))

    return factory_class(configure, **arguments)


async def correlation_async() -> Piece:
    piece = Piece(
        "async factory client, correlation id on vs off", "us", BUDGET_CORRELATION_US
    )
    if ours("HttpClientFactory") is None:
        piece.note = not_yet("HttpClientFactory")
        return piece
    on, off = factory_clients(True), factory_clients(False)
    async with on, off:
        rows = [
            AsyncRow("on", call=lambda: on.async_client("bench").get(MOCK_URL)),
            AsyncRow("off", call=lambda: off.async_client("bench").get(MOCK_URL)),
        ]
        await measure_async(rows, PIECE_REQUESTS)
    piece.with_it, piece.without = rows[0].us, rows[1].us
    return piece


def correlation_sync() -> Piece:
    piece = Piece(
        "sync factory client, correlation id on vs off", "us", BUDGET_CORRELATION_US
    )
    if ours("HttpClientFactory") is None:
        piece.note = not_yet("HttpClientFactory")
        return piece
    on, off = factory_clients(True), factory_clients(False)
    with on, off:
        rows = [
            SyncRow("on", call=lambda: on.client("bench").get(MOCK_URL)),
            SyncRow("off", call=lambda: off.client("bench").get(MOCK_URL)),
        ]
        measure_sync(rows, PIECE_REQUESTS)
    piece.with_it, piece.without = rows[0].us, rows[1].us
    return piece


def sync_breaker() -> Piece:
    piece = Piece(
        "sync breaker per call (retry+breaker vs retry)", "us", BUDGET_BREAKER_US
    )
    transport_class, pipeline_class = (
        ours("ResilientTransport"),
        ours("ResiliencePipeline"),
    )
    if transport_class is None or pipeline_class is None:
        piece.note = not_yet("ResilientTransport, ResiliencePipeline")
        return piece
    # A retry on both sides, so both make an attempt the same way and the
    # difference is the breaker's.
    guarded = transport_class(
        httpx.MockTransport(ok), pipeline=pipeline_class().add_retry().add_breaker()
    )
    plain = transport_class(
        httpx.MockTransport(ok), pipeline=pipeline_class().add_retry()
    )
    request = httpx.Request("GET", MOCK_URL)
    rows = [
        SyncRow("with", call=lambda: guarded.handle_request(request)),
        SyncRow("without", call=lambda: plain.handle_request(request)),
    ]
    measure_sync(rows, BREAKER_CALLS)
    piece.with_it, piece.without = rows[0].us, rows[1].us
    return piece


def retry_budget() -> Piece:
    piece = Piece(
        "sync retry budget and quota per call (standard vs off)",
        "us",
        BUDGET_RETRY_BUDGET_US,
    )
    transport_class, options_class = (
        ours("ResilientTransport"),
        ours("HttpResilienceOptions"),
    )
    if transport_class is None or options_class is None:
        piece.note = not_yet("ResilientTransport, HttpResilienceOptions")
        return piece
    budgeted = transport_class(httpx.MockTransport(ok))
    unbudgeted = transport_class(
        httpx.MockTransport(ok),
        options=options_class(retry_budget_ratio=None, quota_reserve=None),
    )
    request = httpx.Request("GET", MOCK_URL)
    rows = [
        SyncRow("with", call=lambda: budgeted.handle_request(request)),
        SyncRow("without", call=lambda: unbudgeted.handle_request(request)),
    ]
    measure_sync(rows, BREAKER_CALLS)
    piece.with_it, piece.without = rows[0].us, rows[1].us
    return piece


def quota_read() -> Piece:
    piece = Piece(
        "reading a typical answer's published quota", "us", BUDGET_QUOTA_READ_US
    )
    if ours("HttpResilienceOptions") is None:
        piece.note = not_yet("HttpResilienceOptions")
        return piece
    from http_resilience import SystemClock
    from http_resilience._core.call import Call
    from http_resilience._core.telemetry import Telemetry
    from http_resilience._strategies.quota.options import QuotaOptions
    from http_resilience._strategies.quota.strategy import QuotaStrategy

    strategy = QuotaStrategy(
        options=QuotaOptions(), clock=SystemClock(), telemetry=Telemetry("bench")
    )
    call = Call("bench", "GET", "http://bench.invalid:80")
    common = {
        "content-type": "application/json",
        "content-length": "120",
        "date": "Tue, 01 Dec 2026 10:00:00 GMT",
        "server": "bench",
    }
    published = [
        httpx.Response(
            200,
            headers={
                **common,
                "RateLimit-Policy": '"hour";q=5000;w=3600',
                "RateLimit": f'"hour";r={left};t=1800',
            },
        )
        # What is left of 5,000 counts down, never into the reserve of 500.
        for left in (4500 - index % 4000 for index in range(QUOTA_READS))
    ]
    silent = [httpx.Response(200, headers=common)] * QUOTA_READS
    best = {"with": float("inf"), "without": float("inf")}
    for _ in range(REPEATS):
        for name, answers in (("with", published), ("without", silent)):
            started = time.perf_counter()
            for response in answers:
                strategy.read(call, response)
            elapsed = (time.perf_counter() - started) / QUOTA_READS * 1e6
            best[name] = min(best[name], elapsed)
    piece.with_it, piece.without = best["with"], best["without"]
    return piece


def host_growth() -> Piece:
    piece = Piece(
        f"{MANY_HOSTS:,} hosts vs {FEW_HOSTS} round-robin, default registry",
        "x",
        BUDGET_HOSTS_RATIO,
    )
    transport_class = ours("ResilientTransport")
    if transport_class is None:
        piece.note = not_yet("ResilientTransport")
        return piece
    best: dict[int, float] = {}
    runs: dict[int, Callable[..., None]] = {}
    for hosts in (MANY_HOSTS, FEW_HOSTS):
        urls = [f"http://host-{index}.bench.invalid/ok" for index in range(hosts)]
        transport = transport_class(httpx.MockTransport(ok))
        turn = iter(range(1 << 62))

        def run(
            count: int,
            urls: list[str] = urls,
            transport: Any = transport,
            turn: Iterator[int] = turn,
        ) -> None:
            size = len(urls)
            for _ in range(count):
                transport.handle_request(
                    httpx.Request("GET", urls[next(turn) % size])
                ).close()

        run(min(hosts, 5_000))  # the registry is full (1,024 hosts) by then
        runs[hosts], best[hosts] = run, float("inf")
    for _ in range(HOST_REPEATS):
        for hosts, run in runs.items():
            gc.collect()
            started = time.perf_counter()
            run(HOST_REQUESTS)
            elapsed = (time.perf_counter() - started) / HOST_REQUESTS
            best[hosts] = min(best[hosts], elapsed)
    piece.with_it, piece.without = best[MANY_HOSTS] * 1e6, best[FEW_HOSTS] * 1e6
    return piece


def report_pieces(pieces: list[Piece]) -> None:
    print(
        f"Single pieces, in process, best of {REPEATS} "
        f"({HOST_REPEATS} for the hosts), us per request"
    )
    print(
        f"{'piece':<54} {'with':>7} {'without':>8} {'cost':>7} {'budget':>7}  verdict"
    )
    for piece in pieces:
        label = f"  {piece.label}"
        if piece.note:
            print(f"{label:<54} {piece.note}")
            continue
        figure, unit = piece.figure, piece.unit
        shown = f"{figure:.2f}x" if unit == "x" else f"{figure:+.2f}"
        budget = f"<={piece.budget}x" if unit == "x" else f"<={piece.budget}"
        verdict = "within" if figure <= piece.budget else "OVER"
        print(
            f"{label:<54} {piece.with_it:>7.1f} {piece.without:>8.1f} "
            f"{shown:>7} {budget:>7}  {verdict}"
        )


# --- the run -------------------------------------------------------------------


async def run_async(base: str) -> tuple[list[Section], list[Amplification]]:
    sections: list[Section] = []
    for title, loopback, url, requests in (
        ("async, loopback", True, f"{base}/ok", LOOPBACK_REQUESTS),
        ("async, in process (MockTransport)", False, MOCK_URL, IN_PROCESS_REQUESTS),
    ):
        async with contextlib.AsyncExitStack() as stack:
            rows = await async_rows(stack, url, loopback=loopback)
            await measure_async(rows, requests)
        sections.append(Section(title, requests, [*rows]))
    return sections, await measure_amplification(base)


def run_pieces() -> list[Piece]:
    pieces = [asyncio.run(correlation_async()), correlation_sync()]
    return [*pieces, sync_breaker(), retry_budget(), quota_read(), host_growth()]


def run_sync(base: str) -> list[Section]:
    sections: list[Section] = []
    for title, loopback, url, requests in (
        ("sync, loopback", True, f"{base}/ok", LOOPBACK_REQUESTS),
        ("sync, in process (MockTransport)", False, MOCK_URL, IN_PROCESS_REQUESTS),
    ):
        with contextlib.ExitStack() as stack:
            rows = sync_rows(stack, url, loopback=loopback)
            measure_sync(rows, requests)
        sections.append(Section(title, requests, [*rows]))
    return sections


def main() -> None:
    started = time.perf_counter()
    with local_server() as base:
        async_sections, amplification = asyncio.run(run_async(base))
        sync_sections = run_sync(base)
    pieces = run_pieces()
    report_time([*async_sections, *sync_sections])
    print()
    report_amplification(amplification)
    print()
    report_pieces(pieces)
    print(f"({time.perf_counter() - started:.1f} s)")


if __name__ == "__main__":
    if sys.argv[1:] == [SERVE_FLAG]:
        serve()
    else:
        main()
