"""The client side of the HTTP chaos scenarios, recorded per logical call.

`Harness` builds the clients (the standard pipeline, `OPTIONS`, over a
recording transport, with every secret of `Secrets` a client may carry
planted in its requests), makes the calls (`herd` releases many at once,
`steady` hands them to `drive_load`) and cancels them. Each `Call` records
when it began and ended (around the send), when its pipeline began (its
first reading of the clock through `RecordingClock`: the total deadline is
set from it), when the response's head came back (httpx's response hook) and
when each attempt left the pipeline (`RecordingTransport`, under the
resilient one). The current call travels in a context variable: each async
call runs in a task of its own, each sync call holds its thread's context.

`LoopLag` samples how late the event loop runs its timers, for the diagnosis
of a missed deadline. The checks and the figures built on these records are
in `tests.chaos.http_chaos_checks`.
"""

from __future__ import annotations

import asyncio
import math
import random
import threading
from collections import Counter
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import httpx

from http_resilience import (
    HttpEvent,
    HttpResilienceOptions,
    RetryEvent,
    SystemClock,
    create_async_client,
    create_client,
)
from tests.chaos.invariants import SecretWatch
from tests.support.load import LoadResult, run_load

CLOCK = SystemClock()

MAX_ATTEMPTS = 3
ATTEMPT_TIMEOUT = 0.25  # seconds
TOTAL_TIMEOUT = 1.5  # seconds
MAX_IN_FLIGHT = 200  # calls a load keeps running at once
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


# --- what each call records ----------------------------------------------------------


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
    # When each attempt's request head began to be written to a connection
    # (httpcore's trace): what went on the wire, and when, on this side.
    writes: list[float] = field(default_factory=list[float])
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


WRITE_BEGINS = "http11.send_request_headers.started"


def written(event: str, info: dict[str, Any]) -> None:
    call = CURRENT.get()
    if call is not None and event == WRITE_BEGINS:
        call.writes.append(CLOCK.monotonic())


async def async_written(event: str, info: dict[str, Any]) -> None:
    written(event, info)


class RecordingTransport(httpx.AsyncHTTPTransport):
    """Under the pipeline: notes when each attempt leaves it, and when it is written.

    httpx's own transport, extended rather than wrapped, as a user would: the
    pipeline still sees its pool, and gives back the slots httpcore loses to
    cancelled attempts.
    """

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        attempt_leaves()
        request.extensions = {**request.extensions, "trace": async_written}
        return await super().handle_async_request(request)


class RecordingSyncTransport(httpx.HTTPTransport):
    """The sync twin of `RecordingTransport`."""

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        attempt_leaves()
        request.extensions = {**request.extensions, "trace": written}
        return super().handle_request(request)


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


def ms(seconds: float) -> float:
    return round(seconds * 1000, 1)


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


# --- a scenario's client side --------------------------------------------------------


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

    def client(self, url: str) -> httpx.AsyncClient:
        inner = RecordingTransport(limits=limits())
        settings = self._settings(url, inner, async_response_hook)
        return create_async_client("chaos", OPTIONS, **settings)

    def sync_client(self, url: str) -> httpx.Client:
        inner = RecordingSyncTransport(limits=limits())
        settings = self._settings(url, inner, response_hook)
        return create_client("chaos", OPTIONS, **settings)

    def _settings(
        self,
        url: str,
        transport: httpx.AsyncBaseTransport | httpx.BaseTransport,
        on_response: Callable[[httpx.Response], object],
    ) -> dict[str, Any]:
        """Both clients' settings: recorded, listened to, every secret planted."""
        return {
            "base_url": url,
            "transport": transport,
            "event_hooks": {"response": [on_response]},
            "clock": RecordingClock(),
            "listeners": [self.listen],
            "headers": {"Authorization": f"Bearer {self.secrets.authorization}"},
            "cookies": {"session": self.secrets.cookie},
        }

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


# --- many calls at once, or at a steady rate ----------------------------------------


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


async def drive_load(
    arrive: Callable[[int], Awaitable[None]], *, rate: float, duration: float
) -> LoadResult:
    """`run_load` as every scenario drives it.

    At most `MAX_IN_FLIGHT` calls at once, and time for the last arrivals to
    end: their total timeout and a second.
    """
    return await run_load(
        arrive,
        rate=rate,
        duration=duration,
        max_in_flight=MAX_IN_FLIGHT,
        drain=TOTAL_TIMEOUT + 1,
    )
