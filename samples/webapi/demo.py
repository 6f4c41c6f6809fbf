"""The web sample's demo: an orders service under load, calling a flaky inventory.

Two services on 127.0.0.1 (free ports), each a FastAPI app under uvicorn in a
thread of its own: the orders service (`webapi.app`) and the inventory it
calls (`webapi.inventory`), which fails a tenth of its requests at random and
every request during an outage from 3 s to 5.5 s. After `WARM_UP` orders
sent one at a time and not counted (a service in production is warm), a
constant-rate driver places 10 orders a second for `DURATION` seconds, each
with a 2 s deadline in
``X-Request-Timeout-Ms`` and an ``Idempotency-Key`` of its own. An order is
answered 202 Accepted, ``"reserving"``: the service records it with its
reservation in the outbox, and the outbox's relay, a task of the service's
lifespan, reserves the stock at the inventory after the commit. During the
outage the orders are still accepted; their reservations fail, and the relay
delivers them again after its backoff (`RELAY`: 0.2 s, doubling, at most
2 s), printing a line each time, until the inventory is back and they are
``"reserved"``. The demo watches the outbox (``GET /health/outbox``) twice a
second, and, after the load, waits (at most `SETTLE_WITHIN`) for it to empty.
Then it sends `RESENT` of the placed orders again, with their keys, as a
client does when an answer got lost: the service answers them from its store
(``Idempotent-Replayed: true``) and records nothing more. Beside the orders,
a shopper reads the stock twice a second (``GET /stock/widget``): while the
inventory is down, the service answers the level it last saw, with
``Degraded: "stock-cache";age=N``; orders never degrade. The demo then
prints what the users saw (logical requests), what reached the inventory
(physical attempts), the replays, the breaker's transitions, the latency
percentiles, and the outbox: orders reserved, the delivery lag (from the 202
to ``"reserved"``), the redeliveries and the dead messages; and writes a plot
of the answers, ``webapi-demo.png``, into the working folder.

After its report the demo prints what runs look like (the ranges measured
over repeated runs, docs/web-services.md "The web sample"), on a quiet
machine and on a busy one, so a reader can tell which their run resembles.
``WEBAPI_RATE`` changes the 10 orders a second: at 20 the one process that
runs the service, the inventory and the driver is CPU-bound on 2 cores, and
the run shows a queue rather than the resilience.

Run it with ``make demo`` (or ``python samples/webapi/demo.py``); the database
is a temporary SQLite file, or PostgreSQL when ``WEBAPI_DATABASE_URL`` says so
(``postgresql+psycopg://...``). ``WEBAPI_DURATION`` shortens the run (the
sample's tests use 2 s); ``WEBAPI_SUMMARY`` names a file to write the figures
to as JSON (``benchmarks/web_demo.py`` reads them).
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import os
import socket
import tempfile
import threading
from collections import Counter
from collections.abc import Generator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import uvicorn

from http_resilience import (
    BreakerEvent,
    HttpEvent,
    HttpResilienceOptions,
    RejectionEvent,
    RetryEvent,
    SystemClock,
)
from webapi.app import RelaySettings, Settings, create_app
from webapi.inventory import Faults, Stock, create_inventory
from webapi.plot import plot

CLOCK = SystemClock()
RATE = float(os.environ.get("WEBAPI_RATE", "10"))  # orders a second
DURATION = float(os.environ.get("WEBAPI_DURATION", "10"))
OUTAGE = (3.0, 5.5)  # seconds into the run
DEADLINE_MS = 2000
CLIENT_TIMEOUT = 10  # seconds the driver waits for an answer
NO_ANSWER = 0
"""The status recorded for an order that got no answer within `CLIENT_TIMEOUT`."""
BROWSE_RATE = 2.0  # stock reads a second, beside the orders
BROWSE_DEADLINE_MS = 1000
RESENT = 5  # placed orders sent again with their Idempotency-Key
WARM_UP = 10  # orders sent before the run, one at a time, not counted
PLOT = Path("webapi-demo.png")
WATCH_EVERY = 0.5  # seconds between two reads of GET /health/outbox
SETTLE_WITHIN = 20.0  # seconds the demo waits, after the load, for the outbox
RELAY_LINES = 6  # the relay's log lines printed, of one message's

# The inventory client: the standard pipeline, with a breaker that decides
# within the demo's seconds (the defaults wait for 100 calls in 30 s).
INVENTORY = HttpResilienceOptions(
    base_delay="50ms",
    attempt_timeout="500ms",
    failure_ratio=0.5,
    minimum_throughput=10,
    sampling_duration="2s",
    break_duration="1s",
)

# The outbox's relay, set for a demo of seconds: a failed reservation is
# delivered again after 0.2 s, then 0.4, 0.8, 1.6 and 2 s (jittered down to
# half), so the 2.5 s outage costs a message about five redeliveries and its
# last one falls within 2 s of the inventory's return. Ten deliveries span
# about 12 s: longer than the outage, so none goes dead here. The relay's
# own defaults (1 s, doubling, at most 10 minutes; ten deliveries) span
# about 17 minutes: a service in production rides out a longer outage.
RELAY = RelaySettings(
    base_delay=timedelta(milliseconds=200),
    max_delay=timedelta(seconds=2),
    max_attempts=10,
    poll_interval=timedelta(milliseconds=500),
)


@dataclass
class Record:
    """What the demo saw: every order, every inventory request, every event."""

    started: float
    orders: list[tuple[float, float, int]] = field(
        default_factory=list[tuple[float, float, int]]
    )
    """(sent at, seconds it took, status) of each order, seconds into the run."""
    transitions: list[tuple[float, str]] = field(
        default_factory=list[tuple[float, str]]
    )
    retries: int = 0
    refused: Counter[str] = field(default_factory=Counter[str])
    resent: int = 0
    replayed: int = 0
    """How many orders were sent again, and how many of those were replays."""
    resent_attempts: int = 0
    """Inventory requests made while the orders were sent again."""
    reads: list[tuple[float, int, str | None]] = field(
        default_factory=list[tuple[float, int, str | None]]
    )
    """(sent at, status, its Degraded header or None) of each stock read."""
    placed: list[int] = field(default_factory=list[int])
    """The index of each order answered 202."""
    outbox: list[tuple[float, int, int, float | None]] = field(
        default_factory=list[tuple[float, int, int, float | None]]
    )
    """(read at, pending, dead, oldest pending age in s) of each outbox read."""
    relay_lines: list[tuple[float, str]] = field(
        default_factory=list[tuple[float, str]]
    )
    """(at, message) of each line the relay logged."""
    states: Counter[str] = field(default_factory=Counter[str])
    """The placed orders by state, read after the outbox emptied."""
    lags: list[float] = field(default_factory=list[float])
    """Seconds from each reserved order's 202 to its reservation."""
    settled_in: float | None = None
    """Seconds after the load the outbox took to empty; None: it did not."""

    def at(self) -> float:
        return CLOCK.monotonic() - self.started

    def redeliveries(self) -> int:
        return sum(" failed (attempt " in line for _, line in self.relay_lines)

    def __call__(self, event: HttpEvent) -> None:
        """The inventory client's listener (called on the orders service's loop)."""
        if isinstance(event, BreakerEvent):
            self.transitions.append((self.at(), event.current))
        elif isinstance(event, RetryEvent):
            self.retries += 1
        elif isinstance(event, RejectionEvent):
            self.refused[event.reason] += 1


