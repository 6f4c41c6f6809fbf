"""The decision core on its own: no loop, no clock, no I/O."""

from __future__ import annotations

import asyncio
import math
from datetime import timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from http_resilience import PartialStreamPolicy, StreamRetryOptions
from http_resilience._streams.decision import StreamRetryDecision

PROPERTY = settings(max_examples=300, derandomize=True, deadline=None, database=None)


def decision(**fields: object) -> StreamRetryDecision:
    return StreamRetryDecision(
        StreamRetryOptions.model_validate({"use_jitter": False, **fields})
    )


def always(failure: Exception) -> bool:
    return True


def never(failure: Exception) -> bool:
    return False


def test_retry_n_waits_base_times_two_to_the_n_minus_one() -> None:
    core = decision()
    assert [core.delay_before_retry(n, 0, ValueError()) for n in (1, 2, 3)] == [
        0.2,
        0.4,
        0.8,
    ]
    assert core.delay_before_retry(4, 0, ValueError()) is None


@pytest.mark.parametrize(
    "failure",
    [asyncio.CancelledError(), KeyboardInterrupt(), SystemExit(), GeneratorExit()],
)
def test_cancellation_is_never_retried_even_by_a_permissive_classifier(
    failure: BaseException,
) -> None:
    core = decision(should_retry=always)
    assert core.delay_before_retry(1, 0, failure) is None


def test_a_failure_after_items_depends_on_the_policy() -> None:
    rethrow = decision()
    restart = decision(partial_stream_policy=PartialStreamPolicy.RESTART_FROM_START)
    assert rethrow.delay_before_retry(1, 1, ValueError()) is None
    assert rethrow.delay_before_retry(1, 0, ValueError()) == 0.2
    assert restart.delay_before_retry(1, 1, ValueError()) == 0.2
    assert not rethrow.restarts_mid_stream
    assert restart.restarts_mid_stream


def test_an_override_of_policy_and_classifier() -> None:
    core = StreamRetryDecision(
        StreamRetryOptions(use_jitter=False),
        partial_stream_policy=PartialStreamPolicy.RESTART_FROM_START,
        should_retry=lambda failure: isinstance(failure, TimeoutError),
    )
    assert core.delay_before_retry(1, 5, TimeoutError()) == 0.2
    assert core.delay_before_retry(1, 5, ValueError()) is None


def test_the_jitter_factor_stays_below_one_for_the_largest_draw() -> None:
    below_one = math.nextafter(1.0, 0.0)
    core = StreamRetryDecision(
        StreamRetryOptions(base_delay=timedelta(seconds=3), random=lambda: below_one)
    )
    assert core.delay(1) == 3 * below_one
    assert core.delay(1) < 3


def test_a_huge_retry_number_is_capped_not_an_overflow() -> None:
    core = decision(max_retry_attempts=100_000)
    assert core.delay(5000) == 30.0
    assert core.delay_before_retry(99_999, 0, ValueError()) == 30.0


durations = st.integers(min_value=0, max_value=10**9).map(
    lambda us: timedelta(microseconds=us)
)


@PROPERTY
@given(
    base=durations,
    above=durations,
    retry=st.integers(min_value=1, max_value=2000),
    draw=st.floats(min_value=0.0, max_value=1.0, exclude_max=True),
)
def test_the_backoff_is_capped_exponential_scaled_by_a_factor_in_half_to_one(
    base: timedelta, above: timedelta, retry: int, draw: float
) -> None:
    cap = base + above  # the options refuse a base above the cap
    plain = decision(base_delay=base, max_delay=cap)
    jittered = StreamRetryDecision(
        StreamRetryOptions(base_delay=base, max_delay=cap, random=lambda: draw)
    )
    expected = min(
        base.total_seconds() * 2.0 ** min(retry - 1, 1000), cap.total_seconds()
    )
    assert plain.delay(retry) == expected
    assert jittered.delay(retry) == pytest.approx(expected * (0.5 + 0.5 * draw))
    assert expected / 2 <= jittered.delay(retry) <= expected
    assert plain.delay(retry) <= plain.delay(retry + 1)


@PROPERTY
@given(
    budget=st.integers(min_value=0, max_value=20),
    attempt=st.integers(min_value=1, max_value=30),
    yielded=st.integers(min_value=0, max_value=5),
    policy=st.sampled_from(PartialStreamPolicy),
    classified=st.booleans(),
)
def test_retry_iff_budget_policy_and_classifier_all_allow(
    budget: int,
    attempt: int,
    yielded: int,
    policy: PartialStreamPolicy,
    classified: bool,
) -> None:
    core = decision(
        max_retry_attempts=budget,
        partial_stream_policy=policy,
        should_retry=always if classified else never,
    )
    allowed = (
        attempt <= budget
        and (yielded == 0 or policy is PartialStreamPolicy.RESTART_FROM_START)
        and classified
    )
    assert (
        core.delay_before_retry(attempt, yielded, ValueError()) is not None
    ) == allowed
