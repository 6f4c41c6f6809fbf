"""What `SharedState` adds per request on the retry budget's path, on loopback.

Starts a throwaway ``redis-server`` on 127.0.0.1 (a free port, no persistence;
or uses ``REDIS_URL``), and times sequential requests through a default
`ResilientTransport` around an `httpx.MockTransport` answering 200 (the budget
deposits on every call), called directly, with and without ``shared=``: the
sync thread runs against Redis every 100 ms meanwhile. Prints p50 and p99 per
request for each, in rounds taken in turn, and the p99 difference. Budget
(issue 17): <= 200 us added at p99. This script only reports.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator

import httpx

from http_resilience import ResilientTransport, SharedState

ROUNDS = 5
REQUESTS = 4_000


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@contextlib.contextmanager
def redis_url() -> Iterator[str | None]:
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


def main() -> None:
    with redis_url() as url:
        if url is None:
            print("shared_state: no redis-server on PATH and no REDIS_URL; skipped")
            return
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


if __name__ == "__main__":
    main()
