"""The adaptive limiter against a server that queues: issue 28's proof.

Run by `make bench`. A child process serves one route under uvicorn on
127.0.0.1: `CAPACITY` requests at once, each `SERVICE_S` long (an asyncio
sleep); a request beyond the capacity waits for a slot, so latency grows with
concurrency, and one that waited `SERVER_QUEUE_TIMEOUT_S` is answered 503 (the
server sheds it). Its capacity is ``CAPACITY / SERVICE_S`` requests a second.

Each limiter gets one client of its own (`create_async_client` with a custom
pipeline that holds the limiter alone: no retry, no breaker, no timeout, so
nothing but the limiter decides what is sent), and one open-loop run of
Poisson arrivals whose rate rises in steps through `LOAD_STEPS` times the
capacity. The limiter keeps what it learned from one step to the next, as it
would while load rises. Each step runs `SETTLE_S` first (not counted), then
`MEASURE_S` measured: the answers that ended in it. The rows:

- no limiter;
- the static limiter at 1,000 (the standard pipeline's default);
- the static limiter hand-tuned to the server's capacity (`CAPACITY`,
  queue 0): the best fixed limit, for one who knows the capacity;
- the adaptive limiter with its defaults (queue 0), and with a small queue;
- the standard pipeline with ``adaptive_concurrency=True`` (retry, breaker
  with its slow-call trip, adaptive attempt timeout, all on).

Per step: goodput (200s a second, and as a share of the capacity), p50 and
p99 latency of the 200s (ms, and p99 as a multiple of the unloaded latency,
the median of `UNLOADED_CALLS` calls sent one at a time), refusals by the
limiter a second, 503s the server shed a second, and the limit at the step's
end. The goal (issue 28), judged for the adaptive rows at every step past
the capacity: goodput at least `GOAL_GOODPUT` of the capacity with p99 at most
`GOAL_P99` times the unloaded latency. The script only reports: it never fails
on a figure.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import math
import os
import platform
import random
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import child_server  # benchmarks/: beside this script
import httpx

import http_resilience
from http_resilience import (
    AdaptiveLimiterOptions,
    ConcurrencyLimiterOptions,
    HttpResilienceOptions,
    RateLimitedError,
    ResilienceError,
    ResiliencePipeline,
)

CAPACITY = 8  # slots at the server
SERVICE_S = 0.05  # each request's time in a slot
SERVER_QUEUE_TIMEOUT_S = 2.0  # a request waiting longer for a slot gets a 503
LOAD_STEPS = (0.5, 1.0, 1.5, 2.0, 3.0)  # offered load, x the capacity
SETTLE_S = 1.0  # the start of each step, not counted
MEASURE_S = 3.0  # then measured
UNLOADED_CALLS = 60  # sent one at a time, after `WARM_UP` others
WARM_UP = 20
MAX_IN_FLIGHT = 4_000  # the load generator's bound on calls it keeps open
DRAIN_S = 5.0  # the calls still open after a run get this long, then cancel
IDLE_WAIT_S = 10.0  # before a run, for the server to finish the last one's queue
SMALL_QUEUE = 4
# The static limit that did best here among 8, 10 and 12 (`--static 8,10,12`):
# enough for the server never to wait for the next arrival, little queue.
BEST_FIXED = 10
COLD_LOAD = 2.0  # the cold start's load, from its first call
SEED = 28
GOAL_GOODPUT = 0.9  # x the capacity
GOAL_P99 = 2.0  # x the unloaded latency
# A server left behind by a parent that died stops on its own after this long.
SERVER_LIFETIME_S = 600
SERVE_FLAG = child_server.SERVE_FLAG

Message = dict[str, Any]


# --- the server (child process) ----------------------------------------------


async def pause(seconds: float) -> None:
    """Wait `seconds` of real time (none if negative)."""
    await asyncio.sleep(max(0.0, seconds))  # noqa: TID251 - real time is the point


class QueueingApp:
    """`/work`: a slot of `CAPACITY` for `SERVICE_S`; 503 after waiting too long.

    `/stats`: what it served and shed, who is inside and waiting now, and the
    process's CPU seconds, as ``served shed inside waiting cpu``.
    """

    def __init__(self) -> None:
        self.slots = asyncio.Semaphore(CAPACITY)
        self.served = 0
        self.shed = 0
        self.inside = 0
        self.waiting = 0

    async def __call__(
        self,
        scope: Message,
        receive: Callable[[], Awaitable[Message]],
        send: Callable[[Message], Awaitable[None]],
    ) -> None:
        if scope["type"] != "http":
            return
        status, body = 404, b"no such route"
        if scope["path"] == "/work":
            status, body = await self.work()
        elif scope["path"] == "/stats":
            figures = (self.served, self.shed, self.inside, self.waiting)
            cpu = time.process_time()
            status, body = 200, f"{' '.join(map(str, figures))} {cpu}".encode()
        headers = [
            (b"content-type", b"text/plain"),
            (b"content-length", str(len(body)).encode()),
        ]
        start = {"type": "http.response.start", "status": status}
        await send({**start, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    async def work(self) -> tuple[int, bytes]:
        self.waiting += 1
        try:
            async with asyncio.timeout(SERVER_QUEUE_TIMEOUT_S):
                await self.slots.acquire()
        except TimeoutError:
            self.shed += 1
            return 503, b"queue timeout"
        finally:
            self.waiting -= 1
        self.inside += 1
        try:
            await pause(SERVICE_S)
        finally:
            self.inside -= 1
            self.slots.release()
        self.served += 1
        return 200, b"done"


@dataclass(frozen=True)
class ServerStats:
    """The server's counts at one moment (see `QueueingApp`)."""

    served: int
    shed: int
    inside: int
    waiting: int
    cpu: float
    at: float  # this process's perf_counter when read

    @classmethod
    async def read(cls, client: httpx.AsyncClient, base_url: str) -> ServerStats:
        response = await client.get(f"{base_url}/stats")
        served, shed, inside, waiting, cpu = response.text.split()
        figures = (int(served), int(shed), int(inside), int(waiting))
        return cls(*figures, float(cpu), time.perf_counter())


