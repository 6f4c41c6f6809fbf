"""What a host's calls are like when it is well: `Baseline`.

A host's own normal, learned from its own attempts: how long a successful one
takes (the median and the 95th percentile) and what share fail. Older
attempts count less and less: an attempt's weight halves every `half_life`
seconds, so the baseline follows a host that changes over hours and forgets
what it was a day ago. It is in bounded memory whatever the traffic: the
latencies go into `BUCKETS` logarithmic buckets, each `STEP` times wider
than the one below, from `LOWEST` seconds up.

No clock and no lock of its own: `learn` is told the time and the breaker
that owns the baseline (`CircuitBreaker`) decides when to teach it. The
breaker stops teaching it while the breaker is open or half-open, and while
the host is failing, so an outage never becomes the host's normal.
"""

from __future__ import annotations

import bisect
import itertools
import math
from array import array
from dataclasses import dataclass
from typing import Final

__all__ = [
    "ADAPTIVE_TIMEOUT_FLOOR",
    "BUCKETS",
    "LOWEST",
    "SLOW_CALL_FLOOR",
    "STEP",
    "Baseline",
    "Guards",
]

LOWEST: Final = 0.0005
"""The lowest latency bucket's upper edge, in seconds: half a millisecond."""

STEP: Final = 2**0.25
"""Each bucket's upper edge over the one below: a quantile is known to 19 %."""

BUCKETS: Final = 84
"""Buckets from `LOWEST` to about 10 minutes; a longer latency counts as the last."""

ADAPTIVE_TIMEOUT_FLOOR: Final = 1.0
"""Seconds an adaptive attempt timeout never goes below: on a busy machine,
scheduling noise alone takes a fast host's attempt past 100 ms."""

SLOW_CALL_FLOOR: Final = 0.1
"""Seconds an attempt must take at least to be slow: on a host of a few
milliseconds, a scheduling hiccup is not a slow call."""

_RESCALE: Final = 64.0
"""Half-lives after the origin past which every count is weighed anew: the
weights stay finite (below 2 ** 64)."""

_REFRESH: Final = 16
"""The quantiles are read again from the buckets every this many latencies."""

_INVERSE_LOG_STEP: Final = 1 / math.log(STEP)