class RelayLines(logging.Handler):
    """The relay's log lines (``mediator.outbox``), kept for the report."""

    def __init__(self, record: Record) -> None:
        super().__init__(logging.INFO)
        self.record = record

    def emit(self, record: logging.LogRecord) -> None:
        self.record.relay_lines.append((self.record.at(), record.getMessage()))


@contextmanager
def serving(app: Any, name: str) -> Generator[str]:
    """Serve `app` on 127.0.0.1 in a thread; yield its base URL; stop it."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    listener.bind(("127.0.0.1", 0))
    listener.listen()  # before uvicorn runs: early connections wait, not fail
    config = uvicorn.Config(
        app, lifespan="on", log_config=None, access_log=False, http="h11", ws="none"
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(
        target=server.run, kwargs={"sockets": [listener]}, name=name, daemon=True
    )
    thread.start()
    try:
        waited = threading.Event()
        for _ in range(1000):  # at most 10 s
            if server.started or not thread.is_alive():
                break
            waited.wait(0.01)
        if not server.started:
            raise RuntimeError(f"the {name} service did not start")
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        listener.close()


async def place_orders(url: str, record: Record, stock: Stock) -> None:
    """`RATE` orders a second for `DURATION` s, on schedule whatever the answers.

    Then the wait for the outbox to empty, and `RESENT` of the placed ones
    again, with the same key and body; then each placed order's state.
    """
    placed = record.placed
    async with httpx.AsyncClient(
        base_url=url,
        timeout=CLIENT_TIMEOUT,
        # The sample's stand-in authentication (webapi.auth): the token is
        # the caller's id. A real client sends its token.
        headers={"Authorization": "Bearer demo-client"},
    ) as client:

        async def send(index: int) -> httpx.Response:
            return await client.post(
                "/orders",
                json={"order_id": f"o-{index}", "sku": "widget", "quantity": 1},
                headers={
                    "X-Request-Timeout-Ms": str(DEADLINE_MS),
                    "X-Correlation-ID": f"order-{index}",
                    # One key per order, kept for every time it is sent.
                    "Idempotency-Key": f"demo-order-{index}",
                },
            )

        async def one(index: int) -> None:
            sent = record.at()
            try:
                answer = await send(index)
            except httpx.TransportError:
                # No answer within the client's timeout (or the connection
                # dropped): a failure the users saw, counted as status 0.
                record.orders.append((sent, record.at() - sent, NO_ANSWER))
                return
            record.orders.append((sent, record.at() - sent, answer.status_code))
            if answer.status_code == 202:
                placed.append(index)

        async def browse() -> None:
            # A shopper's reads of the stock, on their own schedule.
            for index in range(round(BROWSE_RATE * DURATION)):
                due = index / BROWSE_RATE
                if due > record.at():
                    await CLOCK.sleep(due - record.at())
                sent = record.at()
                try:
                    # A page must show fast: its deadline is shorter than
                    # an order's, and the level last seen beats no page.
                    answer = await client.get(
                        "/stock/widget",
                        headers={"X-Request-Timeout-Ms": str(BROWSE_DEADLINE_MS)},
                    )
                except httpx.TransportError:
                    record.reads.append((sent, NO_ANSWER, None))
                    continue
                said = answer.headers.get("Degraded")
                record.reads.append((sent, answer.status_code, said))

        done = asyncio.Event()

        async def watch() -> None:
            # The operator's view of the outbox, twice a second, until the
            # load is over and the outbox empty (or SETTLE_WITHIN passed).
            while True:
                answer = await client.get("/health/outbox")
                figures = answer.json()
                record.outbox.append(
                    (
                        record.at(),
                        figures["pending"],
                        figures["dead"],
                        figures["oldest_pending_age_seconds"],
                    )
                )
                if done.is_set() and figures["pending"] == 0:
                    return
                await CLOCK.sleep(WATCH_EVERY)

        watcher = asyncio.create_task(watch())
        tasks: list[asyncio.Task[None]] = [asyncio.create_task(browse())]
        for index in range(round(RATE * DURATION)):
            due = index / RATE
            if due > record.at():
                await CLOCK.sleep(due - record.at())
            tasks.append(asyncio.create_task(one(index)))
        await asyncio.gather(*tasks)
        done.set()
        ended = record.at()
        try:
            await asyncio.wait_for(watcher, SETTLE_WITHIN)
            record.settled_in = record.at() - ended
        except TimeoutError:
            pass  # reported: the orders still reserving are counted below

        before = stock.requests
        for index in sorted(placed)[:RESENT]:
            again = await send(index)
            record.resent += 1
            record.replayed += again.headers.get("Idempotent-Replayed") == "true"
        record.resent_attempts = stock.requests - before

        for index in placed:
            order = (await client.get(f"/orders/o-{index}")).json()
            record.states[order["state"]] += 1
            if order["state"] == "reserved":
                settled = datetime.fromisoformat(order["settled_at"])
                accepted = datetime.fromisoformat(order["placed_at"])
                record.lags.append((settled - accepted).total_seconds())


async def warm_up(url: str) -> None:
    """`WARM_UP` orders one after the other, before the run, not counted.

    A service's first requests build what later ones reuse (SQL compiled
    once, pools filled, code paths imported); a service in production is
    warm. Without this, the run's first second queues behind that work.
    """
    async with httpx.AsyncClient(base_url=url, timeout=CLIENT_TIMEOUT) as client:
        await client.get("/stock/widget")
        await client.get("/health/outbox")
        for index in range(WARM_UP):
            await client.post(
                "/orders",
                json={"order_id": f"warm-{index}", "sku": "widget", "quantity": 1},
                headers={
                    "Authorization": "Bearer demo-client",
                    "Idempotency-Key": f"demo-warm-up-{index}",
                },
            )


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[max(1, math.ceil(fraction * len(ordered))) - 1]


def report(record: Record, stock: Stock) -> None:
    statuses = Counter(status for _, _, status in record.orders)
    orders = len(record.orders)
    print(f"Orders placed: {orders} (logical requests, {RATE:g} a second)")
    for status, count in sorted(statuses.items()):
        if status == NO_ANSWER:
            print(f"   no answer within {CLIENT_TIMEOUT} s: {count}")
        else:
            print(f"   {status}: {count}")
    print(
        f"Inventory requests: {stock.requests} (physical attempts), "
        f"{stock.requests / orders:.2f} per order"
    )
    print(f"   retries: {record.retries}; refused locally: {dict(record.refused)}")
    print(
        f"Sent again with their Idempotency-Key: {record.resent} placed orders, "
        f"{record.replayed} replayed, {record.resent_attempts} inventory requests"
    )
    fresh = sum(status == 200 and not said for _, status, said in record.reads)
    stale = [said for _, status, said in record.reads if status == 200 and said]
    others = Counter(status for _, status, _ in record.reads if status != 200)
    print(
        f"Stock reads (the browsing route, {BROWSE_RATE:g} a second): "
        f"{len(record.reads)}; 200 fresh: {fresh}; 200 degraded: {len(stale)}"
        + (f" (Degraded: {stale[0]} ... {stale[-1]})" if stale else "")
        + (f"; other: {dict(sorted(others.items()))}" if others else "")
    )
    print(
        "   an order never degrades: those sent while the inventory was down "
        "were accepted, and reserved once it was back"
    )
    changes = ", ".join(f"{state} at {at:.1f} s" for at, state in record.transitions)
    print(f"Breaker: {changes or 'stayed closed'}")
    took = [seconds * 1000 for _, seconds, _ in record.orders]
    print(
        f"Latency: p50 {percentile(took, 0.5):.0f} ms, "
        f"p95 {percentile(took, 0.95):.0f} ms, p99 {percentile(took, 0.99):.0f} ms"
    )
    report_outbox(record)


def report_outbox(record: Record) -> None:
    """The relay's part: its lines, the lag, the redeliveries, what is left."""
    lines = record.relay_lines
    print(f"Relay (outbox) log: {len(lines)} lines", end="")
    if lines:
        # One message's redeliveries, the waits between them doubling.
        first = lines[0][1].split()[2]
        own = [(at, line) for at, line in lines if line.split()[2] == first]
        print(f"; those of the first message that failed ({len(own)}):")
        for at, line in own[:RELAY_LINES]:
            print(f"   {at:4.1f} s  {line}")
    else:
        print()
    ages = [age for _, _, _, age in record.outbox if age is not None]
    most = max((pending for _, pending, _, _ in record.outbox), default=0)
    print(
        f"Outbox, read every {WATCH_EVERY:g} s: at most {most} pending, the "
        f"oldest waiting at most {max(ages, default=0.0):.1f} s"
        + (
            f"; empty {record.settled_in:.1f} s after the load"
            if record.settled_in is not None
            else f"; not empty {SETTLE_WITHIN:g} s after the load"
        )
    )
    dead = record.outbox[-1][2] if record.outbox else 0
    lag = [seconds * 1000 for seconds in record.lags]
    print(
        f"Summary: {len(record.placed)} orders placed (202), "
        f"{record.states['reserved']} reserved, "
        f"{record.states['rejected']} rejected, "
        f"{record.states['reserving']} still reserving; "
        + (
            f"lag from 202 to reserved p50 {percentile(lag, 0.5):.0f} ms, "
            f"max {max(lag):.0f} ms; "
            if lag
            else ""
        )
        + f"{record.redeliveries()} redeliveries, {dead} dead"
    )