def serve() -> None:
    """Serve `QueueingApp` until stdin closes, SIGTERM, or `SERVER_LIFETIME_S`."""
    child_server.serve(QueueingApp(), lifetime=SERVER_LIFETIME_S, backlog=4096)


def local_server() -> contextlib.AbstractContextManager[str]:
    """Start the server in a child process; yield its base URL; stop it."""
    return child_server.child_server(__file__)


# --- the clients ---------------------------------------------------------------


@dataclass(frozen=True)
class Limiter:
    label: str
    pipeline: ResiliencePipeline | None  # None: the standard pipeline
    options: HttpResilienceOptions | None = None
    loads: tuple[float, ...] = LOAD_STEPS


def limiters(extra: Sequence[int] = ()) -> list[Limiter]:
    bare = ResiliencePipeline()
    more = [
        Limiter(
            f"static {limit}",
            bare.add_limiter(ConcurrencyLimiterOptions(concurrency_limit=limit)),
        )
        for limit in extra
    ]
    return [
        Limiter("no limiter", bare),
        Limiter(
            "static 1,000 (the default)",
            bare.add_limiter(ConcurrencyLimiterOptions(concurrency_limit=1000)),
        ),
        Limiter(
            f"static {CAPACITY} (hand-tuned: the capacity)",
            bare.add_limiter(ConcurrencyLimiterOptions(concurrency_limit=CAPACITY)),
        ),
        Limiter(
            f"static {BEST_FIXED} (hand-tuned: the best fixed)",
            bare.add_limiter(ConcurrencyLimiterOptions(concurrency_limit=BEST_FIXED)),
        ),
        Limiter("adaptive (defaults, queue 0)", bare.add_adaptive_limiter()),
        Limiter(
            f"adaptive, queue {SMALL_QUEUE}",
            bare.add_adaptive_limiter(AdaptiveLimiterOptions(queue_limit=SMALL_QUEUE)),
        ),
        Limiter(
            "standard pipeline, adaptive_concurrency",
            None,
            HttpResilienceOptions(adaptive_concurrency=True),
        ),
        Limiter(
            f"adaptive, cold start at {COLD_LOAD:.0f}x",
            bare.add_adaptive_limiter(),
            loads=(COLD_LOAD,) * len(LOAD_STEPS),
        ),
        *more,
    ]


def client_for(limiter: Limiter) -> httpx.AsyncClient:
    # The pool never holds a call back: only the limiter under test does.
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=None)
    return http_resilience.create_async_client(
        "load",
        limiter.options if limiter.pipeline is None else None,
        pipeline=limiter.pipeline,
        limits=limits,
        timeout=httpx.Timeout(30.0),
    )


def current_limit(client: httpx.AsyncClient) -> str:
    """The limit the client's limiter holds now, static or learned ("-": none)."""
    seen = http_resilience.health(client)
    if seen.adaptive_limits:
        return str(seen.adaptive_limits[0].limit)
    if seen.limiters:
        return str(seen.limiters[0].limit)
    return "-"


# --- the load ------------------------------------------------------------------


@dataclass
class Step:
    load: float  # x the capacity
    offered: float  # arrivals a second
    start: float = 0.0  # of the measured part
    end: float = 0.0
    latencies: list[float] = field(default_factory=list[float])  # the 200s
    refused: int = 0
    shed: int = 0
    errors: int = 0
    limit: str = ""
    server_busy: float = 0.0  # the server's slots in use, share of the window
    server_cpu: float = 0.0  # its CPU seconds a second
    client_cpu: float = 0.0  # ours


