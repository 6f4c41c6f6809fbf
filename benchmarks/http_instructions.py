"""Instructions per request, counted by valgrind's callgrind: no timing noise.

On a shared machine the per-request timings of `http_overhead.py` move by
tens of µs between runs; an instruction count does not (the hash seed is fixed,
so a run repeats). Each row runs in a child process under callgrind twice, with
no requests and with `REQUESTS` requests after the same warm-up; the difference
over `REQUESTS` is the row's cost per request, imports and set-up excluded.

    .venv-bench/bin/python benchmarks/http_instructions.py [ROW ...]

About twenty minutes on a 2-core machine (two children at a time); needs
`valgrind` on the PATH. In process, against httpx's `MockTransport`. Sync
rows, then async ones (``async: ...``, each request awaited on one event
loop), each colour with the stacked single-purpose peers of `http_overhead`
(issue 27's anchor) beside ours; a ROW given names the rows to count (their
colour's bare row is always counted too).
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

URL = "http://bench.invalid/ok"
REQUESTS = 2_000
WARM_UP = 200
CHILD_FLAG = "--child"
ASYNC = "async: "
SYNC_BARE = "bare httpx.Client"
ASYNC_BARE = ASYNC + "bare httpx.AsyncClient"
BUDGET_STACK = 0.6  # issue 27: ours over bare / the stacked peers over bare
BUDGET_RETRIES = 2.5  # issue 27: ours over bare / httpx-retries over bare
COLLECTED = re.compile(r"Collected : (\d+)")


def ok(request: httpx.Request) -> httpx.Response:
    return httpx.Response(200)


def clients() -> dict[str, Callable[[], Any]]:
    from httpx_retries import RetryTransport

    from http_resilience import (
        AsyncResilientTransport,
        HttpClientFactory,
        HttpResilienceOptions,
        ResiliencePipeline,
        ResilientTransport,
        StaleCacheOptions,
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

    def stacked_sync() -> Callable[[str], object]:
        import http_overhead as peers

        client = httpx.Client(
            transport=peers.stack_retry(peers.SyncStackAttempt(mock()))
        )
        get = peers.stacked_sync(client, URL)
        return lambda url: get()

    def stacked_async() -> Callable[[str], Any]:
        import http_overhead as peers

        client = httpx.AsyncClient(
            transport=peers.stack_retry(peers.AsyncStackAttempt(mock()))
        )
        get = peers.stacked_async(client, URL)
        return lambda url: get()

    def resilient_async(pipeline: Any = None) -> Callable[[str], Any]:
        transport = AsyncResilientTransport(mock(), pipeline=pipeline)
        return httpx.AsyncClient(transport=transport).get

    return {
        "bare httpx.Client": lambda: httpx.Client(transport=mock()),
        "httpx-retries RetryTransport": lambda: httpx.Client(
            transport=RetryTransport(transport=mock())
        ),
        "ours: standard pipeline": lambda: resilient(),
        "ours: standard, budget and quota off": lambda: resilient(
            options=HttpResilienceOptions(retry_budget_ratio=None, quota_reserve=None)
        ),
        "ours: standard, the adaptive rules off": lambda: resilient(
            options=HttpResilienceOptions(
                adaptive_timeout_factor=None,
                breaker_baseline_factor=None,
                slow_call_factor=None,
            )
        ),
        "ours: add_retry()": lambda: resilient(ResiliencePipeline().add_retry()),
        "ours: add_retry().add_breaker()": lambda: resilient(
            ResiliencePipeline().add_retry().add_breaker()
        ),
        "ours: add_retry().add_stale_cache()": lambda: resilient(
            ResiliencePipeline()
            .add_retry()
            .add_stale_cache(StaleCacheOptions(max_stale=60))
        ),
        "factory client, correlation on": lambda: factory_client(True),
        "factory client, correlation off": lambda: factory_client(False),
        "stacked single-purpose peers": stacked_sync,
        ASYNC_BARE: lambda: httpx.AsyncClient(transport=mock()).get,
        "async: httpx-retries RetryTransport": lambda: (
            httpx.AsyncClient(transport=RetryTransport(transport=mock())).get
        ),
        "async: stacked single-purpose peers": stacked_async,
        "async: ours, standard pipeline": resilient_async,
        "async: ours, empty ResiliencePipeline()": lambda: resilient_async(
            ResiliencePipeline()
        ),
    }


def child(row: str, requests: int) -> None:
    made = clients()[row]()
    if row.startswith(ASYNC):
        get = made

        async def run() -> None:
            for _ in range(WARM_UP + requests):
                await get(URL)

        asyncio.run(run())
        return
    send = getattr(made, "get", made)
    for _ in range(WARM_UP + requests):
        send(URL)


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


def main(wanted: list[str]) -> None:
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not on the PATH")
    table = clients()
    unknown = [row for row in wanted if row not in table]
    if unknown:
        raise SystemExit(f"no such rows: {unknown}; the rows: {list(table)}")
    rows = [
        row
        for row in table
        if not wanted or row in wanted or row in (SYNC_BARE, ASYNC_BARE)
    ]
    with ThreadPoolExecutor(max_workers=2) as pool:
        figures = dict(zip(rows, pool.map(per_request, rows), strict=True))
    print(f"Instructions per request, in process (callgrind, {REQUESTS:,} GETs)")
    for row, figure in figures.items():
        bare = figures[ASYNC_BARE if row.startswith(ASYNC) else SYNC_BARE]
        print(f"  {row:40s} {figure:10,.0f}  {figure - bare:+10,.0f}")
    for colour, prefix, bare_row, ours_row in (
        ("sync", "", SYNC_BARE, "ours: standard pipeline"),
        ("async", ASYNC, ASYNC_BARE, ASYNC + "ours, standard pipeline"),
    ):
        over = {row: figure - figures[bare_row] for row, figure in figures.items()}
        ours = over.get(ours_row)
        if ours is None:
            continue
        for peer, budget in (
            (prefix + "stacked single-purpose peers", BUDGET_STACK),
            (prefix + "httpx-retries RetryTransport", BUDGET_RETRIES),
        ):
            if peer in over:
                ratio = ours / over[peer]
                verdict = "met" if ratio <= budget else "MISSED"
                print(
                    f"  RATIO {colour}: ours / {peer.removeprefix(prefix)}  "
                    f"{ratio:.2f}x  (budget <= {budget}x: {verdict})"
                )
    pairs = {
        "the breaker, per call": (
            "ours: add_retry().add_breaker()",
            "ours: add_retry()",
        ),
        "the stale cache, per good answer": (
            "ours: add_retry().add_stale_cache()",
            "ours: add_retry()",
        ),
        "the correlation id, per call": (
            "factory client, correlation on",
            "factory client, correlation off",
        ),
        "the retry budget and quota, per call": (
            "ours: standard pipeline",
            "ours: standard, budget and quota off",
        ),
    }
    for label, (first, second) in pairs.items():
        if first in figures and second in figures:
            print(f"  {label:40s} {figures[first] - figures[second]:+,.0f}")


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == CHILD_FLAG:
        child(sys.argv[2], int(sys.argv[3]))
    else:
        main(sys.argv[1:])
