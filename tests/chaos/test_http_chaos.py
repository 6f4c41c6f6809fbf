"""The standard pipeline under a seeded fault mix, with many callers at once.

A chaos server (`tests.support.chaos_server`) draws each physical request's
fate from a seeded plan: about 60% ok, 12% 503 with a valid or an invalid
``Retry-After``, 8% 429, 5% reset, 5% latency past the attempt timeout, 4%
blackhole, 3% cut mid-body and 3% slow close. A fault proxy in `Mix` mode in
front of it applies the TCP faults the server marks in its answers, so every
physical attempt reaches the server, which counts it per logical call (the
call's id is in the URL) with the time it arrived.

The client side records, per logical call: when the call began and ended
(around ``client.get``), when the pipeline began (its first reading of the
clock: the total deadline is set from it), and when each attempt left the
pipeline (a transport under the resilient one). Server and client read the
same monotonic clock: the server runs in a thread of this process.

Invariants, each an assertion:

1. physical attempts per logical call <= the configured maximum, counted at
   the server (and leaving the client);
2. every call ends within its total timeout + 100 ms; no attempt starts after
   the deadline, nor after a cancellation;
3. a cancellation is never swallowed or retried;
7. no POST is retried without an ``Idempotency-Key``;
8. after each scenario, tasks, fds and sockets are back to their baseline;
9. no planted secret (in the ``Authorization`` header, a ``token`` query
   parameter, a cookie, a request body and the server's error bodies) appears
   in logs, exceptions or events.

The breaker and the limiter are kept out of the way (a minimum throughput no
run reaches; 1000 permits for at most 200 calls): they have scenarios of their
own, and a breaker that opened would hide the retry behind fast refusals.

httpx itself logs every request at INFO on the ``httpx`` logger, its full URL
and so its query string included, from `httpx.AsyncClient`, outside the
transport; those lines are dropped from the watch (only those), since they
are httpx's own and would be there without the pipeline.

What a body does after its head has arrived happens outside the pipeline:
httpx reads it after the transport returned the response. So a cut body is
raised to the caller (`httpx.RemoteProtocolError`) and not retried, and a
close later than the time the attempt had left is a `httpx.ReadTimeout`, not
an attempt timeout; both are outcomes of the mix here, not violations.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import math
import random
import threading
from collections import Counter
from collections.abc import (
    AsyncGenerator,
    Awaitable,
    Callable,
    Generator,
    Iterable,
    Iterator,
)
from concurrent.futures import ThreadPoolExecutor
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Protocol

import anyio.to_thread
import httpx
import pytest

from http_resilience import (
    AttemptTimeoutError,
    HttpEvent,
    HttpResilienceOptions,
    RetryEvent,
    SystemClock,
    TotalTimeoutError,
    create_async_client,
    create_client,
)
from tests.chaos.invariants import (
    SecretWatch,
    assert_back_to_baseline,
    leftovers,
    watch_secrets,
)
from tests.support.chaos_server import ChaosPlan, ChaosServer, Hit, serve_chaos
from tests.support.fault_proxy import FaultProxy, MakeProxy, Mix
from tests.support.figures import record
from tests.support.load import LoadResult, run_load

pytestmark = pytest.mark.anyio

CLOCK = SystemClock()

MAX_ATTEMPTS = 3
ATTEMPT_TIMEOUT = 0.25  # seconds
TOTAL_TIMEOUT = 1.5  # seconds
OPTIONS = HttpResilienceOptions(
    max_retry_attempts=MAX_ATTEMPTS - 1,
    base_delay=timedelta(milliseconds=100),
    attempt_timeout=timedelta(seconds=ATTEMPT_TIMEOUT),
    total_request_timeout=timedelta(seconds=TOTAL_TIMEOUT),
    # Out of the way: no run has a million attempts in its window, nor more
    # than 200 calls in flight.
    minimum_throughput=1_000_000,
    concurrency_limit=1000,
)
CONNECTIONS = 16
# Invariant 2's tolerance on how long a call takes, and on how long a
# cancelled call takes to end.
OVERRUN = 0.1  # seconds
# Between the pipeline deciding to send an attempt (with time left) and the
# attempt entering the transport under it there is no await, only a few calls:
# interpreter time and, at worst, two GIL switch intervals of the server's and
# the proxy's threads.
START_SLACK = 0.01  # seconds
# A request written before the deadline (or the cancellation) still crosses the
# proxy's and the server's event loops, threads of this busy process, before
# the server sees it.
TRANSIT = 0.1  # seconds
# The server holds a `latency` answer four attempt timeouts: the client leaves.
LATENCY = 4 * ATTEMPT_TIMEOUT
# Slow closes from well within an attempt's time to twice it.
SLOW_CLOSE = (0.05, 2 * ATTEMPT_TIMEOUT)

EXPECTED_FAILURES = (httpx.TransportError, AttemptTimeoutError, TotalTimeoutError)


# --- the client side, recorded ------------------------------------------------------


@dataclass
class Call:
    """One logical call, as the client saw it."""

    index: int
    method: str
    keyed: bool
    started: float = math.nan
    ended: float = math.nan
    # When the pipeline handed back the response's head (httpx's response
    # hook): the body is read after it, outside the pipeline.
    head_at: float | None = None
    # The pipeline's first clock reading: the total timeout sets its deadline.
    pipeline_started: float | None = None
    attempts: list[float] = field(default_factory=list[float])
    # Between a retry's event and its next attempt: the call waits.
    waiting: bool = False
    outcome: str = "not started"
    error: Exception | None = None
    cancelled_at: float | None = None
    cancelled_waiting: bool = False
    # Cancel on the first retry's wait, this fraction of the way through it.
    cancel_in_wait: float | None = None
    task: asyncio.Task[None] | None = None
    timers: list[asyncio.TimerHandle] = field(default_factory=list[asyncio.TimerHandle])

    @property
    def deadline(self) -> float:
        began = self.started if self.pipeline_started is None else self.pipeline_started
        return began + TOTAL_TIMEOUT

    @property
    def duration(self) -> float:
        """The whole call, the body's read included."""
        return self.ended - self.started

    @property
    def pipeline_duration(self) -> float:
        """Up to the response's head, or the failure the pipeline raised."""
        end = self.ended if self.head_at is None else self.head_at
        return end - self.started