@dataclass
class Run:
    label: str
    steps: list[Step]
    dropped: int = 0  # arrivals the load generator did not send (MAX_IN_FLIGHT)
    cancelled: int = 0  # calls still open after DRAIN_S
    note: str = ""


def capacity_per_s() -> float:
    return CAPACITY / SERVICE_S


async def one_call(
    client: httpx.AsyncClient, url: str, record: Callable[[float, str, float], None]
) -> None:
    started = time.perf_counter()
    try:
        response = await client.get(url)
        kind = "ok" if response.status_code == 200 else "shed"
    except RateLimitedError:
        kind = "refused"
    except (httpx.HTTPError, ResilienceError):
        kind = "error"
    ended = time.perf_counter()
    record(ended, kind, ended - started)


async def until_idle(observer: httpx.AsyncClient, base_url: str) -> None:
    """Wait (at most `IDLE_WAIT_S`) for the server to hold and queue nothing."""
    deadline = time.perf_counter() + IDLE_WAIT_S
    while time.perf_counter() < deadline:
        stats = await ServerStats.read(observer, base_url)
        if not stats.inside and not stats.waiting:
            return
        await pause(0.1)


async def load_run(limiter: Limiter, base_url: str, observer: httpx.AsyncClient) -> Run:
    """Open-loop Poisson arrivals, rising through `LOAD_STEPS`, on one client."""
    url = f"{base_url}/work"
    rng = random.Random(SEED)
    capacity = capacity_per_s()
    run = Run(limiter.label, [Step(load, load * capacity) for load in limiter.loads])
    records: list[tuple[float, str, float]] = []

    def record(ended: float, kind: str, latency: float) -> None:
        records.append((ended, kind, latency))

    def send(client: httpx.AsyncClient) -> None:
        if len(tasks) >= MAX_IN_FLIGHT:
            run.dropped += 1
            return
        task = asyncio.create_task(one_call(client, url, record))
        tasks.add(task)
        task.add_done_callback(tasks.discard)

    tasks: set[asyncio.Task[None]] = set()
    await until_idle(observer, base_url)
    async with client_for(limiter) as client:
        began = time.perf_counter()
        for step in run.steps:
            step.start = began + SETTLE_S
            step.end = step.start + MEASURE_S
            arrival = began + rng.expovariate(step.offered)
            first: ServerStats | None = None
            cpu = 0.0
            while arrival < step.end:
                if first is None and arrival >= step.start:
                    first = await ServerStats.read(observer, base_url)
                    cpu = time.process_time()
                while arrival <= time.perf_counter() and arrival < step.end:
                    send(client)
                    arrival += rng.expovariate(step.offered)
                if arrival < step.end:
                    await pause(arrival - time.perf_counter())
            await pause(step.end - time.perf_counter())
            last = await ServerStats.read(observer, base_url)
            step.limit = current_limit(client)
            if first is not None:
                seconds = last.at - first.at
                served = last.served - first.served
                step.server_busy = served * SERVICE_S / CAPACITY / seconds
                step.server_cpu = (last.cpu - first.cpu) / seconds
                step.client_cpu = (time.process_time() - cpu) / seconds
            began = step.end
        if tasks:
            _done, pending = await asyncio.wait(set(tasks), timeout=DRAIN_S)
            run.cancelled = len(pending)
            for task in pending:
                task.cancel()
            if pending:
                await asyncio.wait(pending, timeout=DRAIN_S)
    for step in run.steps:
        for ended, kind, latency in records:
            if not step.start <= ended < step.end:
                continue
            if kind == "ok":
                step.latencies.append(latency)
            elif kind == "refused":
                step.refused += 1
            elif kind == "shed":
                step.shed += 1
            else:
                step.errors += 1
    return run


async def unloaded(url: str) -> list[float]:
    """Latencies of calls sent one at a time, through a pipeline with nothing in it."""
    latencies: list[float] = []
    async with client_for(limiters()[0]) as client:
        for index in range(WARM_UP + UNLOADED_CALLS):
            started = time.perf_counter()
            response = await client.get(url)
            response.raise_for_status()
            if index >= WARM_UP:
                latencies.append(time.perf_counter() - started)
    return sorted(latencies)


# --- the report ----------------------------------------------------------------


