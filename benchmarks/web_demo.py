"""The web sample's demo, run several times: its percentiles, its answers, the spread.

`samples/webapi/demo.py` (what ``make demo`` runs) places 10 orders a second
for 10 s, each with a 2 s deadline, through the orders service to an inventory
that fails a tenth of its requests and is down from 3 s to 5.5 s. One run is
one sample of a noisy machine; this script runs the same scenario `runs`
times, each in a fresh process with its own SQLite file, and prints per run
the latency percentiles (p50, p95, p99), how many orders were answered 202,
503 and 504, the inventory requests they made, and the outbox's delivery lag
(p50 and max, from the 202 to the reservation), redeliveries and dead
messages; then the spread over the runs (lowest, median, highest of each
figure). docs/web-services.md prints these figures; a run of this script is
how to check them.

It also prints the machine's load average before and after: the figures hold
for a quiet machine, and a load above the number of cores moves them (the
page says how far).

Run it with ``make bench`` or ``python benchmarks/web_demo.py`` from the dev
environment (the demo needs the web sample's packages: FastAPI, uvicorn,
aiosqlite, matplotlib). ``WEB_DEMO_RUNS`` (default 3), ``WEB_DEMO_DURATION``
(seconds, default 10; the outage is at 3 s, so a run shorter than 6 s misses
it) and ``WEB_DEMO_RATE`` (orders a second, default 10) change the scenario;
so do ``--runs``, ``--duration`` and ``--rate``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

DEMO = Path(__file__).resolve().parents[1] / "samples" / "webapi" / "demo.py"
FIGURES = (
    "p50_ms",
    "p95_ms",
    "p99_ms",
    "202",
    "503",
    "504",
    "inventory_requests",
    "lag_p50_ms",
    "lag_max_ms",
    "redeliveries",
    "dead",
)


def run_once(python: str, duration: float, rate: float) -> dict[str, Any]:
    """Run the demo once in a temporary folder; its figures (`WEBAPI_SUMMARY`)."""
    with tempfile.TemporaryDirectory() as folder:
        summary = Path(folder) / "summary.json"
        env = {
            **os.environ,
            "WEBAPI_DURATION": str(duration),
            "WEBAPI_RATE": str(rate),
            "WEBAPI_SUMMARY": str(summary),
            "TMPDIR": folder,
        }
        result = subprocess.run(
            [python, str(DEMO)],
            cwd=folder,
            env=env,
            capture_output=True,
            text=True,
            timeout=duration * 6 + 60,
            check=False,
        )
        if result.returncode != 0:
            raise SystemExit(f"the demo failed:\n{result.stdout}\n{result.stderr}")
        figures: dict[str, Any] = json.loads(summary.read_text(encoding="utf-8"))
    statuses: dict[str, int] = figures["statuses"]
    return {
        **figures,
        **{status: statuses.get(status, 0) for status in ("202", "503", "504")},
        "other": sum(
            count
            for status, count in statuses.items()
            if status not in ("202", "503", "504")
        ),
    }


def load() -> str:
    one, five, _ = os.getloadavg()
    return f"load average {one:.1f} (1 min), {five:.1f} (5 min), {os.cpu_count()} cores"


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument(
        "--runs", type=int, default=int(os.environ.get("WEB_DEMO_RUNS", "3"))
    )
    parser.add_argument(
        "--duration",
        type=float,
        default=float(os.environ.get("WEB_DEMO_DURATION", "10")),
    )
    parser.add_argument(
        "--rate",
        type=float,
        default=float(os.environ.get("WEB_DEMO_RATE", "10")),
        help="orders a second (the demo's 10 by default)",
    )
    parser.add_argument(
        "--python", default=sys.executable, help="the interpreter that runs the demo"
    )
    arguments = parser.parse_args()
    if arguments.runs < 1 or arguments.duration <= 0 or arguments.rate <= 0:
        parser.error("--runs must be at least 1, --duration and --rate positive")
    print(
        f"Web demo: {arguments.runs} runs of {arguments.duration:g} s, "
        f"{arguments.rate:g} orders a second ({load()})"
    )
    header = (
        f"{'run':>4} {'p50 ms':>8} {'p95 ms':>8} {'p99 ms':>8} "
        f"{'202':>5} {'503':>5} {'504':>5} {'other':>5} {'inventory':>9}"
    )
    print(header)
    runs: list[dict[str, Any]] = []
    for number in range(1, arguments.runs + 1):
        figures = run_once(arguments.python, arguments.duration, arguments.rate)
        runs.append(figures)
        print(
            f"{number:>4} {figures['p50_ms']:>8.0f} {figures['p95_ms']:>8.0f} "
            f"{figures['p99_ms']:>8.0f} {figures['202']:>5} {figures['503']:>5} "
            f"{figures['504']:>5} {figures['other']:>5} "
            f"{figures['inventory_requests']:>9}",
            flush=True,
        )
    print("Spread over the runs (lowest / median / highest):")
    for name in FIGURES:
        values = [float(figures[name] or 0) for figures in runs]
        print(
            f"   {name:>18}: {min(values):.0f} / {statistics.median(values):.0f} "
            f"/ {max(values):.0f}"
        )
    print(f"After: {load()}")


if __name__ == "__main__":
    main()