CURRENT: ContextVar[Call | None] = ContextVar("chaos_call", default=None)


class RecordingClock(SystemClock):
    """The system clock; the first reading inside a call is its pipeline's start.

    A subclass of `SystemClock`, so the pipeline still cuts attempts on the
    event loop's timer, as it does on the system clock.
    """

    def monotonic(self) -> float:
        now = super().monotonic()
        call = CURRENT.get()
        if call is not None and call.pipeline_started is None:
            call.pipeline_started = now
        return now


def head_arrives() -> None:
    call = CURRENT.get()
    if call is not None:
        call.head_at = CLOCK.monotonic()


async def async_response_hook(response: httpx.Response) -> None:
    head_arrives()


def response_hook(response: httpx.Response) -> None:
    head_arrives()


def attempt_leaves() -> None:
    call = CURRENT.get()
    if call is not None:
        call.attempts.append(CLOCK.monotonic())
        call.waiting = False


class RecordingTransport(httpx.AsyncBaseTransport):
    """Under the pipeline: notes when each attempt leaves it."""

    def __init__(self, inner: httpx.AsyncBaseTransport) -> None:
        self._inner = inner

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        attempt_leaves()
        return await self._inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self._inner.aclose()


class RecordingSyncTransport(httpx.BaseTransport):
    """The sync twin of `RecordingTransport`."""

    def __init__(self, inner: httpx.BaseTransport) -> None:
        self._inner = inner

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        attempt_leaves()
        return self._inner.handle_request(request)

    def close(self) -> None:
        self._inner.close()