def quantile(ordered: list[float], share: float) -> float:
    """The nearest-rank quantile of sorted figures (nan when there are none)."""
    if not ordered:
        return float("nan")
    rank = max(1, math.ceil(share * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


def meets(step: Step, base: float) -> bool:
    goodput = len(step.latencies) / MEASURE_S
    p99 = quantile(sorted(step.latencies), 0.99)
    return goodput >= GOAL_GOODPUT * capacity_per_s() and p99 <= GOAL_P99 * base


def report(runs: list[Run], base_latencies: list[float], seconds: float) -> None:
    base = quantile(base_latencies, 0.5)
    capacity = capacity_per_s()
    load = ", ".join(f"{figure:.2f}" for figure in os.getloadavg())
    print(
        f"Adaptive limiter under load (Python {platform.python_version()}, "
        f"httpx {httpx.__version__}; {os.cpu_count()} cores, load average {load})"
    )
    print(
        f"server: {CAPACITY} slots x {SERVICE_S * 1000:.0f} ms = capacity "
        f"{capacity:.0f}/s, queue timeout {SERVER_QUEUE_TIMEOUT_S:.0f} s (503); "
        f"open-loop Poisson arrivals, each step {SETTLE_S:.0f} s settling + "
        f"{MEASURE_S:.0f} s measured"
    )
    print(
        f"unloaded latency (one call at a time, {len(base_latencies)} calls): "
        f"p50 {base * 1000:.1f} ms, p99 {quantile(base_latencies, 0.99) * 1000:.1f} ms"
    )
    print()
    print(
        f"{'limiter':<42} {'load':>5} {'goodput/s':>9} {'%cap':>5} "
        f"{'p50 ms':>7} {'p99 ms':>7} {'p99/unl':>7} {'refused/s':>9} "
        f"{'shed/s':>6} {'limit':>5} {'srv busy':>8} {'cpu srv':>7} {'cpu cli':>7}"
    )
    for run in runs:
        if run.note:
            print(f"{run.label:<42} {run.note}")
            continue
        for index, step in enumerate(run.steps):
            label = run.label if index == 0 else ""
            ordered = sorted(step.latencies)
            goodput = len(ordered) / MEASURE_S
            p50, p99 = quantile(ordered, 0.5), quantile(ordered, 0.99)
            print(
                f"{label:<42} {step.load:>4.1f}x {goodput:>9.0f} "
                f"{goodput / capacity:>5.0%} {p50 * 1000:>7.1f} {p99 * 1000:>7.1f} "
                f"{p99 / base:>6.1f}x {step.refused / MEASURE_S:>9.0f} "
                f"{step.shed / MEASURE_S:>6.0f} {step.limit:>5} "
                f"{step.server_busy:>8.0%} {step.server_cpu:>7.0%} "
                f"{step.client_cpu:>7.0%}"
            )
        if run.dropped or run.cancelled or any(step.errors for step in run.steps):
            errors = sum(step.errors for step in run.steps)
            print(
                f"{'':<42} (not sent: {run.dropped}, cancelled at the end: "
                f"{run.cancelled}, errors: {errors})"
            )
    print()
    goal = (
        f"goodput >= {GOAL_GOODPUT:.0%} of capacity and p99 <= {GOAL_P99:.0f}x "
        f"unloaded, at every step past capacity"
    )
    print(f"GOAL (issue 28): {goal}")
    for run in runs:
        if run.note:
            continue
        past = [step for step in run.steps if step.load > 1.0]
        missed = [f"{step.load:.1f}x" for step in past if not meets(step, base)]
        verdict = "MEETS" if not missed else f"MISSES at {', '.join(missed)}"
        print(f"  {run.label:<42} {verdict}")
    print(f"({seconds:.1f} s)")


async def run_all(
    base_url: str, extra: Sequence[int], only: str
) -> tuple[list[Run], list[float]]:
    base_latencies = await unloaded(f"{base_url}/work")
    runs: list[Run] = []
    chosen = [limiter for limiter in limiters(extra) if only in limiter.label]
    async with httpx.AsyncClient(timeout=30.0) as observer:
        for limiter in chosen:
            try:
                runs.append(await load_run(limiter, base_url, observer))
            except (AttributeError, TypeError, ValueError) as error:
                runs.append(Run(limiter.label, [], note=f"skipped: {error}"))
    return runs, base_latencies


def main() -> None:
    parser = argparse.ArgumentParser(
        description="The adaptive limiter against a server that queues."
    )
    parser.add_argument(
        "--static",
        default="",
        help="more static limits to run beside the others, comma-separated",
    )
    parser.add_argument(
        "--only", default="", help="run only the limiters whose label holds this"
    )
    arguments = parser.parse_args()
    extra = [int(limit) for limit in arguments.static.split(",") if limit]
    started = time.perf_counter()
    with local_server() as base_url:
        runs, base_latencies = asyncio.run(run_all(base_url, extra, arguments.only))
    report(runs, base_latencies, time.perf_counter() - started)


if __name__ == "__main__":
    if sys.argv[1:] == [SERVE_FLAG]:
        serve()
    else:
        main()
