"""`CircuitBreaker` to the exact figure: `closed`, `retry_after`, the sliding window.

Written to close what mutation testing (`make mutation`) found the other breaker
tests let through: each test pins a value a plausible slip would change.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from http_resilience._core.events import BreakerState
from http_resilience._strategies.breaker.state import (
    PASS,
    PROBE,
    REJECTED,
    CircuitBreaker,
)


def breaker(
    *, ratio: float = 0.5, minimum: int = 2, sampling: float = 10.0
) -> CircuitBreaker:
    return CircuitBreaker(
        failure_ratio=ratio,
        minimum_throughput=minimum,
        sampling_duration=sampling,
        break_duration=5.0,
    )


def state(subject: CircuitBreaker) -> BreakerState:
    """The state, read through a call: a type checker does not narrow it."""
    return subject.state


def report(subject: CircuitBreaker, now: float, *, failed: bool) -> None:
    ticket = subject.acquire(now)
    assert ticket == PASS
    subject.record(ticket, failed=failed, now=now)


def test_closed_is_true_from_the_start_and_follows_every_change() -> None:
    subject = breaker()
    assert subject.closed is True
    report(subject, 0.0, failed=True)
    report(subject, 0.1, failed=True)
    assert subject.closed is False  # opened
    probe = subject.acquire(5.1)
    assert probe == PROBE
    assert subject.closed is False  # half-open
    subject.record(probe, failed=False, now=5.2)
    assert subject.closed is True


def test_retry_after_counts_down_to_zero_and_stays_there() -> None:
    subject = breaker()
    report(subject, 0.0, failed=True)
    report(subject, 1.0, failed=True)  # opens until 6.0
    assert subject.retry_after(1.0) == 5.0
    assert subject.retry_after(4.5) == 1.5
    assert subject.retry_after(6.0) == 0.0
    # The break is over but no caller has asked yet: still open, no wait left.
    assert state(subject) == "open"
    assert subject.retry_after(6.5) == 0.0


def test_an_outcome_stays_while_its_bucket_is_in_the_window() -> None:
    # Buckets of 1 s. One failure in two (at 1.5) stays below the ratio. At
    # 10.5 (bucket 10) the success at 0.5 (bucket 0) has dropped out while the
    # failure in bucket 1 is still in: buckets 1 to 10 make the ten. Two
    # failures out of two open it.
    subject = breaker(minimum=2, ratio=0.6)
    report(subject, 0.5, failed=False)
    report(subject, 1.5, failed=True)
    assert state(subject) == "closed"
    report(subject, 10.5, failed=True)
    assert state(subject) == "open"


def test_a_bucket_that_drops_out_takes_all_its_outcomes_with_it() -> None:
    # Three successes in bucket 0 and a failure in bucket 5. At 10.5 bucket 0
    # drops out with all three, leaving failures only: the next failure opens
    # it at a ratio of 1.0. Had the bucket taken one success of its three, 2 of
    # 4 would stay below 0.6.
    subject = breaker(minimum=2, ratio=0.6)
    for now in (0.1, 0.2, 0.3):
        report(subject, now, failed=False)
    report(subject, 5.5, failed=True)
    assert state(subject) == "closed"
    report(subject, 10.5, failed=True)
    assert state(subject) == "open"


def test_an_outcome_older_than_the_window_never_counts_before_zero_either() -> None:
    # A clock's zero is arbitrary: the window slides the same on both sides.
    subject = breaker(minimum=2, ratio=0.5)
    report(subject, -0.5, failed=True)
    report(subject, 9.7, failed=True)  # 10.2 s later: the first has gone
    assert state(subject) == "closed"
    assert subject.acquire(9.8) == PASS


@settings(max_examples=300, deadline=None, database=None, derandomize=True)
@given(
    first=st.floats(min_value=-1e6, max_value=1e6, allow_nan=False),
    gap=st.floats(min_value=0.0, max_value=30.0, allow_nan=False),
)
def test_two_failures_open_it_exactly_when_both_are_in_the_window(
    first: float, gap: float
) -> None:
    # Buckets of 1 s: two failures share the window when their buckets are
    # fewer than ten apart.
    subject = breaker(minimum=2, ratio=1.0)
    second = first + gap
    report(subject, first, failed=True)
    report(subject, second, failed=True)
    together = second // 1.0 - first // 1.0 < 10
    assert state(subject) == ("open" if together else "closed")
    assert (subject.acquire(second) == REJECTED) is together