@dataclass(frozen=True)
class Secrets:
    authorization: str
    token: str
    cookie: str
    body: str
    server: str

    @classmethod
    def planted(cls, seed: int) -> Secrets:
        draw = random.Random(seed)
        return cls(*(f"planted-{draw.getrandbits(64):016x}" for _ in range(5)))

    def all(self) -> tuple[str, ...]:
        return (self.authorization, self.token, self.cookie, self.body, self.server)


def limits() -> httpx.Limits:
    return httpx.Limits(
        max_connections=CONNECTIONS, max_keepalive_connections=CONNECTIONS
    )


class LoopLag:
    """How late the event loop runs a timer due every 5 ms: its stalls.

    For the diagnosis of a failed deadline only: this process shares two
    cores with others, and a stall of the whole process (the OS's doing) lands
    on whichever deadline is near.
    """

    PERIOD = 0.005  # seconds

    def __init__(self) -> None:
        self.samples: list[tuple[float, float]] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._due = 0.0
        self._timer: asyncio.TimerHandle | None = None

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._next()

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()

    def _next(self) -> None:
        assert self._loop is not None
        self._due = CLOCK.monotonic() + self.PERIOD
        self._timer = self._loop.call_later(self.PERIOD, self._tick)

    def _tick(self) -> None:
        now = CLOCK.monotonic()
        self.samples.append((now, now - self._due))
        self._next()

    def worst(self) -> float:
        return max((late for _, late in self.samples), default=0.0)

    def near(self, when: float) -> str:
        """The worst stall around `when`, for an assertion's message."""
        late = [lag for at, lag in self.samples if when - 0.05 <= at <= when + 0.25]
        return f"worst loop stall near it: {ms(max(late, default=0.0))} ms"


@dataclass
class Harness:
    """One scenario's client side: its calls and what they let out."""

    watch: SecretWatch
    secrets: Secrets
    lag: LoopLag = field(default_factory=LoopLag)
    calls: dict[int, Call] = field(default_factory=dict[int, Call])
    in_flight: int = 0
    peak_in_flight: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def listen(self, event: HttpEvent) -> None:
        self.watch.event(event)
        call = CURRENT.get()
        if call is None or not isinstance(event, RetryEvent):
            return
        call.waiting = True
        if call.cancel_in_wait is not None and call.task is not None:
            # Listeners run in the call's own task, just before its wait.
            later = call.cancel_in_wait * event.delay
            loop = asyncio.get_running_loop()
            call.timers.append(loop.call_later(later, self.cancel, call.task, call))
            call.cancel_in_wait = None

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.secrets.authorization}"}

    def client(self, url: str) -> httpx.AsyncClient:
        inner = RecordingTransport(httpx.AsyncHTTPTransport(limits=limits()))
        return create_async_client(
            "chaos",
            OPTIONS,
            base_url=url,
            transport=inner,
            event_hooks={"response": [async_response_hook]},
            clock=RecordingClock(),
            listeners=[self.listen],
            headers=self.headers(),
            cookies={"session": self.secrets.cookie},
        )

    def sync_client(self, url: str) -> httpx.Client:
        inner = RecordingSyncTransport(httpx.HTTPTransport(limits=limits()))
        return create_client(
            "chaos",
            OPTIONS,
            base_url=url,
            transport=inner,
            event_hooks={"response": [response_hook]},
            clock=RecordingClock(),
            listeners=[self.listen],
            headers=self.headers(),
            cookies={"session": self.secrets.cookie},
        )

    def new(self, index: int, method: str = "GET", *, keyed: bool = False) -> Call:
        call = Call(index, method, keyed)
        with self._lock:
            assert index not in self.calls
            self.calls[index] = call
        return call

    def _request(
        self, client: httpx.AsyncClient | httpx.Client, call: Call
    ) -> httpx.Request:
        """`call`'s request: every secret a client may carry is in it somewhere."""
        params = {"call": str(call.index), "token": self.secrets.token}
        if call.method != "POST":
            return client.build_request(call.method, "/chaos", params=params)
        body = {"order": call.index, "card": self.secrets.body}
        headers = {"Idempotency-Key": f"order-{call.index}"} if call.keyed else {}
        return client.build_request(
            "POST", "/chaos", params=params, json=body, headers=headers
        )

    def _began(self, call: Call) -> None:
        with self._lock:
            self.in_flight += 1
            self.peak_in_flight = max(self.peak_in_flight, self.in_flight)
        call.started = CLOCK.monotonic()

    def _ended(self, call: Call, outcome: str, error: Exception | None) -> None:
        call.ended = CLOCK.monotonic()
        call.outcome, call.error = outcome, error
        with self._lock:
            self.in_flight -= 1

    async def run(self, client: httpx.AsyncClient, call: Call) -> None:
        """Make `call`; a failure is its outcome, a cancellation propagates."""
        CURRENT.set(call)  # each call runs in a task of its own: its own context
        self._began(call)
        try:
            response = await client.send(self._request(client, call))
        except Exception as error:
            self._ended(call, type(error).__name__, error)
        except BaseException as error:
            self._ended(call, type(error).__name__, None)
            raise
        else:
            self._ended(call, str(response.status_code), None)

    def run_sync(self, client: httpx.Client, call: Call) -> None:
        """`run` on a thread: the thread's context holds the call meanwhile."""
        token = CURRENT.set(call)
        self._began(call)
        try:
            response = client.send(self._request(client, call))
        except Exception as error:
            self._ended(call, type(error).__name__, error)
        else:
            self._ended(call, str(response.status_code), None)
        finally:
            CURRENT.reset(token)

    def cancel(self, task: asyncio.Task[None], call: Call) -> None:
        """Cancel `call`'s task, noting when and in which phase, if it still runs."""
        now = CLOCK.monotonic()
        if task.cancel():
            call.cancelled_at = now
            call.cancelled_waiting = call.waiting

    def exceptions(self) -> list[Exception]:
        return [call.error for call in self.calls.values() if call.error is not None]

    def outcomes(self) -> Counter[str]:
        return Counter(call.outcome for call in self.calls.values())


