"""What `SharedState` costs a request: on loopback, and while Redis misbehaves.

Starts a throwaway ``redis-server`` on 127.0.0.1 (a free port, no persistence;
or uses ``REDIS_URL``). Two parts, about 25 s in all; this script only reports.

Per request: sequential requests through a default `ResilientTransport`
around an `httpx.MockTransport` answering 200 (the budget deposits on every
call), called directly, with and without ``shared=``: the sync thread runs
against Redis every 100 ms meanwhile. Prints p50 and p99 per request for each,
in rounds taken in turn, and the p99 difference. Budget (issue 17): <= 200 us
added at p99.

Under Redis faults (issue 23): the comparison the chaos test
`tests/chaos/test_shared_redis_faults.py` records but no longer asserts. Two
shared replicas (each its own `SharedState`, reaching Redis through a small
fault proxy) and two control replicas (local state only) run in one event
loop under the same constant arrival rate, against a `MockTransport` host
that fails one call in five (so retries draw on the budget and the breaker
counts). Per phase (pass-through, latency beyond the socket timeout,
connection resets, a blackhole) it prints the p99 of the calls to the
healthy route (no retry in them, so no backoff in the figure) for each side,
taken at the same time, and their ratio, shared over control.

How to read the ratio: both sides share one loop, one GIL and one machine,
and start their calls on one schedule, so what the machine does to one it
does to the other; what is left is what the shared replicas do on the
request path. Near 1 no call waits on Redis: measured 0.9 to 1.2 on a quiet
2-core machine; p99s well under a millisecond meet every scheduling hiccup,
so on a busy one a single run ranges from about 0.1 to 10. A shared call that
waited on a sync would wait its socket timeout (one sync interval, 100 ms):
the ratio in the hundreds and the shared count of calls over 100 ms above 0.
Both p99s high and both counts above 0, the ratio near 1: the loop itself
was blocked, for every replica (a Redis command on the calls' thread, which
the chaos test counts). "fell back" says whether the shared replicas were on
local state at the phase's end, as a fault phase must leave them (else it
tested nothing).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import socket
import struct
import subprocess
import tempfile
import threading
import time
from collections.abc import Generator
from dataclasses import dataclass, field

import httpx

from http_resilience import (
    BrokenCircuitError,
    HttpResilienceOptions,
    ResilientTransport,
    SharedState,
    SystemClock,
    create_async_client,
)

ROUNDS = 5
REQUESTS = 4_000

CLOCK = SystemClock()
INTERVAL = 0.1  # the sync interval, and so the Redis socket timeout
LATENCY = 0.3  # added to each answer from Redis under "latency"
REPLICAS = 2  # shared, and as many controls
RATE = 200.0  # arrivals a second, per replica
PHASE_SECONDS = 3.0
FAILING_EVERY = 5  # one call in five goes to the route that always fails
RESUME_LIMIT = 8.0  # the longest backoff (5 s), a sync, and slack
FAULTS = ("pass-through", "latency", "reset", "blackhole")
OPTIONS = {
    "base_delay": "1ms",
    "max_retry_attempts": 2,
    "retry_budget_ratio": 0.2,
    "retry_budget_min_per_second": 5,
    "minimum_throughput": 20,
    "failure_ratio": 0.5,
    "break_duration": 1,
}


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@contextlib.contextmanager
def redis_url() -> Generator[str | None]:
    """``REDIS_URL``, or a throwaway server's URL; None without one."""
    given = os.environ.get("REDIS_URL")
    if given:
        yield given
        return
    binary = shutil.which("redis-server")
    if binary is None:
        yield None
        return
    port = _free_port()
    directory = tempfile.mkdtemp(prefix="bench-redis-")
    process = subprocess.Popen(
        [
            *(binary, "--port", str(port), "--bind", "127.0.0.1"),
            *("--save", "", "--appendonly", "no", "--dir", directory),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        started = time.perf_counter()
        while True:
            with (
                contextlib.suppress(OSError),
                socket.create_connection(("127.0.0.1", port), timeout=0.1),
            ):
                break
            if time.perf_counter() - started > 10:
                raise RuntimeError("redis-server did not start")
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=0.02)
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        process.terminate()
        process.wait()
        shutil.rmtree(directory, ignore_errors=True)


def timings(transport: ResilientTransport, count: int) -> list[float]:
    """Seconds per request, `count` sequential GETs to rotating paths."""
    request = httpx.Request("GET", "http://inventory.local/items")
    found: list[float] = []
    clock = time.perf_counter
    for _ in range(count):
        start = clock()
        transport.handle_request(request).close()
        found.append(clock() - start)
    return found


def quantile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


class FaultProxy:
    """A TCP proxy to Redis on 127.0.0.1, in a thread, with one fault at a time.

    Each chunk read in either direction meets the fault in force then, so a
    switch reaches the connections already open (a client's pool would hide
    it otherwise): ``"latency"`` holds each chunk from Redis `LATENCY` s,
    ``"reset"`` answers any chunk with a TCP reset, ``"blackhole"`` drops
    every chunk and never closes.
    """

    def __init__(self, upstream: str) -> None:
        address = upstream.removeprefix("redis://").split("/", 1)[0]
        host, port = address.rsplit(":", 1)
        self._upstream = (host, int(port))
        self.fault = "pass-through"
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._server: asyncio.Server | None = None
        self._live: set[asyncio.Task[object]] = set()
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("the fault proxy did not start")
        assert self._server is not None
        listening: int = self._server.sockets[0].getsockname()[1]
        self.url: str = f"redis://127.0.0.1:{listening}/0"

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._server = self._loop.run_until_complete(
            asyncio.start_server(self._connection, "127.0.0.1", 0)
        )
        self._ready.set()
        self._loop.run_forever()

    async def _connection(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        # The loop keeps only weak references to tasks: held here until done.
        this = asyncio.current_task()
        assert this is not None
        self._live.add(this)
        ends = [writer]
        pumps: list[asyncio.Task[None]] = []
        try:
            up_reader, up_writer = await asyncio.open_connection(*self._upstream)
            ends.append(up_writer)
            pumps = [
                asyncio.create_task(
                    self._pump(reader, up_writer, writer, answers=False)
                ),
                asyncio.create_task(
                    self._pump(up_reader, writer, writer, answers=True)
                ),
            ]
            # One direction ended (a close, a reset): the other ends with it.
            await asyncio.wait(pumps, return_when=asyncio.FIRST_COMPLETED)
        except OSError:
            pass
        finally:
            for pump in pumps:
                pump.cancel()
            await asyncio.gather(*pumps, return_exceptions=True)
            # Closed here, on the proxy's loop, never later by the collector.
            for end in ends:
                end.close()
            self._live.discard(this)

    async def _pump(
        self,
        source: asyncio.StreamReader,
        sink: asyncio.StreamWriter,
        client: asyncio.StreamWriter,
        *,
        answers: bool,
    ) -> None:
        while chunk := await source.read(64 * 1024):
            fault = self.fault
            if fault == "reset":
                # Linger 0, then close: the kernel sends RST, not FIN.
                raw = client.get_extra_info("socket")
                raw.setsockopt(
                    socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0)
                )
                client.transport.abort()
                return
            if fault == "blackhole":
                continue
            if fault == "latency" and answers:
                await CLOCK.sleep(LATENCY)
            sink.write(chunk)
            await sink.drain()
        sink.close()

    async def _shutdown(self) -> None:
        if self._server is not None:
            self._server.close()
        # Blackholed connections never end by themselves.
        others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in others:
            task.cancel()
        await asyncio.gather(*others, return_exceptions=True)

    def close(self) -> None:
        """Stop serving, end every connection, end the thread."""
        asyncio.run_coroutine_threadsafe(self._shutdown(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()


@dataclass
class Replica:
    """One async client under load, and the latencies of its healthy calls."""

    client: httpx.AsyncClient
    healthy: list[float] = field(default_factory=list[float])
    refused: int = 0

    async def call(self, index: int) -> None:
        failing = index % FAILING_EVERY == 0
        start = time.perf_counter()
        try:
            await self.client.get("/fail" if failing else "/ok")
        except BrokenCircuitError:
            self.refused += 1
            return
        if not failing:
            self.healthy.append(time.perf_counter() - start)


async def load_all(replicas: list[Replica], seconds: float) -> None:
    """`RATE` arrivals a second per replica for `seconds`, each its own task.

    One schedule for all (open loop): at each tick every replica starts a
    call, in an order that turns by one each tick, since the calls started
    first at a tick end first and no side may always be first.
    """
    start = time.perf_counter()
    tasks: set[asyncio.Task[None]] = set()
    for index in range(round(RATE * seconds)):
        wait = start + index / RATE - time.perf_counter()
        if wait > 0:
            await CLOCK.sleep(wait)
        for turn in range(len(replicas)):
            replica = replicas[(index + turn) % len(replicas)]
            task = asyncio.create_task(replica.call(index))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
    if tasks:
        await asyncio.wait(set(tasks), timeout=10)


def host_answer(request: httpx.Request) -> httpx.Response:
    return httpx.Response(503 if request.url.path == "/fail" else 200)


async def until_up(states: list[SharedState]) -> bool:
    """Whether every shared replica syncs again within `RESUME_LIMIT` seconds."""
    for _ in range(round(RESUME_LIMIT / 0.01)):
        if all(state.up for state in states):
            return True
        await CLOCK.sleep(0.01)
    return False


@dataclass(frozen=True)
class Row:
    """One phase: each side's healthy calls (seconds), and whether it fell back."""

    fault: str
    shared: list[float]
    control: list[float]
    fell_back: bool


async def under_faults(url: str) -> list[Row]:
    """Per phase: the latencies of the healthy calls of each side."""
    proxy = FaultProxy(url)
    options = HttpResilienceOptions.model_validate(OPTIONS)
    states = [SharedState(proxy.url, sync_interval=INTERVAL) for _ in range(REPLICAS)]
    mock = httpx.MockTransport(host_answer)
    shared = [
        Replica(
            create_async_client(
                "bench-faults",
                options,
                shared=state,
                transport=mock,
                base_url="http://h",
            )
        )
        for state in states
    ]
    controls = [
        Replica(
            create_async_client(
                f"bench-control{index}", options, transport=mock, base_url="http://h"
            )
        )
        for index in range(REPLICAS)
    ]
    rows: list[Row] = []
    try:
        await load_all([*shared, *controls], 0.5)  # warm up; keys made
        for fault in FAULTS:
            proxy.fault = "pass-through"
            if not await until_up(states):
                raise RuntimeError(f"sharing did not resume before {fault}")
            for replica in (*shared, *controls):
                replica.healthy.clear()
            proxy.fault = fault
            await load_all([*shared, *controls], PHASE_SECONDS)
            fell_back = not any(state.up for state in states)
            mine = [t for r in shared for t in r.healthy]
            theirs = [t for r in controls for t in r.healthy]
            rows.append(Row(fault, mine, theirs, fell_back))
    finally:
        for replica in (*shared, *controls):
            await replica.client.aclose()
        for state in states:
            await asyncio.to_thread(state.close)
        proxy.close()
    return rows


def report_faults(url: str) -> None:
    # One WARNING per fault and an INFO per return: not this report's.
    logging.getLogger("http_resilience").setLevel(logging.CRITICAL)
    rows = asyncio.run(under_faults(url))
    print(
        f"under Redis faults, {REPLICAS} shared and {REPLICAS} control replicas, "
        f"{RATE:.0f} calls/s each, {PHASE_SECONDS:.0f} s a phase, healthy calls:"
    )
    print(
        f"  {'phase':<13}{'shared p99':>11}{'control p99':>12}{'ratio':>7}"
        f"{'> 100 ms':>10}  fell back"
    )
    for row in rows:
        mine, theirs = quantile(row.shared, 0.99), quantile(row.control, 0.99)
        slow = [sum(t > INTERVAL for t in side) for side in (row.shared, row.control)]
        print(
            f"  {row.fault:<13}{mine * 1e3:>8.2f} ms{theirs * 1e3:>9.2f} ms"
            f"{mine / theirs:>7.2f}{f'{slow[0]} / {slow[1]}':>10}"
            f"  {'yes' if row.fell_back else 'no'}"
        )
    print(
        "  ratio: shared p99 / control p99, one loop, one schedule: near 1 (0.1-10"
        " on\n  busy cores), no call waits on Redis. A call that waited"
        " on a sync would wait\n  100 ms: ratio in the hundreds, shared"
        " '> 100 ms' above 0. Both high: the loop was\n  blocked for all."
    )


def per_request(url: str) -> None:
    answer = httpx.MockTransport(lambda request: httpx.Response(200))
    shared = SharedState(url)
    try:
        plain = ResilientTransport(answer, name="bench")
        with_shared = ResilientTransport(answer, name="bench", shared=shared)
        rows: dict[str, list[float]] = {"local only": [], "shared": []}
        timings(plain, 500)
        timings(with_shared, 500)
        for _ in range(ROUNDS):
            rows["local only"] += timings(plain, REQUESTS)
            rows["shared"] += timings(with_shared, REQUESTS)
        with_shared.close()
    finally:
        shared.close()
    print(f"per request, {ROUNDS} x {REQUESTS} sequential calls, in process:")
    for name, values in rows.items():
        p50, p99 = quantile(values, 0.5), quantile(values, 0.99)
        print(f"  {name:<11} p50 {p50 * 1e6:7.1f} us   p99 {p99 * 1e6:7.1f} us")
    added = quantile(rows["shared"], 0.99) - quantile(rows["local only"], 0.99)
    print(f"added at p99: {added * 1e6:+.1f} us (budget <= 200 us)")


def main() -> None:
    with redis_url() as url:
        if url is None:
            print("shared_state: no redis-server on PATH and no REDIS_URL; skipped")
            return
        per_request(url)
        report_faults(url)


if __name__ == "__main__":
    main()
