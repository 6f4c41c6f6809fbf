"""Chaos: four real processes share one retry budget, breaker and quota on Redis.

Each process (`tests.chaos.shared_fleet_worker`) has its own `SharedState`
and client, 50 callers, against the session's fault server (uvicorn on
127.0.0.1) and the session's ``redis-server``; they start together.

- Budget: every request 503, no ratio, a floor of 10 retries a second: the
  four together retry within one floor (``10 x (seconds + 1)``), plus what
  each decided alone before its first sync, not four floors.
- Breaker: one process sends to an always-503 route and opens the host's
  breaker; the three others, whose own calls to the same host succeed,
  refuse it within one sync interval (plus scheduling on a loaded machine).
- Quota: a published quota of 100 (reserve 10%) is spent once by the four:
  the host is sent at most 100 requests in all.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from http_resilience import SystemClock
from tests.support.fault_server import FaultServer
from tests.support.figures import record
from tests.support.redis_server import RedisServer

CLOCK = SystemClock()
ROOT = Path(__file__).resolve().parents[2]
PROCESSES = 4
CALLERS = 50
INTERVAL = 0.1
# Scheduling slack for 4 processes on 2 shared cores, over the one interval.
SCHEDULING = 0.4


def fleet(specs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Start one process per spec, release them together, collect their reports."""
    workers = [
        subprocess.Popen(
            [sys.executable, "-m", "tests.chaos.shared_fleet_worker", json.dumps(spec)],
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for spec in specs
    ]
    try:
        for worker in workers:
            assert worker.stdout is not None
            assert worker.stdout.readline().strip() == "ready"
        for worker in workers:
            assert worker.stdin is not None
            worker.stdin.write("go\n")
            worker.stdin.flush()
        reports: list[dict[str, Any]] = []
        for worker in workers:
            out, _ = worker.communicate(timeout=60)
            assert worker.returncode == 0
            reports.append(json.loads(out.strip().splitlines()[-1]))
        return reports
    finally:
        for worker in workers:
            if worker.poll() is None:
                worker.kill()
                worker.wait()


def spec(
    redis_server: RedisServer,
    fault_server: FaultServer,
    role: str,
    path: str,
    *,
    calls: int,
    seconds: float,
) -> dict[str, Any]:
    return {
        "redis": redis_server.url,
        "base": fault_server.url,
        "path": path,
        "role": role,
        "callers": CALLERS,
        "calls": calls,
        "seconds": seconds,
        "interval": INTERVAL,
    }


def test_four_processes_retry_within_one_budget(
    redis_server: RedisServer, fault_server: FaultServer
) -> None:
    key = "fleet-budget"
    one = spec(
        redis_server,
        fault_server,
        "budget",
        f"/status/503?key={key}",
        calls=5,
        seconds=20,
    )
    started = CLOCK.monotonic()
    reports = fleet([one] * PROCESSES)
    elapsed = CLOCK.monotonic() - started
    fault_server.wait_idle_sync(key)
    hits = fault_server.hits(key)
    calls = sum(report["sent"] for report in reports)
    assert calls == PROCESSES * CALLERS * 5
    assert not [report["errors"] for report in reports if report["errors"]]
    retries = hits - calls
    one_floor = 10 * (elapsed + 1)
    # Each process decides alone until its first sync: one local floor each.
    unsynced = PROCESSES * 10
    record(
        "shared_fleet_budget",
        processes=PROCESSES,
        callers=CALLERS,
        calls=calls,
        physical=hits,
        retries=retries,
        one_budget_bound=round(one_floor + unsynced, 1),
        four_budgets_bound=round(PROCESSES * one_floor, 1),
        seconds=round(elapsed, 2),
    )
    assert retries <= one_floor + unsynced


def test_one_process_opens_the_breaker_the_others_refuse_within_an_interval(
    redis_server: RedisServer, fault_server: FaultServer
) -> None:
    opener = spec(
        redis_server,
        fault_server,
        "opener",
        "/status/503?key=fleet-opener",
        calls=5,
        seconds=10,
    )
    watcher = spec(
        redis_server,
        fault_server,
        "watcher",
        "/healthy?key=fleet-watcher",
        calls=400,
        seconds=10,
    )
    reports = fleet([opener] + [watcher] * (PROCESSES - 1))
    opened_at = reports[0]["opened_at"]
    assert opened_at is not None
    lags = [report["fleet_refused_at"] - opened_at for report in reports[1:]]
    for report in reports[1:]:
        assert report["opened_at"] is None  # their own breakers stayed closed
        assert not report["errors"]
    record(
        "shared_fleet_breaker",
        processes=PROCESSES,
        callers=CALLERS,
        interval_ms=INTERVAL * 1000,
        refused_after_ms=[round(lag * 1000, 1) for lag in lags],
    )
    assert max(lags) <= INTERVAL + SCHEDULING


def test_four_processes_spend_a_published_quota_of_100_once(
    redis_server: RedisServer, fault_server: FaultServer
) -> None:
    key = "fleet-quota"
    one = spec(
        redis_server,
        fault_server,
        "quota",
        f"/quota/100/60?key={key}",
        calls=10,
        seconds=20,
    )
    reports = fleet([one] * PROCESSES)
    fault_server.wait_idle_sync(key)
    hits = fault_server.hits(key)
    assert not [report["errors"] for report in reports if report["errors"]]
    record(
        "shared_fleet_quota",
        processes=PROCESSES,
        callers=CALLERS,
        quota=100,
        reserve=10,
        physical=hits,
        refused=sum(report["refused"] for report in reports),
    )
    assert hits <= 100


pytestmark = pytest.mark.timeout(180)
