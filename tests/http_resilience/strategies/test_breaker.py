"""`CircuitBreaker`: the state machine, driven with plain numbers, and its model."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
)

from http_resilience._core.events import BreakerState
from http_resilience._strategies.breaker.state import (
    PASS,
    PROBE,
    REJECTED,
    WINDOW_BUCKETS,
    CircuitBreaker,
)


@dataclass
class Transitions:
    seen: list[tuple[BreakerState, BreakerState]] = field(
        default_factory=list[tuple[BreakerState, BreakerState]]
    )

    def __call__(
        self, breaker: CircuitBreaker, previous: BreakerState, current: BreakerState
    ) -> None:
        self.seen.append((previous, current))


def breaker(
    transitions: Transitions | None = None,
    *,
    ratio: float = 0.5,
    minimum: int = 4,
    sampling: float = 10.0,
    pause: float = 5.0,
) -> CircuitBreaker:
    return CircuitBreaker(
        failure_ratio=ratio,
        minimum_throughput=minimum,
        sampling_duration=sampling,
        break_duration=pause,
        on_transition=transitions,
    )


def state(subject: CircuitBreaker) -> BreakerState:
    """The state, read through a call: a type checker does not narrow it."""
    return subject.state


def outcome(subject: CircuitBreaker, now: float, *, failed: bool) -> int:
    ticket = subject.acquire(now)
    if ticket != REJECTED:
        subject.record(ticket, failed=failed, now=now)
    return ticket


def test_it_starts_closed_and_lets_everything_through() -> None:
    subject = breaker()
    assert state(subject) == "closed"
    assert [subject.acquire(0.0) for _ in range(3)] == [PASS] * 3
    assert subject.retry_after(0.0) is None


def test_it_does_not_open_below_the_minimum_throughput() -> None:
    subject = breaker(minimum=4)
    for now in (0.0, 0.1, 0.2):
        outcome(subject, now, failed=True)
    assert state(subject) == "closed"


def test_it_opens_when_the_ratio_is_reached_with_enough_throughput() -> None:
    transitions = Transitions()
    subject = breaker(transitions, ratio=0.5, minimum=4)
    outcome(subject, 0.0, failed=False)
    outcome(subject, 0.1, failed=False)
    outcome(subject, 0.2, failed=True)
    assert state(subject) == "closed"
    outcome(subject, 0.3, failed=True)  # 2 of 4 failed: 0.5 >= 0.5
    assert state(subject) == "open"
    assert transitions.seen == [("closed", "open")]
    assert subject.acquire(1.0) == REJECTED
    assert subject.retry_after(1.0) == pytest.approx(4.3)


def test_a_ratio_of_one_tenth_opens_at_exactly_one_in_ten() -> None:
    # 3 / 30 is 0.1, though 0.1 * 30 is a little above 3 in floating point.
    subject = breaker(ratio=0.1, minimum=30, sampling=30.0)
    for index in range(27):
        outcome(subject, index * 0.01, failed=False)
    for index in range(3):
        outcome(subject, 1 + index * 0.01, failed=True)
    assert state(subject) == "open"


def test_successes_only_never_open_it() -> None:
    subject = breaker(minimum=1)
    for index in range(1000):
        outcome(subject, index * 0.001, failed=False)
    assert state(subject) == "closed"


def test_outcomes_older_than_the_window_drop_out() -> None:
    subject = breaker(ratio=0.5, minimum=4, sampling=10.0)
    outcome(subject, 0.0, failed=True)
    outcome(subject, 0.5, failed=True)
    outcome(subject, 0.9, failed=True)
    # Ten seconds later those three are gone: this is 1 of 1, under the minimum.
    outcome(subject, 11.0, failed=True)
    assert state(subject) == "closed"
    # The window slides a bucket (1 s) at a time.
    outcome(subject, 11.5, failed=True)
    outcome(subject, 12.5, failed=True)
    assert state(subject) == "closed"
    outcome(subject, 13.0, failed=True)
    assert state(subject) == "open"


def test_the_window_keeps_what_is_still_inside_it() -> None:
    subject = breaker(ratio=0.5, minimum=4, sampling=10.0)
    outcome(subject, 0.0, failed=True)
    outcome(subject, 5.0, failed=True)
    outcome(subject, 9.0, failed=True)
    outcome(subject, 9.9, failed=True)  # all four inside 10 s
    assert state(subject) == "open"


def test_after_the_break_exactly_one_probe_goes() -> None:
    transitions = Transitions()
    subject = breaker(transitions, minimum=1, pause=5.0)
    outcome(subject, 0.0, failed=True)
    assert subject.acquire(4.999) == REJECTED
    assert subject.acquire(5.0) == PROBE
    assert state(subject) == "half_open"
    assert [subject.acquire(5.0) for _ in range(200)] == [REJECTED] * 200
    assert subject.retry_after(5.0) is None
    assert transitions.seen == [("closed", "open"), ("open", "half_open")]


def test_a_successful_probe_closes_it_with_a_fresh_window() -> None:
    transitions = Transitions()
    subject = breaker(transitions, ratio=0.5, minimum=2)
    outcome(subject, 0.0, failed=True)
    outcome(subject, 0.0, failed=True)
    probe = subject.acquire(5.0)
    subject.record(probe, failed=False, now=5.1)
    assert state(subject) == "closed"
    assert transitions.seen[-1] == ("half_open", "closed")
    outcome(subject, 5.2, failed=True)  # 1 of 1: under the minimum again
    assert state(subject) == "closed"


def test_a_failed_probe_opens_it_for_another_break() -> None:
    transitions = Transitions()
    subject = breaker(transitions, minimum=1, pause=5.0)
    outcome(subject, 0.0, failed=True)
    probe = subject.acquire(5.0)
    subject.record(probe, failed=True, now=5.5)
    assert state(subject) == "open"
    assert subject.acquire(10.4) == REJECTED
    assert subject.acquire(10.5) == PROBE
    assert transitions.seen == [
        ("closed", "open"),
        ("open", "half_open"),
        ("half_open", "open"),
        ("open", "half_open"),
    ]


def test_a_released_probe_passes_its_turn_on() -> None:
    subject = breaker(minimum=1)
    outcome(subject, 0.0, failed=True)
    probe = subject.acquire(5.0)
    subject.release(probe)
    assert state(subject) == "half_open"
    assert subject.acquire(5.0) == PROBE
    assert subject.acquire(5.0) == REJECTED


def test_releasing_a_pass_changes_nothing() -> None:
    subject = breaker(minimum=1)
    subject.release(subject.acquire(0.0))
    assert state(subject) == "closed"


def test_late_outcomes_of_attempts_let_through_while_closed_are_ignored() -> None:
    subject = breaker(minimum=2, ratio=0.5)
    early = subject.acquire(0.0)
    outcome(subject, 0.1, failed=True)
    outcome(subject, 0.2, failed=True)
    assert state(subject) == "open"
    subject.record(early, failed=False, now=0.3)
    assert state(subject) == "open"
    probe = subject.acquire(5.2)
    subject.record(early, failed=False, now=5.3)  # not the probe: ignored
    assert state(subject) == "half_open"
    subject.record(probe, failed=False, now=5.4)
    assert state(subject) == "closed"


def test_a_clock_that_goes_back_keeps_counting_in_the_current_bucket() -> None:
    subject = breaker(minimum=3, ratio=1.0)
    outcome(subject, 5.0, failed=True)
    outcome(subject, 4.0, failed=True)
    outcome(subject, 5.0, failed=True)
    assert state(subject) == "open"


def test_the_counts_are_allocated_on_first_use() -> None:
    subject = breaker()
    assert subject._totals == []  # pyright: ignore[reportPrivateUsage]
    # Outcomes within one bucket are counted without a list: a host of a big
    # registry that is seen once costs no more than its breaker.
    outcome(subject, 0.0, failed=False)
    outcome(subject, 0.5, failed=False)
    assert subject._totals == []  # pyright: ignore[reportPrivateUsage]
    outcome(subject, 1.0, failed=False)  # the next of the ten 1 s buckets
    assert len(subject._totals) == WINDOW_BUCKETS  # pyright: ignore[reportPrivateUsage]
    assert subject._failures == []  # pyright: ignore[reportPrivateUsage]


# --- the model ----------------------------------------------------------------


class BreakerModel(RuleBasedStateMachine):
    """The breaker against a plain model: every outcome kept, counted by bucket.

    Each outcome is kept with its bucket; the window is the last
    WINDOW_BUCKETS buckets up to the current one. Transitions follow the
    rules in the module's docstring.
    """

    SAMPLING = 10.0
    PAUSE = 3.0
    MINIMUM = 3
    RATIO = 0.5

    def __init__(self) -> None:
        super().__init__()
        self.transitions = Transitions()
        self.subject = breaker(
            self.transitions,
            ratio=self.RATIO,
            minimum=self.MINIMUM,
            sampling=self.SAMPLING,
            pause=self.PAUSE,
        )
        self.now = 0.0
        self.state: BreakerState = "closed"
        self.open_until = 0.0
        self.outcomes: list[tuple[int, bool]] = []
        self.bucket = 0
        self.held: list[int] = []  # tickets of attempts in flight
        self.probing = False

    def bucket_of(self, now: float) -> int:
        return int(now // (self.SAMPLING / WINDOW_BUCKETS))

    @rule(step=st.floats(min_value=0.0, max_value=4.0))
    def time_passes(self, step: float) -> None:
        self.now += step

    @rule()
    def acquire(self) -> None:
        ticket = self.subject.acquire(self.now)
        if self.state == "closed":
            expected = PASS
        elif self.state == "open" and self.now < self.open_until:
            expected = REJECTED
        else:
            self.state = "half_open"
            expected = REJECTED if self.probing else PROBE
            self.probing = True
        assert ticket == expected
        if ticket != REJECTED:
            self.held.append(ticket)

    @precondition(lambda self: bool(self.held))
    @rule(index=st.integers(min_value=0), failed=st.booleans())
    def record(self, index: int, failed: bool) -> None:
        ticket = self.held.pop(index % len(self.held))
        self.subject.record(ticket, failed=failed, now=self.now)
        if ticket == PROBE:
            self.probing = False
            self.outcomes.clear()
            if failed:
                self.state = "open"
                self.open_until = self.now + self.PAUSE
            else:
                self.state = "closed"
        elif self.state == "closed":
            bucket = max(self.bucket_of(self.now), self.bucket)
            self.bucket = bucket
            self.outcomes.append((bucket, failed))
            window = [f for b, f in self.outcomes if b > bucket - WINDOW_BUCKETS]
            if (
                failed
                and len(window) >= self.MINIMUM
                and sum(window) / len(window) >= self.RATIO
            ):
                self.state = "open"
                self.open_until = self.now + self.PAUSE
                self.outcomes.clear()

    @precondition(lambda self: bool(self.held))
    @rule(index=st.integers(min_value=0))
    def release(self, index: int) -> None:
        ticket = self.held.pop(index % len(self.held))
        self.subject.release(ticket)
        if ticket == PROBE:
            self.probing = False

    @invariant()
    def same_state(self) -> None:
        assert self.subject.state == self.state

    @invariant()
    def at_most_one_probe(self) -> None:
        assert self.held.count(PROBE) <= 1

    @invariant()
    def transitions_chain(self) -> None:
        seen = self.transitions.seen
        for (_, current), (previous, _) in itertools.pairwise(seen):
            assert current == previous
        if seen:
            assert seen[-1][1] == self.state


BreakerModel.TestCase.settings = settings(
    max_examples=300, stateful_step_count=60, deadline=None
)
TestBreakerModel = BreakerModel.TestCase
