"""One replica of the shared-state fleet scenarios: a process of its own.

Run as ``python -m tests.chaos.shared_fleet_worker '<json>'`` from the
repository root. It builds one `SharedState` and one async client, prints
``ready``, waits for a line on stdin (the fleet starts together), runs its
callers, and prints one JSON line of what it saw. Every loop is bounded in
count and in time.

Arguments (JSON): ``redis`` URL, ``base`` URL of the fault server, ``path``,
``role`` (``"budget"``, ``"opener"``, ``"watcher"``, ``"quota"``),
``callers``, ``calls`` (most per caller), ``seconds`` (the deadline),
``interval`` (the sync interval).
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
from typing import Any

import httpx

from http_resilience import (
    BreakerEvent,
    BrokenCircuitError,
    HttpResilienceOptions,
    RateLimitedError,
    SharedState,
    SystemClock,
    create_async_client,
)
from http_resilience._core.clock import wall_time

CLOCK = SystemClock()

OPTIONS: dict[str, dict[str, Any]] = {
    # One retry budget for the fleet: no ratio, a floor of 10 retries a second;
    # a breaker that cannot open.
    "budget": {
        "base_delay": "1ms",
        "retry_budget_ratio": 0.0,
        "retry_budget_min_per_second": 10,
        "minimum_throughput": 10**9,
    },
    "opener": {
        "max_retry_attempts": 0,
        "minimum_throughput": 20,
        "failure_ratio": 0.5,
        "break_duration": 30,
    },
    "quota": {
        "base_delay": "1ms",
        "quota_reserve": 0.1,
        "minimum_throughput": 10**9,
    },
}
OPTIONS["watcher"] = OPTIONS["opener"]


async def run(spec: dict[str, Any]) -> dict[str, Any]:
    role: str = spec["role"]
    seen: dict[str, Any] = {"role": role, "sent": 0, "refused": 0, "errors": []}
    opened: list[float] = []

    def listen(event: object) -> None:
        if isinstance(event, BreakerEvent) and event.current == "open":
            opened.append(wall_time())

    shared = SharedState(spec["redis"], sync_interval=spec["interval"])
    options = HttpResilienceOptions.model_validate(OPTIONS[role])
    client = create_async_client(
        "fleet",
        options,
        shared=shared,
        base_url=spec["base"],
        listeners=[listen],
    )
    deadline = CLOCK.monotonic() + spec["seconds"]
    stop = asyncio.Event()
    try:
        if role == "quota":  # each replica sees the quota once, then syncs
            await client.get(spec["path"])
            seen["sent"] += 1
            await asyncio.to_thread(shared.sync_now)
        print("ready", flush=True)
        await asyncio.to_thread(sys.stdin.readline)

        async def caller() -> None:
            for _ in range(spec["calls"]):
                if stop.is_set() or CLOCK.monotonic() > deadline:
                    return
                try:
                    await client.get(spec["path"])
                    seen["sent"] += 1
                except BrokenCircuitError as error:
                    seen["refused"] += 1
                    if "across the replicas" in str(error):
                        seen.setdefault("fleet_refused_at", wall_time())
                        if role == "watcher":
                            stop.set()
                    elif role == "opener":
                        stop.set()
                except RateLimitedError as error:
                    seen["refused"] += 1
                    if error.retry_after is not None and error.retry_after > 1:
                        return  # the fleet's allowance is gone for the window
                except httpx.HTTPError as error:
                    seen["errors"].append(type(error).__name__)

        await asyncio.gather(*(caller() for _ in range(spec["callers"])))
    finally:
        await client.aclose()
        shared.close()
    seen["opened_at"] = opened[0] if opened else None
    seen["shared_up"] = shared.up
    return seen


def main() -> None:
    # Each retry is logged; the report is the JSON line.
    logging.getLogger("http_resilience").setLevel(logging.ERROR)
    spec = json.loads(sys.argv[1])
    print(json.dumps(asyncio.run(run(spec))), flush=True)


if __name__ == "__main__":
    main()