# --- fixtures and the checks shared by the scenarios ---------------------------------


class StartChaos(Protocol):
    def __call__(self, plan: ChaosPlan) -> tuple[ChaosServer, FaultProxy]: ...


@pytest.fixture
def chaos(fault_proxy: MakeProxy) -> Iterator[StartChaos]:
    """Start a chaos server by a plan, with a proxy in `Mix` mode in front of it."""
    with contextlib.ExitStack() as stack:

        def start(plan: ChaosPlan) -> tuple[ChaosServer, FaultProxy]:
            server = stack.enter_context(serve_chaos(plan))
            proxy = fault_proxy(server.url, seed=plan.seed)
            proxy.set_fault(Mix())
            return server, proxy

        yield start


def plan(seed: int, secrets: Secrets) -> ChaosPlan:
    return ChaosPlan(
        seed=seed, latency=LATENCY, slow_close=SLOW_CLOSE, secret=secrets.server
    )


def _not_a_request_line(record: logging.LogRecord) -> bool:
    return not str(record.msg).startswith("HTTP Request:")


@contextlib.contextmanager
def heap_frozen() -> Generator[None]:
    """Keep the test process's own heap out of the collector meanwhile.

    pytest and everything imported are ~100k objects here: a full collection
    of them stops every thread, the server's and the proxy's too, for 60-80 ms,
    a pause of the test process that would land on whichever deadline is near.
    Frozen, they are skipped; what the scenario makes is collected as usual.
    """
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


@contextlib.asynccontextmanager
async def watched(server: ChaosServer, secrets: Secrets) -> AsyncGenerator[Harness]:
    """A scenario's client side, held to invariants 8 and 9 when it ends."""
    httpx_logger = logging.getLogger("httpx")
    httpx_logger.addFilter(_not_a_request_line)
    try:
        with watch_secrets() as watch, heap_frozen():
            baseline = leftovers()
            harness = Harness(watch, secrets)
            harness.lag.start()
            try:
                yield harness
            finally:
                harness.lag.stop()
            # 8: the client is closed; its connections, the proxy's and the
            # server's sockets, and every task are gone.
            await assert_back_to_baseline(baseline)
            await server.wait_idle()
        # 9: nothing the scenario let out holds a secret.
        for error in harness.exceptions():
            watch.exception(error)
        watch.assert_absent(*secrets.all())
    finally:
        httpx_logger.removeFilter(_not_a_request_line)