class Baseline:
    """One host's latency quantiles and error rate, decaying with a half-life.

    Args:
        half_life: Seconds after which an attempt counts half as much; above 0.
        min_samples: Attempts learned before the baseline is `armed`; at
            least 1.

    Attributes:
        armed: Whether the baseline has `min_samples` attempts since it was
            made or last `disarm`-ed: the rules that read it apply only then.
        samples: Attempts learned since then.
        p50: The median latency of a successful attempt, in seconds (the
            upper edge of its bucket), as last read: on arming, then every
            16 latencies learned while armed (`quantiles` reads them now).
        p95: Its 95th percentile, the same way.
        rate: `error_rate` as last read, when the quantiles were.
        reads: How many times `p50`, `p95`, `rate` or `armed` changed: a
            reader caches what it derives from them until this moves.

    Example:
        >>> baseline = Baseline(half_life=600.0, min_samples=3)
        >>> for now, seconds in enumerate((0.02, 0.03, 0.03)):
        ...     baseline.learn(seconds, failed=False, now=float(now))
        >>> baseline.armed, round(baseline.p50, 3), baseline.error_rate
        (True, 0.032, 0.0)
        >>> baseline.learn(None, failed=True, now=3.0)
        >>> round(baseline.error_rate, 2)
        0.25
    """

    __slots__ = (
        "_counts",
        "_failed",
        "_inverse_half_life",
        "_latencies",
        "_min_samples",
        "_origin",
        "_total",
        "armed",
        "p50",
        "p95",
        "rate",
        "reads",
        "samples",
    )

    def __init__(self, *, half_life: float, min_samples: int) -> None:
        if not half_life > 0:
            raise ValueError(f"half_life must be above 0 seconds, not {half_life!r}")
        if min_samples < 1:
            raise ValueError(f"min_samples must be at least 1, not {min_samples!r}")
        self._inverse_half_life = 1 / half_life
        self._min_samples = min_samples
        # Made on the first latency: a host of a big registry may never send one.
        self._counts: array[float] | None = None
        self._origin: float | None = None
        self._latencies = 0.0
        self._total = 0.0
        self._failed = 0.0
        self.samples = 0
        self.armed = False
        self.p50 = 0.0
        self.p95 = 0.0
        self.rate = 0.0
        self.reads = 0

    @property
    def error_rate(self) -> float:
        """The decayed share of attempts that failed; 0.0 before any."""
        return self._failed / self._total if self._total else 0.0

    def learn(self, seconds: float | None, failed: bool, now: float) -> None:
        """Count one attempt at `now`: its latency (a success's), and whether it failed.

        Args:
            seconds: How long it took; None when that says nothing of the
                host's normal (a failure: a fast refusal, or a cut).
            failed: Whether it counts against the host.
            now: Seconds on the breaker's clock.
        """
        origin = self._origin
        if origin is None:
            origin = self._origin = now
        halvings = (now - origin) * self._inverse_half_life
        if halvings > _RESCALE:
            # Before the weight could overflow: every count now weighs 1 at `now`.
            self._rescale(halvings, now)
            halvings = 0.0
        weight = math.exp2(halvings)
        self._total += weight
        if failed:
            self._failed += weight
        elif seconds is not None:
            counts = self._counts
            if counts is None:
                counts = self._counts = array("d", bytes(8 * BUCKETS))
            index = (
                int(math.log(seconds / LOWEST) * _INVERSE_LOG_STEP) + 1
                if seconds > LOWEST
                else 0
            )
            counts[index if index < BUCKETS else BUCKETS - 1] += weight
            self._latencies += 1
            if self.armed and not self._latencies % _REFRESH:
                self._read_quantiles()
        self.samples += 1
        if not self.armed and self.samples >= self._min_samples:
            self._read_quantiles()
            self.armed = True

    def unlearn(self, total: int, failed: int, now: float) -> None:
        """Take back `total` attempts (`failed` of them failures) learned just now.

        The onset of the outage that tripped the breaker is no part of the
        host's normal (latencies stay; a failure has none).
        """
        origin = self._origin
        if origin is None:
            return
        halvings = (now - origin) * self._inverse_half_life
        if halvings > _RESCALE:
            self._rescale(halvings, now)
            halvings = 0.0
        weight = math.exp2(halvings)
        self._total = max(self._total - total * weight, 0.0)
        self._failed = max(self._failed - failed * weight, 0.0)
        if self._failed > self._total:
            self._failed = self._total

    def disarm(self) -> None:
        """Stop trusting the baseline until it has learned `min_samples` more.

        What it learned stays (decaying): a host that recovers from an outage
        is measured again before the rules read its baseline.
        """
        self.armed = False
        self.samples = 0
        self.reads += 1

    def quantiles(self, *shares: float) -> tuple[float, ...]:
        """The latencies below which each of `shares` of the successes took.

        Each is the upper edge of its bucket, so at most `STEP` times the
        true quantile; 0.0 before any success.
        """
        counts = self._counts
        if counts is None:
            return tuple(0.0 for _ in shares)
        # The running sums, and a binary search in them, in C: the first bucket
        # whose running sum reaches a share holds a count.
        running = list(itertools.accumulate(counts))
        whole = running[-1]
        if not whole:  # every success is too old to count
            return tuple(0.0 for _ in shares)
        last = BUCKETS - 1
        return tuple(
            LOWEST * STEP ** min(bisect.bisect_left(running, share * whole), last)
            for share in shares
        )

    def _read_quantiles(self) -> None:
        self.p50, self.p95 = self.quantiles(0.5, 0.95)
        self.rate = self.error_rate
        self.reads += 1

    def _rescale(self, halvings: float, now: float) -> None:
        """Weigh every count as of `now`, `halvings` half-lives after the origin.

        Each is multiplied by 2 ** -halvings (0.0 when that underflows: what is
        that old no longer counts), and `now` becomes the origin.
        """
        self._origin = now
        scale = math.exp2(-halvings)
        self._total *= scale
        self._failed *= scale
        counts = self._counts
        if counts is not None:
            for index in range(BUCKETS):
                counts[index] *= scale


@dataclass(frozen=True, slots=True)
class Guards:
    """The rules a breaker reads from its host's `Baseline`, and the baseline's own.

    Attributes:
        half_life: The baseline's half-life, in seconds.
        min_samples: Attempts before it is armed.
        error_factor: Once armed, the breaker trips on this many times the
            host's own error rate (never below its `failure_ratio`, never
            above halfway from that rate to 1); None: on `failure_ratio` alone.
        slow_factor: Once armed, an attempt is slow when it took longer than
            this many times the host's median (or was cut by its attempt
            timeout); None: no attempt is slow.
        slow_ratio: The share of slow attempts in the window that trips the
            breaker.
        timeout_factor: Once armed, an attempt's timeout is at most this many
            times the host's 95th percentile (`attempt_cap`); None: off.
    """

    half_life: float
    min_samples: int
    error_factor: float | None = None
    slow_factor: float | None = None
    slow_ratio: float = 0.5
    timeout_factor: float | None = None
