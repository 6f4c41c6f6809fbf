"""Hypothesis over failure positions and policies, against a reference model.

Each example scripts where every attempt's source breaks (after how many of its
own items, or not at all), picks a policy, a budget and whether the source
resumes from `items_yielded`; then `with_retry` and `with_retry_sync` are run
on a fake clock and compared with what the rules say should happen.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from http_resilience import (
    PartialStreamPolicy,
    StreamRetryOptions,
    with_retry,
    with_retry_sync,
)
from http_resilience.testing import FakeClock

from .sources import Attempt, Broken, Factory, S, async_factory, sync_factory

pytestmark = pytest.mark.anyio

PROPERTY = settings(max_examples=250, derandomize=True, deadline=None, database=None)
RETHROW = PartialStreamPolicy.RETHROW_MID_STREAM
RESTART = PartialStreamPolicy.RESTART_FROM_START


@dataclass(frozen=True)
class Scenario:
    length: int
    breaks: tuple[int | None, ...]  # per attempt: items before it breaks
    budget: int
    policy: PartialStreamPolicy
    resume: bool

    @property
    def items(self) -> list[int]:
        return list(range(self.length))

    @property
    def script(self) -> list[Attempt]:
        return [Attempt(fail_after=after) for after in self.breaks]


@dataclass(frozen=True)
class Outcome:
    received: list[int]
    raised: bool
    attempts: int
    sleeps: list[float]


def expected(scenario: Scenario) -> Outcome:
    """The rules, written plainly: what the consumer should see."""
    received: list[int] = []
    attempt = 0
    while True:
        attempt += 1
        start = len(received) if scenario.resume else 0
        available = scenario.items[start:]
        after = (
            scenario.breaks[attempt - 1] if attempt <= len(scenario.breaks) else None
        )
        if after is None or after > len(available):
            received.extend(available)
            return Outcome(received, False, attempt, sleeps(attempt - 1))
        received.extend(available[:after])
        retry = attempt <= scenario.budget and (
            not received or scenario.policy is RESTART
        )
        if not retry:
            return Outcome(received, True, attempt, sleeps(attempt - 1))


def sleeps(retries: int) -> list[float]:
    return [min(0.2 * 2 ** (n - 1), 30.0) for n in range(1, retries + 1)]


def scenarios(
    policies: list[PartialStreamPolicy] | None = None,
    resume: bool | None = None,
) -> st.SearchStrategy[Scenario]:
    return st.builds(
        Scenario,
        length=st.integers(min_value=0, max_value=8),
        breaks=st.lists(
            st.one_of(st.none(), st.integers(min_value=0, max_value=9)), max_size=6
        ).map(tuple),
        budget=st.integers(min_value=0, max_value=5),
        policy=st.sampled_from(policies or list(PartialStreamPolicy)),
        resume=st.booleans() if resume is None else st.just(resume),
    )


def options(clock: FakeClock, scenario: Scenario) -> StreamRetryOptions:
    return StreamRetryOptions(
        clock=clock,
        use_jitter=False,
        max_retry_attempts=scenario.budget,
        partial_stream_policy=scenario.policy,
    )


def outcome(
    factory: Factory[S], received: list[int], raised: bool, clock: FakeClock
) -> Outcome:
    # Every source handed out was closed exactly once, whatever happened.
    assert factory.closes == [1] * len(factory.sources)
    return Outcome(received, raised, len(factory.contexts), clock.sleeps)


async def run_async(scenario: Scenario) -> Outcome:
    clock = FakeClock()
    factory = async_factory(scenario.items, *scenario.script, resume=scenario.resume)
    received: list[int] = []
    try:
        async for item in with_retry(factory, options(clock, scenario)):
            received.append(item)
    except Broken:
        return outcome(factory, received, True, clock)
    return outcome(factory, received, False, clock)


def run_sync(scenario: Scenario) -> Outcome:
    clock = FakeClock()
    factory = sync_factory(scenario.items, *scenario.script, resume=scenario.resume)
    received: list[int] = []
    try:
        received.extend(with_retry_sync(factory, options(clock, scenario)))
    except Broken:
        return outcome(factory, received, True, clock)
    return outcome(factory, received, False, clock)


@PROPERTY
@given(scenarios())
async def test_the_async_loop_follows_the_rules(scenario: Scenario) -> None:
    assert await run_async(scenario) == expected(scenario)


@PROPERTY
@given(scenarios())
def test_the_sync_twin_follows_the_same_rules(scenario: Scenario) -> None:
    assert run_sync(scenario) == expected(scenario)


@PROPERTY
@given(scenarios([RETHROW]))
async def test_rethrow_mid_stream_never_produces_an_item_twice(
    scenario: Scenario,
) -> None:
    received = (await run_async(scenario)).received
    # Always a prefix of the source, never a repeat.
    assert received == scenario.items[: len(received)]


@PROPERTY
@given(scenarios([RESTART], resume=True))
async def test_a_resuming_source_skips_exactly_the_prefix(scenario: Scenario) -> None:
    result = await run_async(scenario)
    assert result.received == scenario.items[: len(result.received)]
    if not result.raised:
        assert result.received == scenario.items
    assert result.attempts <= scenario.budget + 1