def assert_attempts_bounded(harness: Harness, hits: dict[int, list[Hit]]) -> None:
    """Invariant 1: at most MAX_ATTEMPTS per call, at the server and the client."""
    assert set(hits) <= set(harness.calls), "the server saw calls nobody made"
    for index, call in harness.calls.items():
        seen = hits.get(index, [])
        assert len(seen) <= MAX_ATTEMPTS, (call, seen)
        assert len(call.attempts) <= MAX_ATTEMPTS, call
        # Each request the server saw is one the client sent.
        assert len(seen) <= len(call.attempts), (call, seen)


def assert_deadlines_kept(harness: Harness, hits: dict[int, list[Hit]]) -> None:
    """Invariant 2: each call ends in time; no attempt starts after its deadline.

    The pipeline's part (up to the response's head, or its failure) ends
    within the total timeout. The body is read afterwards by httpx, outside
    the pipeline, each read bounded by the time its attempt had left when it
    began: so the whole call ends at most one attempt timeout later.
    """
    for call in harness.calls.values():
        if call.cancelled_at is not None:
            continue  # held to its cancellation instead, a stricter bound
        stall = harness.lag.near(call.deadline)
        assert call.pipeline_duration <= TOTAL_TIMEOUT + OVERRUN, (call, stall)
        assert call.duration <= TOTAL_TIMEOUT + ATTEMPT_TIMEOUT + OVERRUN, (
            call,
            stall,
        )
        assert call.pipeline_started is not None, call
        assert call.started <= call.pipeline_started, call
        for started in call.attempts:
            assert started <= call.deadline + START_SLACK, call
        for hit in hits.get(call.index, []):
            assert hit.received <= call.deadline + TRANSIT, (call, hit)


def assert_expected_outcomes(harness: Harness) -> None:
    """Each call got an answer or a failure of the mix, never anything else."""
    for call in harness.calls.values():
        if call.error is None:
            assert call.outcome in ("200", "429", "503", "CancelledError"), call
        else:
            assert isinstance(call.error, EXPECTED_FAILURES), repr(call.error)


def margins(harness: Harness, hits: dict[int, list[Hit]]) -> dict[str, object]:
    """Invariant 2's worst margins (ms; negative: to spare), for the figures."""
    calls = [call for call in harness.calls.values() if call.cancelled_at is None]
    starts = [start - call.deadline for call in calls for start in call.attempts]
    arrivals = [
        hit.received - call.deadline
        for call in calls
        for hit in hits.get(call.index, [])
    ]
    return {
        "max_overrun_past_total_ms": ms(
            max(c.pipeline_duration - TOTAL_TIMEOUT for c in calls)
        ),
        "max_overrun_past_total_with_body_ms": ms(
            max(c.duration - TOTAL_TIMEOUT for c in calls)
        ),
        "latest_attempt_start_vs_deadline_ms": ms(max(starts)),
        "latest_server_arrival_vs_deadline_ms": ms(max(arrivals, default=-math.inf)),
        "worst_loop_stall_ms": ms(harness.lag.worst()),
    }


def ms(seconds: float) -> float:
    return round(seconds * 1000, 1)


def latencies(calls: Iterable[Call], prefix: str = "") -> dict[str, object]:
    """Nearest-rank percentiles of the calls' whole durations, in ms."""
    ended = sorted(call.duration for call in calls if call.cancelled_at is None)

    def rank(fraction: float) -> float:
        return ms(ended[max(1, math.ceil(fraction * len(ended))) - 1])

    return {
        f"{prefix}p50_ms": rank(0.5),
        f"{prefix}p95_ms": rank(0.95),
        f"{prefix}p99_ms": rank(0.99),
    }


