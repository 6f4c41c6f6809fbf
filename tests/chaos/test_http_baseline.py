"""Chaos: the new user's case, a dependency whose normal is to fail one call in five.

A chaos server (uvicorn on 127.0.0.1) answers every order by a seeded plan:
80 % ``ok``, 20 % 503, as its normal. In the middle of the run it goes fully
down (`ChaosServer.outage`: every request 503) for `OUTAGE` seconds of real
time. The client is the standard pipeline with its defaults but no retries:
each order is one attempt, so its outcome is the plan's own draw and the
breaker's window counts orders. The sampling window (30 s) and the minimum
throughput (100) stay the defaults: the whole run fits in one window, and a
minimum throughput equal to `baseline_min_samples` means the fixed 0.1 ratio
never judges the host before its baseline is armed.

With the defaults:

- before the outage, every order's outcome is the plan's draw (so at least
  70 % succeed) and the breaker never opens, although 20 % is twice the fixed
  `failure_ratio`;
- once the server is down, the breaker opens within the outage (and so within
  its sampling window of the outage's start), and the orders sent while it is
  open are refused without reaching the server;
- afterwards orders succeed at the plan's rate again, and the baseline's
  error rate is still near the host's own 20 %: the outage did not poison it.

With ``breaker_baseline_factor=None`` (the fixed ratio alone), the same
orders before any outage open the breaker, and the orders behind it fail
fast for no reason: the failure the baseline breaker was made for.

The break (5 s) is skipped once the outage is over (`SkippingClock`), and the
probe's own 20 % chance to fail skipped the same way: real time passes only
while the server is down, and in the orders themselves. Bounded in count
(`BEFORE`, `OUTAGE_ORDERS`, `REFUSED`, `AFTER`) and by pytest's timeout.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import AsyncGenerator, Callable, Iterable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from types import MappingProxyType

import anyio
import httpx
import pytest

from http_resilience import (
    BaselineHealth,
    BreakerEvent,
    HostHealth,
    HttpEvent,
    HttpResilienceOptions,
    RejectionEvent,
    create_async_client,
    health,
)
from http_resilience.testing import EventRecorder
from tests.chaos.http_guards_harness import CLOCK, LIMITS, SkippingClock
from tests.chaos.invariants import assert_back_to_baseline, leftovers
from tests.support.chaos_server import ChaosPlan, ChaosServer, serve_chaos
from tests.support.figures import record

pytestmark = pytest.mark.anyio

NORMAL_FAILURES = 0.2
PLAN = ChaosPlan(seed=2026, mix=MappingProxyType({"ok": 80, "503-retry-after": 20}))
# Orders before the outage: the baseline arms after the first 100. They share
# the window with the outage's, so the window's failure ratio reaches the
# learned threshold (about 0.6) after about as many outage orders as these.
BEFORE = 150
OUTAGE = 3.0  # seconds the dependency is down
OUTAGE_ORDERS = 2000  # the most sent in the outage before the breaker opens
REFUSED = 50  # orders sent while the breaker is open, in the outage
AFTER = 200  # orders once the dependency is back
WORKERS = 4  # orders in flight at once

DEFAULTS = HttpResilienceOptions(max_retry_attempts=0)
FIXED_RATIO = HttpResilienceOptions(max_retry_attempts=0, breaker_baseline_factor=None)
WINDOW = DEFAULTS.sampling_duration.total_seconds()


@dataclass
class Transitions:
    """Each breaker change with the moment it happened, on the real clock."""

    seen: list[tuple[float, str, str]] = field(
        default_factory=list[tuple[float, str, str]]
    )

    def __call__(self, event: HttpEvent) -> None:
        if isinstance(event, BreakerEvent):
            self.seen.append((CLOCK.monotonic(), event.previous, event.current))

    def opened(self) -> list[float]:
        return [at for at, _, current in self.seen if current == "open"]


@dataclass
class Orders:
    """A client of the standard pipeline, and what it let out."""

    client: httpx.AsyncClient
    server: ChaosServer
    clock: SkippingClock
    events: EventRecorder[HttpEvent]
    transitions: Transitions

    async def place(self, number: int) -> str:
        """Order `number` (the plan's call): its status, or its exception's name."""
        try:
            response = await self.client.post(
                f"{self.server.url}/chaos?call={number}", json={"order": number}
            )
        except Exception as error:
            return type(error).__name__
        return str(response.status_code)

    async def many(
        self, numbers: Iterable[int], *, stop: Callable[[], bool] = lambda: False
    ) -> dict[int, str]:
        """Orders `numbers`, `WORKERS` at a time, until `stop` says so."""
        outcomes: dict[int, str] = {}
        pending = iter(numbers)

        async def worker() -> None:
            for number in pending:
                if stop():
                    return
                outcomes[number] = await self.place(number)

        async with anyio.create_task_group() as group:
            for _ in range(WORKERS):
                group.start_soon(worker)
        return outcomes

    def host(self) -> tuple[HostHealth, BaselineHealth]:
        (host,) = health(self.client).hosts
        assert host.baseline is not None
        return host, host.baseline


@asynccontextmanager
async def orders(
    server: ChaosServer, options: HttpResilienceOptions
) -> AsyncGenerator[Orders]:
    baseline = leftovers()
    clock, events, transitions = (
        SkippingClock(),
        EventRecorder[HttpEvent](),
        Transitions(),
    )
    client = create_async_client(
        "orders",
        options,
        clock=clock,
        listeners=[events, transitions],
        transport=httpx.AsyncHTTPTransport(limits=LIMITS),
    )
    try:
        yield Orders(client, server, clock, events, transitions)
    finally:
        await client.aclose()
    await assert_back_to_baseline(baseline)


def drawn(number: int) -> str:
    """What the plan makes of order `number`'s one attempt, as its status."""
    return "200" if PLAN.decide(number, 1).fate == "ok" else "503"


def share(outcomes: Iterable[str], outcome: str = "200") -> float:
    counted = Counter(outcomes)
    return counted[outcome] / counted.total()


async def test_a_host_failing_a_fifth_as_its_normal_trips_only_when_it_goes_down() -> (
    None
):
    with serve_chaos(PLAN) as server:
        async with orders(server, DEFAULTS) as run:
            started = CLOCK.monotonic()
            # --- before: the host's normal ------------------------------------------
            before = await run.many(range(BEFORE))
            before_seconds = CLOCK.monotonic() - started
            assert before == {number: drawn(number) for number in range(BEFORE)}
            assert share(before.values()) >= 0.7
            assert run.transitions.seen == []
            host, learned = run.host()
            assert host.state == "closed"
            assert learned.armed
            assert learned.samples == BEFORE
            # Decay aside (a 10 minute half-life), the share of its 503s.
            assert abs(learned.error_rate - share(before.values(), "503")) < 1e-3
            assert learned.failure_threshold > 2 * NORMAL_FAILURES

            # --- the outage ---------------------------------------------------------
            first = BEFORE
            with server.outage() as down:
                during = await run.many(
                    range(first, first + OUTAGE_ORDERS),
                    stop=lambda: bool(run.transitions.seen),
                )
                opened = run.transitions.opened()
                assert opened, f"{len(during)} orders in the outage did not open it"
                opened_after = opened[0] - down.began
                assert opened_after <= min(OUTAGE, WINDOW)
                # Only the orders that were in flight as it opened are refused.
                outage_kinds = Counter(during.values())
                assert set(outage_kinds) <= {"503", "BrokenCircuitError"}
                assert outage_kinds["BrokenCircuitError"] < WORKERS
                _, at_open = run.host()
                # The outage's onset is taken back: the rate it had stays.
                assert NORMAL_FAILURES / 2 < at_open.error_rate < 0.35
                first += OUTAGE_ORDERS
                # While it is open, orders fail fast and reach no server.
                refused = await run.many(range(first, first + REFUSED))
                assert Counter(refused.values()) == {"BrokenCircuitError": REFUSED}
                hits = server.hits()
                assert not any(number in hits for number in refused)
                first += REFUSED
                # The rest of the outage is its own: real time, nothing sent.
                await CLOCK.sleep(max(0.0, down.began + OUTAGE - CLOCK.monotonic()))
            assert down.ended is not None
            assert run.transitions.seen[0][1:] == ("closed", "open")
            assert opened[0] < down.ended

            # --- after: the host is back --------------------------------------------
            host, _ = run.host()
            assert host.state == "open"
            run.clock.advance(host.retry_after or 0.0)
            after: dict[int, str] = {}
            probes_refused = 0
            for number in range(first, first + AFTER):
                outcome = await run.place(number)
                if outcome == "BrokenCircuitError":
                    # The probe drew one of the host's normal 503s: skip the break.
                    probes_refused += 1
                    host, _ = run.host()
                    run.clock.advance(host.retry_after or 0.0)
                    continue
                after[number] = outcome
            assert probes_refused <= 5
            assert after == {number: drawn(number) for number in after}
            assert share(after.values()) >= 0.7
            host, final = run.host()
            assert host.state == "closed"
            assert NORMAL_FAILURES / 2 < final.error_rate < 0.35
            elapsed = CLOCK.monotonic() - started
            refusals = len(run.events.of(RejectionEvent))
    record(
        "baseline_new_users_case",
        normal_failures=NORMAL_FAILURES,
        before_orders=BEFORE,
        before_success=round(share(before.values()), 3),
        before_seconds=round(before_seconds, 2),
        threshold_learned=round(learned.failure_threshold, 3),
        baseline_error_rate_before=round(learned.error_rate, 3),
        outage_seconds=OUTAGE,
        outage_orders_to_open=outage_kinds["503"],
        opened_after_s=round(opened_after, 3),
        baseline_error_rate_at_open=round(at_open.error_rate, 3),
        baseline_armed_at_open=at_open.armed,
        refused_while_open=REFUSED,
        after_orders=len(after),
        after_success=round(share(after.values()), 3),
        probes_refused=probes_refused,
        baseline_error_rate_after=round(final.error_rate, 3),
        baseline_samples_after=final.samples,
        rejection_events=refusals,
        transitions=[
            f"{previous}->{current}" for _, previous, current in run.transitions.seen
        ],
        seconds=round(elapsed, 2),
    )


async def test_with_the_fixed_ratio_the_same_normal_opens_the_breaker() -> None:
    with serve_chaos(PLAN) as server:
        async with orders(server, FIXED_RATIO) as run:
            before = await run.many(range(BEFORE))
            opened = run.transitions.opened()
            host, learned = run.host()
    # No outage: the host's own 20 % against the fixed 0.1 opened it.
    assert opened, "the fixed ratio did not open the breaker on the host's normal"
    assert run.transitions.seen[0][1:] == ("closed", "open")
    assert learned.failure_threshold == FIXED_RATIO.failure_ratio
    kinds = Counter(before.values())
    assert kinds["BrokenCircuitError"] > 0
    assert share(before.values()) < 0.7
    # Every order it let through met the plan's own draw.
    reached = {n: o for n, o in before.items() if o != "BrokenCircuitError"}
    assert reached == {number: drawn(number) for number in reached}
    # It opened as soon as the window held enough to judge the host.
    assert len(reached) >= FIXED_RATIO.minimum_throughput
    record(
        "baseline_fixed_ratio_contrast",
        before_orders=BEFORE,
        success=round(share(before.values()), 3),
        refused=kinds["BrokenCircuitError"],
        opened=len(opened),
        state_at_end=host.state,
    )