def summary(record: Record, stock: Stock) -> dict[str, object]:
    """The run's figures, for `WEBAPI_SUMMARY` (benchmarks/web_demo.py)."""
    took = [seconds * 1000 for _, seconds, _ in record.orders]
    lag = [seconds * 1000 for seconds in record.lags]
    return {
        "duration": DURATION,
        "statuses": dict(Counter(str(status) for _, _, status in record.orders)),
        "p50_ms": percentile(took, 0.5),
        "p95_ms": percentile(took, 0.95),
        "p99_ms": percentile(took, 0.99),
        "inventory_requests": stock.requests,
        "retries": record.retries,
        "refused": dict(record.refused),
        "transitions": record.transitions,
        "stock_reads": len(record.reads),
        "stock_reads_degraded": sum(
            status == 200 and bool(said) for _, status, said in record.reads
        ),
        "placed": len(record.placed),
        "reserved": record.states["reserved"],
        "lag_p50_ms": percentile(lag, 0.5) if lag else None,
        "lag_max_ms": max(lag) if lag else None,
        "redeliveries": record.redeliveries(),
        "dead": record.outbox[-1][2] if record.outbox else 0,
    }


HEALTHY = """\
What runs of 10 s at 10 orders a second looked like on a 2-core machine
shared with other work (load average 7-8; docs/web-services.md, "The web
sample"; python benchmarks/web_demo.py --runs 3):
   202: 100 of 100 (the outage never reaches the caller); 503: 0; 504: 0
   p50 67-76 ms, p95 0.21-0.26 s, p99 0.30-0.32 s
   outbox: lag p50 about 120 ms, max 3.4-3.9 s (the orders of the outage);
   about 70 redeliveries; 0 dead
One run of three ran out of CPU (the service, the inventory and this driver
share one process): p50 1.7 s, 8 answers 504 at their 2 s deadline, lag
p50 4.2 s. A quiet machine does better than the first line."""
"""What runs of the full 10 s showed, printed after the report."""