def load_figures(result: LoadResult) -> dict[str, object]:
    return {
        "arrivals": result.arrivals,
        "dropped": result.dropped,
        "abandoned": result.abandoned,
        "max_arrival_lateness_ms": ms(result.max_lateness),
    }


def attempts_histogram(
    calls: Iterable[Call], hits: dict[int, list[Hit]]
) -> dict[int, int]:
    """How many calls the server saw once, twice, ..."""
    counts = Counter(len(hits.get(call.index, [])) for call in calls)
    return dict(sorted(counts.items()))


def fates(hits: dict[int, list[Hit]]) -> dict[str, int]:
    return dict(Counter(hit.fate for seen in hits.values() for hit in seen))


async def herd(
    harness: Harness,
    client: httpx.AsyncClient,
    calls: list[Call],
) -> None:
    """Release every call at once and wait for them all."""
    async with asyncio.TaskGroup() as group:
        for call in calls:
            group.create_task(harness.run(client, call))


def steady(
    harness: Harness, client: httpx.AsyncClient, make: Callable[[int], Call]
) -> Callable[[int], Awaitable[None]]:
    """`run_load`'s call: arrival i makes the call `make(i)`."""

    async def arrive(index: int) -> None:
        await harness.run(client, make(index))

    return arrive


# --- a. GETs under the mix ---------------------------------------------------------

GET_SEED = 1501
HERD = 150  # calls released at once, on 16 connections
GET_RATE = 100.0  # arrivals per second afterwards
GET_DURATION = 3.0  # seconds


async def test_gets_under_the_mix_keep_attempts_and_deadlines_bounded(
    chaos: StartChaos,
) -> None:
    secrets = Secrets.planted(GET_SEED)
    server, proxy = chaos(plan(GET_SEED, secrets))
    async with (
        watched(server, secrets) as harness,
        harness.client(proxy.url) as client,
    ):
        await herd(harness, client, [harness.new(i) for i in range(HERD)])
        herd_peak = harness.peak_in_flight
        result = await run_load(
            steady(harness, client, lambda i: harness.new(HERD + i)),
            rate=GET_RATE,
            duration=GET_DURATION,
            max_in_flight=200,
            drain=TOTAL_TIMEOUT + 1,
        )
    hits = server.hits()
    record(
        "http_chaos_get_mix",
        seed=GET_SEED,
        herd=HERD,
        rate=GET_RATE,
        duration=GET_DURATION,
        calls=len(harness.calls),
        herd_peak_in_flight=herd_peak,
        outcomes=dict(harness.outcomes()),
        attempts_histogram=attempts_histogram(harness.calls.values(), hits),
        fates=fates(hits),
        **latencies(list(harness.calls.values())[:HERD], "herd_"),
        **latencies(list(harness.calls.values())[HERD:], "steady_"),
        **load_figures(result),
        **margins(harness, hits),
    )
    assert herd_peak == HERD
    assert result.abandoned == 0
    assert_expected_outcomes(harness)
    assert_attempts_bounded(harness, hits)
    assert_deadlines_kept(harness, hits)
    # The mix did its work: calls were retried to the limit, and most succeeded.
    assert attempts_histogram(harness.calls.values(), hits).get(MAX_ATTEMPTS, 0) > 0
    assert harness.outcomes()["200"] > len(harness.calls) / 2


# --- b. POSTs, with and without an idempotency key -----------------------------------

POST_SEED = 2602
POST_RATE = 120.0
POST_DURATION = 2.5


