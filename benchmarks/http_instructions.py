"""Instructions per sync request, counted by valgrind's callgrind: no timing noise.

On a shared machine the per-request timings of `http_overhead.py` move by
tens of µs between runs; an instruction count does not (the hash seed is fixed,
so a run repeats). Each row runs in a child process under callgrind twice, with
no requests and with `REQUESTS` requests after the same warm-up; the difference
over `REQUESTS` is the row's cost per request, imports and set-up excluded.

    .venv-bench/bin/python benchmarks/http_instructions.py

About ten minutes on a 2-core machine (two children at a time); needs
`valgrind` on the PATH. In process, against httpx's `MockTransport`.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx

URL = "http://bench.invalid/ok"
REQUESTS = 2_000
WARM_UP = 200
CHILD_FLAG = "--child"
COLLECTED = re.compile(r"Collected : (\d+)")


def ok(request: httpx.Request) -> httpx.Response:
    return httpx.Response(200)


def clients() -> dict[str, Callable[[], Any]]:
    from httpx_retries import RetryTransport

    from http_resilience import (
        HttpClientFactory,
        HttpResilienceOptions,
        ResiliencePipeline,
        ResilientTransport,
    )

    def mock() -> httpx.MockTransport:
        return httpx.MockTransport(ok)

    def resilient(pipeline: Any = None, options: Any = None) -> httpx.Client:
        return httpx.Client(
            transport=ResilientTransport(mock(), pipeline=pipeline, options=options)
        )

    def factory_client(header: bool) -> httpx.Client:
        extra: dict[str, Any] = {} if header else {"correlation_header": None}
        factory = HttpClientFactory(lambda c: c.add("b", transport=mock()), **extra)
        return factory.client("b")

    return {
        "bare httpx.Client": lambda: httpx.Client(transport=mock()),
        "httpx-retries RetryTransport": lambda: httpx.Client(
            transport=RetryTransport(transport=mock())
        ),
        "ours: standard pipeline": lambda: resilient(),
        "ours: standard, budget and quota off": lambda: resilient(
            options=HttpResilienceOptions(retry_budget_ratio=None, quota_reserve=None)
        ),
        "ours: add_retry()": lambda: resilient(ResiliencePipeline().add_retry()),
        "ours: add_retry().add_breaker()": lambda: resilient(
            ResiliencePipeline().add_retry().add_breaker()
        ),
        "factory client, correlation on": lambda: factory_client(True),
        "factory client, correlation off": lambda: factory_client(False),
    }


def child(row: str, requests: int) -> None:
    client = clients()[row]()
    for _ in range(WARM_UP):
        client.get(URL)
    for _ in range(requests):
        client.get(URL)


def count(row: str, requests: int) -> int:
    done = subprocess.run(
        [
            "valgrind",
            "--tool=callgrind",
            "--callgrind-out-file=/dev/null",
            sys.executable,
            __file__,
            CHILD_FLAG,
            row,
            str(requests),
        ],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONHASHSEED": "0"},
        check=True,
    )
    found = COLLECTED.search(done.stderr)
    if found is None:
        raise RuntimeError(f"callgrind printed no count for {row!r}")
    return int(found.group(1))


def per_request(row: str) -> float:
    return (count(row, REQUESTS) - count(row, 0)) / REQUESTS


def main() -> None:
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not on the PATH")
    rows = list(clients())
    with ThreadPoolExecutor(max_workers=2) as pool:
        figures = dict(zip(rows, pool.map(per_request, rows), strict=True))
    bare = figures["bare httpx.Client"]
    print(f"Instructions per sync request, in process (callgrind, {REQUESTS:,} GETs)")
    for row, figure in figures.items():
        print(f"  {row:36s} {figure:10,.0f}  {figure - bare:+10,.0f}")
    ours = figures["ours: standard pipeline"] - bare
    peer = figures["httpx-retries RetryTransport"] - bare
    breaker = figures["ours: add_retry().add_breaker()"] - figures["ours: add_retry()"]
    correlation = (
        figures["factory client, correlation on"]
        - figures["factory client, correlation off"]
    )
    print(f"  RATIO ours overhead / httpx-retries overhead  {ours / peer:.1f}x")
    print(f"  the breaker, per call                         {breaker:+,.0f}")
    print(f"  the correlation id, per call                  {correlation:+,.0f}")
    budget = (
        figures["ours: standard pipeline"]
        - figures["ours: standard, budget and quota off"]
    )
    print(f"  the retry budget and quota, per call          {budget:+,.0f}")


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == CHILD_FLAG:
        child(sys.argv[2], int(sys.argv[3]))
    else:
        main()