def main() -> None:
    # The demo reports the clients' events itself: the packages' own log
    # lines (a warning per retry) would be hundreds here.
    logging.getLogger("http_resilience").setLevel(logging.ERROR)
    logging.getLogger("mediator_resilience").setLevel(logging.ERROR)
    record = Record(started=CLOCK.monotonic())
    # The relay's lines (one per failed delivery) go into the report, not
    # onto stderr.
    relay_log = logging.getLogger("mediator.outbox")
    relay_log.addHandler(RelayLines(record))
    relay_log.setLevel(logging.INFO)
    relay_log.propagate = False
    stock = Stock(levels={"widget": 10_000})
    faults = Faults(ratio=0.1, outage=OUTAGE, now=record.at)
    with tempfile.TemporaryDirectory() as folder:
        database = os.environ.get(
            "WEBAPI_DATABASE_URL", f"sqlite+aiosqlite:///{folder}/orders.db"
        )
        with serving(create_inventory(stock, faults), "inventory") as inventory:
            settings = Settings(
                inventory_url=inventory,
                database_url=database,
                inventory=INVENTORY,
                listeners=[record],
                relay=RELAY,
            )
            with serving(create_app(settings), "orders") as orders:
                print("The orders and inventory services are up on 127.0.0.1.")
                asyncio.run(warm_up(orders))
                # The run starts now: the warm-up's requests are not its own.
                stock.requests, stock.arrivals[:] = 0, []
                record.relay_lines.clear()
                record.started = CLOCK.monotonic()
                asyncio.run(place_orders(orders, record, stock))
    print("Both services are stopped.")
    report(record, stock)
    plot(
        PLOT,
        rate=RATE,
        duration=DURATION,
        outage=OUTAGE,
        orders=record.orders,
        attempts=stock.arrivals,
        transitions=record.transitions,
    )
    print(f"Plot: {PLOT}")
    print(HEALTHY)
    written = os.environ.get("WEBAPI_SUMMARY")
    if written:
        Path(written).write_text(json.dumps(summary(record, stock)), encoding="utf-8")


if __name__ == "__main__":
    main()