async def test_a_post_without_an_idempotency_key_is_sent_once(
    chaos: StartChaos,
) -> None:
    secrets = Secrets.planted(POST_SEED)
    server, proxy = chaos(plan(POST_SEED, secrets))
    keyed = random.Random(POST_SEED)
    async with (
        watched(server, secrets) as harness,
        harness.client(proxy.url) as client,
    ):
        result = await run_load(
            steady(
                harness,
                client,
                lambda i: harness.new(i, "POST", keyed=keyed.random() < 0.5),
            ),
            rate=POST_RATE,
            duration=POST_DURATION,
            max_in_flight=200,
            drain=TOTAL_TIMEOUT + 1,
        )
    hits = server.hits()
    unkeyed = [call for call in harness.calls.values() if not call.keyed]
    with_key = [call for call in harness.calls.values() if call.keyed]
    # A failure the retry would have answered, on the one attempt an unkeyed
    # POST gets: the rule was put to the test.
    refused_a_retry = [
        call
        for call in unkeyed
        if [hit.fate for hit in hits.get(call.index, [])] != ["ok"]
    ]
    record(
        "http_chaos_post_mix",
        seed=POST_SEED,
        rate=POST_RATE,
        duration=POST_DURATION,
        calls=len(harness.calls),
        keyed=len(with_key),
        peak_in_flight=harness.peak_in_flight,
        outcomes=dict(harness.outcomes()),
        unkeyed_attempts_histogram=attempts_histogram(unkeyed, hits),
        keyed_attempts_histogram=attempts_histogram(with_key, hits),
        unkeyed_that_failed_once=len(refused_a_retry),
        **latencies(harness.calls.values()),
        **load_figures(result),
        **margins(harness, hits),
    )
    assert result.abandoned == 0
    assert_expected_outcomes(harness)
    assert_attempts_bounded(harness, hits)
    assert_deadlines_kept(harness, hits)
    for call in unkeyed:  # 7
        seen = hits.get(call.index, [])
        assert len(call.attempts) == 1, call
        # Once at the server too, unless the one attempt ran out of time
        # waiting for a connection and never left the client's pool.
        assert len(seen) == 1 or isinstance(call.error, AttemptTimeoutError), call
        assert [hit.keyed for hit in seen] == [False] * len(seen)
    for call in with_key:
        assert all(hit.keyed for hit in hits.get(call.index, [])), call
    assert len(refused_a_retry) > 10
    assert any(len(hits.get(call.index, [])) == MAX_ATTEMPTS for call in with_key)


# --- c. cancellation under the mix ---------------------------------------------------

CANCEL_SEED = 3703
CANCEL_RATE = 120.0
CANCEL_DURATION = 2.5
CANCELLED_SHARE = 0.5


def plan_cancel(call: Call, draw: random.Random) -> float | None:
    """Arrange `call`'s cancellation; seconds after it arrives, if at a time."""
    if draw.random() >= CANCELLED_SHARE:
        return None
    kind = draw.random()
    if kind < 0.3:
        return draw.uniform(0.0, 0.01)  # during its first attempt, mostly
    if kind < 0.65:
        return draw.uniform(0.02, TOTAL_TIMEOUT)  # in an attempt or a wait
    call.cancel_in_wait = draw.random()  # if it ever waits to retry
    return None


