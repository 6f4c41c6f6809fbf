"""The circuit breaker's state machine, told the time: `CircuitBreaker`.

`CircuitBreaker` is the state machine. No I/O and no clock of its own: every
method takes ``now`` (seconds on the pipeline's clock) and returns a decision,
so one object serves the async and the sync transports and a test drives it
with plain numbers.

    closed --(failure ratio reached, minimum throughput met)--> open
    open --(break duration over: the next caller is the probe)--> half_open
    half_open --(probe succeeded)--> closed
    half_open --(probe failed)--> open

While half-open exactly one probe is in flight; every other caller is
rejected, however many arrive at once. Rejecting is the caller's job (the
breaker only answers `REJECTED`), so each rejection raises a fresh exception.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Final, TypeAlias

from http_resilience._core.events import (
    CLOSED,
    HALF_OPEN,
    OPEN,
    BreakerState,
    TripRule,
)
from http_resilience._strategies.breaker.baseline import (
    ADAPTIVE_TIMEOUT_FLOOR,
    SLOW_CALL_FLOOR,
    Baseline,
    Guards,
)

__all__ = [
    "PROBE",
    "REJECTED",
    "WINDOW_BUCKETS",
    "BaselineListener",
    "CircuitBreaker",
    "Ticket",
    "TransitionListener",
]
TransitionListener: TypeAlias = Callable[
    ["CircuitBreaker", BreakerState, BreakerState], None
]
"""Called with (the breaker, previous, current) on every change of state."""
BaselineListener: TypeAlias = Callable[["CircuitBreaker", TripRule | None, bool], None]
"""Called with (the breaker, the rule whose trip disarmed its baseline or None,
whether only the attempt cap moved) when its `baseline` arms, is disarmed, or
moves the cap while armed."""

Ticket: TypeAlias = int
"""What `acquire` answers: `REJECTED`, `PASS` (closed) or `PROBE`."""
REJECTED: Final[Ticket] = 0
PASS: Final[Ticket] = 1
PROBE: Final[Ticket] = 2

WINDOW_BUCKETS: Final = 10
"""The sampling window slides in this many steps."""
# What a breaker's counts are before they are needed, shared and never written
# to: each list a breaker holds is one more object the cyclic garbage collector
# walks, for every host of a big registry.
_NO_COUNTS: Final[list[int]] = []
_NO_GUARDS: Final = Guards(half_life=1.0, min_samples=1)


def _ignore(
    breaker: CircuitBreaker, previous: BreakerState, current: BreakerState
) -> None:
    pass


_CUT: Final = math.inf
"""The seconds an attempt its timeout cut is recorded with."""


def _unheard(breaker: CircuitBreaker, tripped: TripRule | None, moved: bool) -> None:
    pass


class CircuitBreaker:
    """Failure ratio over a sliding window, then a break, then one probe.

    The window (`sampling_duration`) is `WINDOW_BUCKETS` buckets of counts;
    outcomes older than the window drop out a bucket at a time. The breaker
    opens when an outcome leaves at least `minimum_throughput` outcomes in the
    window of which at least `failure_ratio` failed.

    Each caller asks `acquire(now)` before its attempt and reports with
    `record` (an outcome) or `release` (no outcome: cancelled, or an exception
    that says nothing about the host), passing back the ticket it got. An
    outcome of an attempt let through while closed that ends after the breaker
    opened is ignored: it says nothing about the host after the break.

    Not thread-safe: the sync transport holds a lock around it.

    Args:
        failure_ratio: In (0, 1].
        minimum_throughput: At least 1.
        sampling_duration: Seconds, above 0.
        break_duration: Seconds, above 0.
        on_transition: Called with (the breaker, previous, current) on each
            change.
        guards: The adaptive rules its `baseline` serves; None: no baseline.
        on_baseline: Called when the baseline arms, is disarmed (with the
            rule that tripped), or moves the attempt cap while armed.

    Example:
        >>> breaker = CircuitBreaker(
        ...     failure_ratio=0.5, minimum_throughput=2,
        ...     sampling_duration=10, break_duration=5,
        ... )
        >>> for now in (0.0, 0.1):
        ...     breaker.record(breaker.acquire(now), failed=True, now=now)
        >>> breaker.state, breaker.acquire(1.0) == REJECTED, breaker.retry_after(1.0)
        ('open', True, 4.1)
        >>> ticket = breaker.acquire(5.1)
        >>> ticket == PROBE, breaker.acquire(5.1) == REJECTED
        (True, True)
        >>> breaker.record(ticket, failed=False, now=5.2)
        >>> breaker.state
        'closed'
    """

    __slots__ = (
        "_break",
        "_bucket",
        "_failed",
        "_failures",
        "_guards",
        "_halfway",
        "_head_failed",
        "_head_slow",
        "_head_total",
        "_minimum",
        "_on_baseline",
        "_on_transition",
        "_open_until",
        "_probing",
        "_ratio",
        "_read",
        "_slow",
        "_slow_above",
        "_slow_halfway",
        "_slows",
        "_state",
        "_taught",
        "_told",
        "_total",
        "_totals",
        "_trip",
        "_tripped",
        "_width",
        "baseline",
        "cap",
        "closed",
        "key",
    )

    def __init__(
        self,
        *,
        failure_ratio: float,
        minimum_throughput: int,
        sampling_duration: float,
        break_duration: float,
        on_transition: TransitionListener | None = None,
        guards: Guards | None = None,
        on_baseline: BaselineListener | None = None,
    ) -> None:
        self._ratio = failure_ratio
        self._minimum = minimum_throughput
        self._width = sampling_duration / WINDOW_BUCKETS
        self._break = break_duration
        self._on_transition: TransitionListener = on_transition or _ignore
        self._state: BreakerState = CLOSED
        self.closed = True
        """Whether the state is closed: `acquire` would answer `PASS` at once."""
        self._open_until = -math.inf
        self._probing = False
        # The current bucket's counts are plain numbers; the older buckets'
        # lists are allocated when the window first slides past a bucket that
        # has outcomes (the failures' when it had failures): most hosts of a
        # big registry see few outcomes, fewer failures.
        self._head_total = 0
        self._head_failed = 0
        self._totals = _NO_COUNTS
        self._failures = _NO_COUNTS
        self.key = ""
        """The host a `HostRegistry` keeps it under; "" outside a registry."""
        self._bucket = 0
        self._total = 0
        self._failed = 0
        # Read only with a baseline; a breaker without one holds the inert rules.
        self._guards = guards or _NO_GUARDS
        self.baseline = (
            None
            if guards is None
            else Baseline(half_life=guards.half_life, min_samples=guards.min_samples)
        )
        """The host's own normal, learned while closed (`guarded`); None: off."""
        self._head_slow = 0
        self._slow = 0
        self._slows = _NO_COUNTS
        # Failures taught the baseline since the window last failed no more
        # than the host's own rate: the onset of an outage, taken back on a trip.
        self._taught = 0
        # What the rules derive from the baseline, as of its `reads`-th read.
        self._read = 0
        self._trip = failure_ratio
        self._slow_above = math.inf
        self._halfway = failure_ratio / 2
        self._slow_halfway = self._guards.slow_ratio / 2
        self.cap: float | None = None
        """The most seconds its baseline gives an attempt (`Call.attempt_cap`);
        None: the attempt timeout's own."""
        self._on_baseline: BaselineListener = on_baseline or _unheard
        self._told = False  # the baseline's armed, as last told
        self._tripped: TripRule | None = None  # the rule tripping, while it trips

    @property
    def state(self) -> BreakerState:
        """``"closed"``, ``"open"`` or ``"half_open"``, as last changed.

        An open breaker whose break is over still reads ``"open"`` until the
        next `acquire` makes that caller the probe.
        """
        return self._state

    def acquire(self, now: float) -> Ticket:
        """Ask to send one attempt at `now`.

        Returns:
            `PASS` while closed; `PROBE` for the one caller let through after
            the break; `REJECTED` while open, or half-open with its probe in
            flight.
        """
        if self._state is CLOSED:
            return PASS
        if self._state is OPEN:
            if now < self._open_until:
                return REJECTED
            self._change(HALF_OPEN)
        if self._probing:
            return REJECTED
        self._probing = True
        return PROBE

    def retry_after(self, now: float) -> float | None:
        """Seconds until a probe may go, when known: while open, never below 0."""
        if self._state is OPEN:
            return max(self._open_until - now, 0.0)
        return None

    def record(
        self, ticket: Ticket, failed: bool, now: float, seconds: float | None = None
    ) -> None:
        """Report the outcome of an attempt sent with `ticket`, at `now`.

        Args:
            ticket: What `acquire` answered for the attempt.
            failed: Whether it counts against the host.
            now: When it ended.
            seconds: How long it took, for the `baseline`: `math.inf` for an
                attempt its timeout cut, None when unknown.
        """
        if ticket == PASS:
            if self._state is not CLOSED:
                return
            # Inline, not a method: this runs on every attempt.
            bucket = int(now // self._width)
            if bucket != self._bucket:
                self._slide(bucket)
            self._head_total += 1
            self._total += 1
            baseline = self.baseline
            if baseline is not None:
                if (
                    failed
                    or seconds is None
                    or seconds >= self._slow_above
                    or baseline.reads != self._read
                ):
                    self._guarded(baseline, failed, now, seconds)
                    return
                # A success at the host's own speed (most attempts): `_guarded`
                # without what only a failure or a slow call reaches.
                total = self._total
                if not baseline.armed or (
                    self._failed < self._halfway * total
                    and self._slow < self._slow_halfway * total
                ):
                    baseline.learn(seconds, False, now)
                    if baseline.reads != self._read:
                        self._derive(baseline)
                if self._failed <= baseline.rate * total:
                    self._taught = 0
                return
            if failed:
                self._head_failed += 1
                self._failed += 1
                if (
                    self._total >= self._minimum
                    and self._failed / self._total >= self._ratio
                ):
                    self._open(now)
        elif ticket == PROBE:
            if self._state is not HALF_OPEN:
                return  # a probe sent before an operator closed the breaker
            self._probing = False
            if failed:
                self._open(now)
            else:
                self._reset()
                self._change(CLOSED)

    def _guarded(
        self, baseline: Baseline, failed: bool, now: float, seconds: float | None
    ) -> None:
        """`record` of a closed breaker with a baseline: learn, then maybe trip.

        The attempt teaches the baseline unless the window is halfway to a
        trip (once armed): a failing host's attempts are no part of its normal.
        On a trip, the failures taught since the window last failed no more
        than the host's own rate (the outage's onset) are taken back.
        """
        guards = self._guards
        armed = baseline.armed
        if baseline.reads != self._read:
            self._derive(baseline)
        # Infinite until armed with the rule on: no attempt is slow then.
        slow = seconds is not None and seconds > self._slow_above
        if slow:
            self._head_slow += 1
            self._slow += 1
        if failed:
            self._head_failed += 1
            self._failed += 1
        total = self._total
        threshold = self._trip
        if not armed or (
            self._failed < self._halfway * total
            and self._slow < self._slow_halfway * total
        ):
            # An attempt its timeout cut says nothing of how long one takes.
            baseline.learn(None if seconds == _CUT else seconds, failed, now)
            if failed:
                self._taught += 1
            if baseline.reads != self._read:
                self._derive(baseline)
                threshold = self._trip
        if self._failed <= baseline.rate * total:
            self._taught = 0
        if total < self._minimum:
            return
        rule: TripRule
        if failed and self._failed / total >= threshold:
            rule = "baseline" if threshold > self._ratio else "failure_ratio"
        elif slow and self._slow / total >= guards.slow_ratio:
            rule = "slow_calls"
        elif failed and threshold > self._ratio and self._recent() >= threshold:
            rule = "baseline"
        else:
            return
        baseline.unlearn(self._taught, self._taught, now)
        self._taught = 0
        baseline.disarm()
        self._tripped = rule
        self._derive(baseline)
        self._tripped = None
        self._open(now)

    def _recent(self) -> float:
        """The failure ratio of the newest buckets that hold `minimum_throughput`.

        A host whose own normal is to fail often trips on a ratio well above
        `failure_ratio`, which the whole window would reach only once its
        older outcomes slid out: the newest outcomes show an outage sooner.
        0.0 when even the whole window holds too few.
        """
        total, failed = self._head_total, self._head_failed
        totals, failures = self._totals, self._failures
        index = self._bucket
        while total < self._minimum and totals:
            index -= 1
            if index <= self._bucket - WINDOW_BUCKETS:
                return 0.0
            slot = index % WINDOW_BUCKETS
            total += totals[slot]
            if failures:
                failed += failures[slot]
        return failed / total if total >= self._minimum else 0.0

    def threshold(self) -> float:
        """The failure ratio that trips the breaker now (its baseline's, once armed).

        A read, safe from another thread (`health`): each outcome recorded
        derives the rules' figures from the baseline it changed.
        """
        return self._trip

    def attempt_cap(self) -> float | None:
        """`cap`: the most seconds the baseline gives an attempt now."""
        return self.cap

    def _derive(self, baseline: Baseline) -> None:
        """The trip ratio and the attempt cap from the baseline's last read.

        Read once per change of the baseline, not per attempt: the trip
        ratio is `error_factor` times the host's rate, never below
        `failure_ratio` and never above halfway from that rate to 1 (a host
        failing that much more than usual is failing); the cap is
        `timeout_factor` times its p95, never below `ADAPTIVE_TIMEOUT_FLOOR`;
        an attempt is slow past `slow_factor` times its p50, never below
        `SLOW_CALL_FLOOR`. Tells `on_baseline` when the baseline armed or
        was disarmed, and when the cap moved while armed.
        """
        self._read = baseline.reads
        before = self.cap
        self._trip = self._ratio
        self._slow_above = math.inf
        self.cap = None
        armed = baseline.armed
        if armed:
            self._derived(baseline)
        # Halfway to a trip, on failures or on slow calls: the baseline stops
        # learning (a failing host's attempts are no part of its normal).
        self._halfway = (baseline.rate + self._trip) / 2
        self._slow_halfway = self._guards.slow_ratio / 2
        if armed != self._told:
            self._told = armed
            self._on_baseline(self, self._tripped, False)
        elif armed and self.cap != before:
            self._on_baseline(self, None, True)

    def _derived(self, baseline: Baseline) -> None:
        """`_derive`'s figures, from an armed baseline."""
        guards = self._guards
        if guards.slow_factor is not None:
            slowest = guards.slow_factor * baseline.p50
            self._slow_above = slowest if slowest > SLOW_CALL_FLOOR else SLOW_CALL_FLOOR
        if guards.error_factor is not None:
            rate = baseline.rate
            own = guards.error_factor * rate
            highest = (1.0 + rate) / 2
            if own > highest:
                own = highest
            if own > self._ratio:
                self._trip = own
        if guards.timeout_factor is not None:
            cap = guards.timeout_factor * baseline.p95
            self.cap = cap if cap > ADAPTIVE_TIMEOUT_FLOOR else ADAPTIVE_TIMEOUT_FLOOR

    def release(self, ticket: Ticket) -> None:
        """Give back `ticket` without an outcome; a probe's turn passes on."""
        if ticket == PROBE:
            self._probing = False

    def close(self) -> None:
        """Close the breaker now and forget its window: an operator's reset.

        The outcome of a probe sent before is then ignored.
        """
        self._reset()
        self._probing = False
        self._open_until = -math.inf
        if self._state is not CLOSED:
            self._change(CLOSED)

    def _slide(self, bucket: int) -> None:
        if not self._total:
            # Nothing in the window (every count is 0): start counting here.
            self._bucket = bucket
            return
        steps = bucket - self._bucket
        if steps <= 0:
            # The clock went back, or a bucket index overflowed a float: keep
            # counting in the current bucket rather than lose the window.
            return
        if steps >= WINDOW_BUCKETS:
            self._reset()
            self._bucket = bucket
            return
        # The current bucket's counts move to its slot, which has held 0
        # since the window slid onto it; then the buckets that leave drop out.
        old = self._bucket % WINDOW_BUCKETS
        totals, failures = self._totals, self._failures
        if self._head_total:
            if not totals:
                totals = self._totals = [0] * WINDOW_BUCKETS
            totals[old] = self._head_total
            self._head_total = 0
        if self._head_failed:
            if not failures:
                failures = self._failures = [0] * WINDOW_BUCKETS
            failures[old] = self._head_failed
            self._head_failed = 0
        slows = self._slows
        if self._head_slow:
            if not slows:
                slows = self._slows = [0] * WINDOW_BUCKETS
            slows[old] = self._head_slow
            self._head_slow = 0
        for index in range(self._bucket + 1, bucket + 1):
            slot = index % WINDOW_BUCKETS
            if totals:
                self._total -= totals[slot]
                totals[slot] = 0
            if failures:
                self._failed -= failures[slot]
                failures[slot] = 0
            if slows:
                self._slow -= slows[slot]
                slows[slot] = 0
        self._bucket = bucket

    def _reset(self) -> None:
        for counts in (self._totals, self._failures, self._slows):
            for slot in range(len(counts)):
                counts[slot] = 0
        self._head_total = 0
        self._head_failed = 0
        self._head_slow = 0
        self._total = 0
        self._failed = 0
        self._slow = 0

    def _open(self, now: float) -> None:
        self._open_until = now + self._break
        self._reset()
        self._change(OPEN)

    def _change(self, current: BreakerState) -> None:
        previous, self._state = self._state, current
        self.closed = current is CLOSED
        self._on_transition(self, previous, current)
