"""Chaos: the retry budget caps what an outage multiplies, and spares a flaky host.

200 callers released together against the real fault server (uvicorn on
127.0.0.1), through the standard pipeline with its defaults but a 1 ms base
delay (so the retries happen within the test, not seconds later) and a breaker
that cannot open (so what is measured is the budget, not the breaker). Each
call has a key of its own, so the server counts every call's attempts.

- Every request 503: physical requests are at most ``(1 + ratio)`` times the
  calls plus ``min_per_second`` for each second elapsed and the second the
  budget starts with, and at most 4 per call; the same wave without a budget
  sends 4 per call.
- 10% of attempts fail, independently: each call's failures before its first
  success are drawn (seeded) as a geometric count, served by
  ``/flaky/{failures}/503``. At least 99% of the calls still succeed.

The scenario frame checks that nothing is left behind and no secret leaks.
"""

from __future__ import annotations

import random

import httpx
import pytest

from http_resilience import HttpResilienceOptions, RejectionEvent
from tests.chaos.http_guards_harness import CALLERS, CLOCK, at_once, kinds, scenario
from tests.support.fault_server import FaultServer
from tests.support.figures import record

pytestmark = pytest.mark.anyio

RATIO = 0.2
PER_SECOND = 10
ATTEMPTS = 4  # the default: a first attempt and 3 retries
P_FAIL = 0.1
SEED = 1013


def options(*, budget: bool) -> HttpResilienceOptions:
    return HttpResilienceOptions.model_validate(
        {
            "base_delay": "1ms",
            "minimum_throughput": 10**9,  # the breaker never opens here
            "retry_budget_ratio": RATIO if budget else None,
            "retry_budget_min_per_second": PER_SECOND,
        }
    )


async def outage(
    fault_server: FaultServer, name: str, *, budget: bool
) -> tuple[list[int], float, list[RejectionEvent]]:
    """200 calls to a host that answers 503 to everything: hits per call, seconds."""
    async with scenario(fault_server, options=options(budget=budget)) as run:
        keys = [f"{name}-{index}" for index in range(CALLERS)]
        started = CLOCK.monotonic()
        outcomes = await at_once(CALLERS, lambda i: run.get("/status/503", keys[i]))
        elapsed = CLOCK.monotonic() - started
        run.keep(outcomes)
        assert kinds(outcomes) == {"503": CALLERS}
        for key in keys:
            await fault_server.wait_idle(key)
        return [fault_server.hits(key) for key in keys], elapsed, run.of(RejectionEvent)


async def test_an_outage_sends_a_fifth_more_requests_than_calls_not_four_times(
    fault_server: FaultServer,
) -> None:
    hits, elapsed, refusals = await outage(fault_server, "budgeted", budget=True)
    physical = sum(hits)
    bound = (1 + RATIO) * CALLERS + PER_SECOND * (elapsed + 1.0)
    assert physical <= bound, (physical, bound, elapsed)
    assert max(hits) <= ATTEMPTS
    assert min(hits) >= 1
    assert refusals, "the budget refused nothing: it was not in the pipeline"
    assert {event.reason for event in refusals} == {"retry_budget"}

    unbudgeted, elapsed_without, none = await outage(
        fault_server, "unbudgeted", budget=False
    )
    assert sum(unbudgeted) == ATTEMPTS * CALLERS
    assert none == []
    record(
        "retry_budget_outage",
        calls=CALLERS,
        physical_with_budget=physical,
        ratio_with_budget=round(physical / CALLERS, 3),
        bound=round(bound, 1),
        seconds_with_budget=round(elapsed, 3),
        physical_without_budget=sum(unbudgeted),
        ratio_without_budget=round(sum(unbudgeted) / CALLERS, 3),
        seconds_without_budget=round(elapsed_without, 3),
        refused_retries=len(refusals),
    )


def failures_before_success(draw: random.Random) -> int:
    """Failed attempts before the first success, each failing with `P_FAIL`."""
    count = 0
    while draw.random() < P_FAIL:
        count += 1
    return count


async def test_with_a_tenth_of_attempts_failing_nearly_every_call_succeeds(
    fault_server: FaultServer,
) -> None:
    draw = random.Random(SEED)
    failures = [failures_before_success(draw) for _ in range(CALLERS)]
    keys = [f"flaky-{index}" for index in range(CALLERS)]
    async with scenario(fault_server, options=options(budget=True)) as run:
        outcomes = await at_once(
            CALLERS, lambda i: run.get(f"/flaky/{failures[i]}/503", keys[i])
        )
        run.keep(outcomes)
        refusals = run.of(RejectionEvent)
    succeeded = sum(
        1
        for outcome in outcomes
        if isinstance(outcome, httpx.Response) and outcome.status_code == 200
    )
    # Only a call whose first 4 attempts all fail may fail.
    hopeless = sum(1 for count in failures if count >= ATTEMPTS)
    assert succeeded >= 0.99 * CALLERS
    assert succeeded == CALLERS - hopeless
    assert refusals == []
    for key in keys:
        await fault_server.wait_idle(key)
    record(
        "retry_budget_flaky",
        calls=CALLERS,
        attempt_failure_rate=P_FAIL,
        succeeded=succeeded,
        success_ratio=round(succeeded / CALLERS, 4),
        physical=sum(fault_server.hits(key) for key in keys),
        retries_needed=sum(min(count, ATTEMPTS - 1) for count in failures),
        refused_retries=len(refusals),
    )
