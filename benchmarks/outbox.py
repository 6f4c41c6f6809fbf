"""What the outbox costs, and how fast relays deliver (issue 30).

1. The cost of one message: a `@transactional` command inserting one row, sent
   with `send_sync`, without and with one `outbox.send(...)` in its handler; the
   time per send (median and p99, the two rows taking turns in rounds) and the
   round trips per send (statements counted by SQLAlchemy's
   ``before_cursor_execute``, plus the commits the driver sends, as
   `mediator_idempotency.py` counts them).
2. Relay throughput, messages a second: the receiver a trivial ``@idempotent
   @transactional`` command (one insert). On SQLite one relay in this process
   (the embedded mode: `run_once_sync`, and `run_once` on aiosqlite), draining
   messages recorded beforehand; on PostgreSQL 1 and 4 relay processes
   (``python -m mediator.sqlalchemy.outbox outbox_app:build_relay``, `run` on
   async psycopg), started and polling before the messages are committed in one
   transaction, timed from that commit until the last is delivered. Each with
   the messages unkeyed, and spread over 50 ordering keys (one key's messages
   one after another).

SQLite is a file (WAL, as `SqlAlchemyModule` prepares it); PostgreSQL a
throwaway cluster on loopback when ``initdb`` and psycopg are found (as
`concurrent_orders.py` starts one; else skipped with a note). Every wait is
bounded; the script never fails on a figure. Run it with ``make bench``, or
from the dev ``.venv``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from time import perf_counter, perf_counter_ns

import sqlalchemy as sa
from concurrent_orders import postgres  # benchmarks/: beside this script
from mediator_idempotency import Counts
from outbox_app import (
    PlaceOrder,
    RecordMany,
    build_mediator,
    metadata,
    relay_for,
    reserved,
)
from sqlalchemy.ext.asyncio import create_async_engine

from mediator import Mediator
from mediator.sqlalchemy import (
    create_idempotency_table,
    create_outbox_table,
    idempotency_table,
    outbox_table,
)

HERE = Path(__file__).resolve().parent
ROUNDS = 10
SENDS_PER_ROUND = 100  # per row and round
WARM_UP = 50
KEYS = 50
RECORD_CHUNK = 500  # messages per recording transaction (SQLite)
DEADLINE = 300.0  # seconds for one throughput run, at most
STEP = 0.02  # seconds between two looks at the database


def reset(engine: sa.Engine) -> None:
    metadata.drop_all(engine)
    outbox_table.drop(engine, checkfirst=True)
    idempotency_table.drop(engine, checkfirst=True)
    create_outbox_table(engine)
    create_idempotency_table(engine)
    metadata.create_all(engine)


def _count(engine: sa.Engine, table: sa.Table) -> int:
    with engine.connect() as connection:
        return int(
            connection.scalar(sa.select(sa.func.count()).select_from(table)) or 0
        )


def _delivered(engine: sa.Engine) -> int:
    with engine.connect() as connection:
        found = connection.scalar(
            sa.select(sa.func.count()).where(outbox_table.c.state == "delivered")
        )
        return int(found or 0)


# --- 1. the cost of one message ----------------------------------------------------


def cost(
    url: str, rounds: int = ROUNDS, per_round: int = SENDS_PER_ROUND
) -> list[tuple[str, float, float, int, str]]:
    """(row, median µs, p99 µs, round trips, one send's statements) per row."""
    engine = sa.create_engine(url)
    reset(engine)
    counts = Counts()
    counts.listen(engine)
    mediator = build_mediator(engine)
    rows: list[tuple[str, Callable[[int], PlaceOrder]]] = [
        ("without a message", lambda n: PlaceOrder(n=n)),
        ("with one outbox message", lambda n: PlaceOrder(n=n, message=True)),
    ]
    n = 0
    for _, make in rows:
        for _ in range(WARM_UP):
            n += 1
            mediator.send_sync(make(n))
    traces: dict[str, tuple[int, str]] = {}
    for label, make in rows:
        n += 1
        with counts.counting():
            mediator.send_sync(make(n))
        traces[label] = (counts.round_trips, " ".join(counts.trace))
    samples: dict[str, list[int]] = {label: [] for label, _ in rows}
    for _ in range(rounds):
        for label, make in rows:
            for _ in range(per_round):
                n += 1
                request = make(n)
                started = perf_counter_ns()
                mediator.send_sync(request)
                samples[label].append(perf_counter_ns() - started)
    engine.dispose()
    found: list[tuple[str, float, float, int, str]] = []
    for label, _ in rows:
        times = samples[label]
        p99 = statistics.quantiles(times, n=100)[98]
        trips, trace = traces[label]
        found.append((label, statistics.median(times) / 1000, p99 / 1000, trips, trace))
    return found


def report_cost(database: str, found: list[tuple[str, float, float, int, str]]) -> None:
    print(f"\n{database}: one @transactional send_sync (one insert), per send")
    print(f"{'':<26} {'median µs':>10} {'p99 µs':>9} {'round trips':>12}")
    for label, median, p99, trips, _ in found:
        print(f"{label:<26} {median:>10.0f} {p99:>9.0f} {trips:>12}")
    (_, base, _, base_trips, _), (_, more, _, more_trips, _) = found
    print(
        f"{'the message costs':<26} {more - base:>+10.0f} {'':>9} "
        f"{more_trips - base_trips:>+12}"
    )
    for label, _, _, _, trace in found:
        print(f"  {label}: {trace}")


# --- 2. relay throughput -----------------------------------------------------------


def _items(count: int, keyed: bool) -> list[tuple[int, str | None]]:
    return [(n, f"key-{n % KEYS}" if keyed else None) for n in range(count)]


def _record(
    mediator: Mediator, items: list[tuple[int, str | None]], chunk: int
) -> None:
    for start in range(0, len(items), chunk):
        mediator.send_sync(RecordMany(items=items[start : start + chunk]))


def sqlite_throughput(path: Path, count: int, keyed: bool, *, is_async: bool) -> float:
    """Messages a second, one relay in this process draining `count` messages."""
    url = f"sqlite:///{path}"
    engine = sa.create_engine(url)
    reset(engine)
    _record(build_mediator(engine), _items(count, keyed), RECORD_CHUNK)
    counts = Counts()
    counts.listen(engine)
    started = perf_counter()
    if is_async:
        async_engine = create_async_engine(f"sqlite+aiosqlite:///{path}")
        relay = relay_for(async_engine)

        async def drain() -> None:
            for _ in range(count + 1):  # a round delivers one at least
                if not await relay.run_once():
                    break
            await async_engine.dispose()

        asyncio.run(drain())
    else:
        relay = relay_for(engine)
        with counts.counting():
            for _ in range(count + 1):
                if not relay.run_once_sync():
                    break
        # Statements only: the relay's and the receiver's transactions begin
        # with BEGIN IMMEDIATE, and each of them ends with a COMMIT besides.
        each = ", ".join(
            f"{k} {v / count:.2f}" for k, v in counts.statements.items() if v >= count
        )
        total = sum(counts.statements.values()) / count
        print(
            f"  SQLite run_once_sync, {'50 keys' if keyed else 'no key'}: "
            f"{total:.1f} statements per message delivered ({each}), and a "
            "COMMIT per BEGIN IMMEDIATE"
        )
    elapsed = perf_counter() - started
    delivered = _delivered(engine)
    applied = _count(engine, reserved)
    engine.dispose()
    if delivered != count or applied != count:
        print(f"  (!) {delivered} delivered, {applied} applied of {count}")
    return delivered / elapsed


def _start_relays(url: str, count: int, logs: Path) -> list[subprocess.Popen[bytes]]:
    env = {**os.environ, "OUTBOX_BENCH_URL": url, "OUTBOX_BENCH_ASYNC": "1"}
    command = [
        sys.executable,
        "-m",
        "mediator.sqlalchemy.outbox",
        "outbox_app:build_relay",
        "--app-dir",
        str(HERE),
    ]
    processes: list[subprocess.Popen[bytes]] = []
    for i in range(count):
        with (logs / f"relay-{i}.log").open("wb") as log:
            processes.append(
                subprocess.Popen(
                    command, env=env, stdout=subprocess.DEVNULL, stderr=log
                )
            )
    return processes


def _wait(check: Callable[[], bool], within: float) -> bool:
    """Poll `check` until true, at most `within` seconds."""
    pause = threading.Event()  # never set: each wait is one step of the bound
    for _ in range(int(within / STEP)):
        if check():
            return True
        pause.wait(STEP)
    return check()


def postgres_throughput(url: str, relays: int, count: int, keyed: bool) -> float:
    """Messages a second, `relays` processes delivering `count` messages."""
    engine = sa.create_engine(url)
    reset(engine)
    mediator = build_mediator(engine)
    with tempfile.TemporaryDirectory(prefix="bench-relays-") as logs:
        processes = _start_relays(url, relays, Path(logs))
        try:
            started = _wait(
                lambda: all(
                    "started on" in (Path(logs) / f"relay-{i}.log").read_text()
                    for i in range(relays)
                ),
                60,
            )
            if not started:
                print("  (!) the relays did not start within 60 s")
                return 0.0
            _record(mediator, _items(count, keyed), count)
            began = perf_counter()
            _wait(lambda: _delivered(engine) >= count, DEADLINE)
            elapsed = perf_counter() - began
        finally:
            for process in processes:
                process.send_signal(signal.SIGTERM)
            for process in processes:
                try:
                    process.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    process.kill()
    delivered = _delivered(engine)
    applied = _count(engine, reserved)
    engine.dispose()
    if delivered != count or applied != count:
        print(f"  (!) {delivered} delivered, {applied} applied of {count}")
    return delivered / elapsed


def report_throughput(rows: list[tuple[str, int, float, float]]) -> None:
    print(
        "\nrelay throughput: messages a second (receiver: @idempotent @transactional)"
    )
    print(f"{'':<50} {'messages':>9} {'no key':>8} {'50 keys':>8}")
    for label, count, unkeyed, keyed in rows:
        print(f"{label:<50} {count:>9} {unkeyed:>8.0f} {keyed:>8.0f}")


def main() -> None:
    parser = argparse.ArgumentParser(description="What the outbox costs (issue 30).")
    parser.add_argument("--messages", type=int, default=2000)
    parser.add_argument("--quick", action="store_true", help="fewer of everything")
    options = parser.parse_args()
    count, rounds, per_round = options.messages, ROUNDS, SENDS_PER_ROUND
    if options.quick:
        rounds, per_round, count = 3, 50, min(count, 500)
    load = os.getloadavg()
    print(
        f"outbox: {rounds} x {per_round} sends per row; {count} messages per "
        f"throughput run; load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}, "
        f"{os.cpu_count()} cores"
    )
    throughput: list[tuple[str, int, float, float]] = []
    with tempfile.TemporaryDirectory(prefix="bench-outbox-") as root:
        db = Path(root) / "outbox.db"
        report_cost("SQLite", cost(f"sqlite:///{db}", rounds, per_round))
        for is_async, label in (
            (False, "run_once_sync"),
            (True, "run_once, aiosqlite"),
        ):
            unkeyed, keyed = (
                sqlite_throughput(db, count, keyed, is_async=is_async)
                for keyed in (False, True)
            )
            label = f"SQLite, 1 relay in process ({label})"
            throughput.append((label, count, unkeyed, keyed))
    with postgres() as url:
        if url is not None:
            report_cost("PostgreSQL", cost(url, rounds, per_round))
            for relays in (1, 4):
                unkeyed, keyed = (
                    postgres_throughput(url, relays, count, keyed)
                    for keyed in (False, True)
                )
                plural = "es" if relays > 1 else ""
                label = f"PostgreSQL, {relays} relay process{plural}"
                throughput.append((label, count, unkeyed, keyed))
    report_throughput(throughput)


if __name__ == "__main__":
    main()