async def test_a_cancelled_call_raises_cancelled_and_sends_nothing_more(
    chaos: StartChaos,
) -> None:
    secrets = Secrets.planted(CANCEL_SEED)
    server, proxy = chaos(plan(CANCEL_SEED, secrets))
    draw = random.Random(CANCEL_SEED)
    ended_cancelled: dict[int, bool] = {}
    async with (
        watched(server, secrets) as harness,
        harness.client(proxy.url) as client,
    ):
        loop = asyncio.get_running_loop()

        async def arrive(index: int) -> None:
            call = harness.new(index)
            task = call.task = asyncio.create_task(harness.run(client, call))
            delay = plan_cancel(call, draw)
            if delay is not None:
                call.timers.append(loop.call_later(delay, harness.cancel, task, call))
            try:
                await asyncio.wait([task])
            finally:
                for timer in call.timers:
                    timer.cancel()
                if not task.done():  # the load driver gave up on us
                    task.cancel()
                    await asyncio.wait([task])
            call.task = None
            ended_cancelled[index] = task.cancelled()

        result = await run_load(
            arrive,
            rate=CANCEL_RATE,
            duration=CANCEL_DURATION,
            max_in_flight=200,
            drain=TOTAL_TIMEOUT + 1,
        )
    hits = server.hits()
    cancelled = [c for c in harness.calls.values() if c.cancelled_at is not None]
    in_wait = [c for c in cancelled if c.cancelled_waiting]
    in_attempt = [c for c in cancelled if not c.cancelled_waiting]
    record(
        "http_chaos_cancellation",
        seed=CANCEL_SEED,
        rate=CANCEL_RATE,
        duration=CANCEL_DURATION,
        calls=len(harness.calls),
        cancelled=len(cancelled),
        cancelled_in_an_attempt=len(in_attempt),
        cancelled_in_a_retry_wait=len(in_wait),
        max_end_after_cancel_ms=ms(
            max(c.ended - (c.cancelled_at or 0) for c in cancelled)
        ),
        outcomes=dict(harness.outcomes()),
        attempts_histogram=attempts_histogram(harness.calls.values(), hits),
        **load_figures(result),
        **margins(harness, hits),
    )
    assert result.abandoned == 0
    assert_expected_outcomes(harness)
    assert_attempts_bounded(harness, hits)
    assert_deadlines_kept(harness, hits)
    for call in cancelled:  # 3, and 2 after a cancellation
        assert call.cancelled_at is not None
        # Raised, neither swallowed nor turned into an answer or another error.
        assert ended_cancelled[call.index], call
        assert (call.outcome, call.error) == ("CancelledError", None), call
        assert call.ended - call.cancelled_at <= OVERRUN, call
        # Not retried: no attempt left after the cancellation, and the server
        # saw nothing but what was already on its way.
        assert all(start < call.cancelled_at for start in call.attempts), call
        for hit in hits.get(call.index, []):
            assert hit.received <= call.cancelled_at + TRANSIT, (call, hit)
    for index, was_cancelled in ended_cancelled.items():
        call = harness.calls[index]
        assert was_cancelled == (call.cancelled_at is not None), call
    # Both phases were put to the test.
    assert len(in_wait) >= 10
    assert len(in_attempt) >= 10


# --- d. the sync client, from a pool of threads ---------------------------------------

SYNC_SEED = 4804
SYNC_THREADS = 16
SYNC_CALLS = 300


async def test_the_sync_client_keeps_attempts_deadlines_and_posts_bounded(
    chaos: StartChaos,
) -> None:
    secrets = Secrets.planted(SYNC_SEED)
    server, proxy = chaos(plan(SYNC_SEED, secrets))
    draw = random.Random(SYNC_SEED)
    kinds = [draw.choice(["GET", "GET", "POST", "POST+key"]) for _ in range(SYNC_CALLS)]
    async with watched(server, secrets) as harness:
        calls = [
            harness.new(index, kind[:4], keyed=kind.endswith("key"))
            for index, kind in enumerate(kinds)
        ]

        def drive() -> None:
            with (
                harness.sync_client(proxy.url) as client,
                ThreadPoolExecutor(SYNC_THREADS) as pool,
            ):
                for done in [pool.submit(harness.run_sync, client, c) for c in calls]:
                    done.result()

        await anyio.to_thread.run_sync(drive)
    hits = server.hits()
    record(
        "http_chaos_sync",
        seed=SYNC_SEED,
        threads=SYNC_THREADS,
        calls=len(harness.calls),
        peak_in_flight=harness.peak_in_flight,
        outcomes=dict(harness.outcomes()),
        attempts_histogram=attempts_histogram(harness.calls.values(), hits),
        **latencies(harness.calls.values()),
        **margins(harness, hits),
    )
    assert harness.peak_in_flight == SYNC_THREADS
    assert_expected_outcomes(harness)
    assert_attempts_bounded(harness, hits)
    assert_deadlines_kept(harness, hits)
    for call in calls:
        if call.method == "POST" and not call.keyed:  # 7
            assert len(call.attempts) == 1, call
            assert len(hits.get(call.index, [])) == 1, call
    assert attempts_histogram(harness.calls.values(), hits).get(MAX_ATTEMPTS, 0) > 0
