"""The adaptive limit: who gets in, and a gradient controller that moves the limit.

Why a gradient controller (Netflix's Gradient2, Envoy's adaptive concurrency)
rather than Vegas or AIMD: AIMD moves only on drops and errors, so it learns
nothing until the host already fails; Vegas needs a true no-load RTT, which a
client sending at its limit never sees. A gradient compares the window's mean
RTT with a slow baseline, so it reacts to queueing (latency) before errors and
in proportion to how far latency has risen; the queue allowance (sqrt(limit))
keeps it from sinking on RTT noise. Unlike Gradient2, the baseline never rises
while the host queues (Gradient2's baseline drifts up under sustained load).

`AdaptiveLimit` counts permits and queued callers like the static limiter
and, once per sample window (about `interval` seconds, jittered, and at least
`MIN_WINDOW_SAMPLES` samples), sets the limit from the window's samples. It
has no clock: the driver tells it `now`. Only calls that succeeded at their
first attempt are RTT samples; failures, retried calls and refusals are not,
so an outage neither teaches the baseline that slowness is normal nor moves
the limit.

A host that got slower by itself (not by queueing) would otherwise be cut
for good, and one that started above the host's capacity would keep a queue
as its baseline: every 20 to 40 windows (drawn), a busy limit runs one probe
window 2 x sqrt(limit) lower (at least half); the first one after 3 to 6,
since the first baseline was learned at `initial_limit`, which nobody fitted
to the host. If the RTT does not change with
fewer calls, it is the host's own, and becomes the baseline; if it falls, that
was queueing, and the baseline keeps the lower of the two (and probes again
soon, if that lowered it).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Final, Literal, TypeAlias

__all__ = [
    "BASELINE_FALL",
    "BASELINE_RISE",
    "GRANTED",
    "MAX_GRADIENT_DROP",
    "MIN_WINDOW_SAMPLES",
    "NOISE_BAND",
    "PROBE_DEPTH",
    "PROBE_EVERY",
    "PROBE_FIRST",
    "PROBE_RESPONSE",
    "PROBE_SOON",
    "QUEUED",
    "REFUSED",
    "SMOOTHING",
    "AdaptiveLimit",
    "Entry",
]

Entry: TypeAlias = Literal["granted", "queued", "refused"]
GRANTED: Final = "granted"
QUEUED: Final = "queued"
REFUSED: Final = "refused"

MIN_WINDOW_SAMPLES: Final = 10
"""A window closes only with this many samples: fewer say nothing reliable."""
MAX_GRADIENT_DROP: Final = 0.5
"""The gradient's floor: one window cuts the limit to about half, no lower."""
NOISE_BAND: Final = 0.95
"""A gradient at or above this is noise, not queueing: the limit may grow."""
SMOOTHING: Final = 0.2
"""The share of a window's increase applied: growth is slow, cuts are not."""
BASELINE_FALL: Final = 0.5
"""How far the baseline moves toward a faster window: it believes good news."""
BASELINE_RISE: Final = 0.05
"""How far it moves toward a slower window within the noise band."""
PROBE_DEPTH: Final = 2.0
"""A probe window runs this many times sqrt(limit) below the limit (at least
half of it): below the queue the allowance lets the limit keep."""
PROBE_RESPONSE: Final = 0.9
"""A probe whose RTT is within this factor of the window's before it (either
way) found the host's own latency; one below it found queueing."""
PROBE_EVERY: Final = (20, 40)
"""Windows between probes: drawn uniformly in this range, per probe."""
PROBE_FIRST: Final = (3, 6)
"""Windows to the first probe, drawn: the first baseline was learned at the
initial limit, and above the host's capacity that is a queue (kept for 20 to
40 windows, latency stays that much higher: 2.5x, on a host of 8 started at 20)."""
PROBE_SOON: Final = 5
"""Windows to the next probe after one that lowered the baseline: a limit
that started above the host's capacity learned a queue as its baseline."""


class AdaptiveLimit:
    """One host's permits, queue, and the limit learned from its latency.

    Args:
        min_limit: The limit never goes below this; at least 1.
        max_limit: Nor above this.
        initial_limit: The limit before the first window closes.
        queue_limit: Callers that may wait for a permit; at least 0.
        now: When the limit is made: the first window starts then.
        random: A float in [0, 1) per window: jitters its length in
            [0.75, 1.25) x `interval`, so replicas do not move in step.
        interval: The sample window's mean length, in seconds.

    Attributes:
        limit: The current limit (permits let through at once): read it to
            report it. Changes only when `estimate` moved a whole permit away.
        estimate: The controller's real-valued limit.
        baseline_rtt: The long-term RTT, in seconds; 0.0 before a window closed.
        in_use: Permits held.
        queued: Callers waiting for a permit.

    Example:
        >>> limit = AdaptiveLimit(min_limit=1, max_limit=100, initial_limit=10,
        ...     queue_limit=0, now=0.0, random=lambda: 0.5, interval=1.0)
        >>> [limit.enter() for _ in range(11)][-2:]
        ['granted', 'refused']
        >>> for _ in range(10):
        ...     _ = limit.leave()
        ...     limit.sample(0.1, 1.0)  # a busy host at its usual speed
        >>> limit.limit  # grown by 0.2 x sqrt(10)
        10
        >>> round(limit.estimate, 2)
        10.63
    """

    __slots__ = (
        "_due",
        "_interval",
        "_last_short",
        "_peak",
        "_probe_in",
        "_probing",
        "_random",
        "_rtt_sum",
        "_samples",
        "baseline_rtt",
        "estimate",
        "in_use",
        "limit",
        "max_limit",
        "min_limit",
        "queue_limit",
        "queued",
    )

    def __init__(
        self,
        *,
        min_limit: int,
        max_limit: int,
        initial_limit: int,
        queue_limit: int,
        now: float,
        random: Callable[[], float],
        interval: float = 1.0,
    ) -> None:
        self.min_limit = min_limit
        self.max_limit = max_limit
        self.limit = initial_limit
        self.estimate = float(initial_limit)
        self.queue_limit = queue_limit
        self.baseline_rtt = 0.0
        self.in_use = 0
        self.queued = 0
        self._interval = interval
        self._random = random
        self._samples = 0
        self._rtt_sum = 0.0
        self._peak = 0
        self._probing = False
        self._last_short = 0.0
        self._probe_in = self._probe_gap(PROBE_FIRST)
        self._next_window(now)

    def enter(self) -> Entry:
        """Take a permit, or a place in the queue, or neither."""
        if self.in_use < self.limit and not self.queued:
            in_use = self.in_use = self.in_use + 1
            if in_use > self._peak:
                self._peak = in_use
            return GRANTED
        if self.queued < self.queue_limit:
            self.queued += 1
            return QUEUED
        return REFUSED

    def leave(self) -> bool:
        """Give back a permit; True when it passes to the first queued caller.

        A limit that shrank below the permits held keeps them until enough
        have come back: no queued caller gets one meanwhile.
        """
        if self.queued and self.in_use <= self.limit:
            self.queued -= 1
            return True
        self.in_use -= 1
        return False

    def abandon(self) -> None:
        """A queued caller gave up before a permit reached it."""
        self.queued -= 1

    def sample(self, rtt: float, now: float) -> None:
        """Count the RTT of a call that succeeded at its first attempt, at `now`.

        Closes the window, and moves the limit, once `now` passed its end and
        it holds `MIN_WINDOW_SAMPLES` samples.
        """
        self._samples += 1
        self._rtt_sum += rtt
        if now >= self._due and self._samples >= MIN_WINDOW_SAMPLES:
            self._close(now)

    def _close(self, now: float) -> None:
        short = self._rtt_sum / self._samples
        if self._probing:
            self._probed(short)
            self._next_window(now)
            return
        self._last_short = short
        long = self.baseline_rtt
        if long <= 0.0:
            long = short
        gradient = long / short if short > 0.0 else 1.0
        if gradient > 1.0:
            gradient = 1.0
        elif gradient < MAX_GRADIENT_DROP:
            gradient = MAX_GRADIENT_DROP
        if short < long:
            long += (short - long) * BASELINE_FALL
        elif gradient >= NOISE_BAND:
            # Never while queueing: congestion must not become the norm.
            long += (short - long) * BASELINE_RISE
        self.baseline_rtt = long
        estimate = self.estimate
        allowance = math.sqrt(estimate)
        busy = 2 * self._peak >= self.limit
        if gradient < NOISE_BAND:
            # Queueing: cut at once, by the gradient, less the allowance.
            target = estimate * gradient + allowance
            if target < estimate:
                estimate = target
        elif busy:
            # Not congested, and the limit was in use: grow, slowly.
            estimate += allowance * SMOOTHING
        if estimate < self.min_limit:
            estimate = float(self.min_limit)
        elif estimate > self.max_limit:
            estimate = float(self.max_limit)
        self.estimate = estimate
        if abs(estimate - self.limit) >= 1.0:
            self.limit = int(estimate)
        self._probe_in -= 1
        if self._probe_in <= 0 and busy:
            self._probing = True
            probe = estimate - PROBE_DEPTH * allowance
            if probe < estimate / 2:
                probe = estimate / 2
            self.limit = max(self.min_limit, int(probe))
        self._next_window(now)

    def _probed(self, short: float) -> None:
        """End a probe window: its RTT, with fewer permits, was `short`."""
        self._probing = False
        self.limit = int(self.estimate)
        self._probe_in = self._probe_gap()
        last = self._last_short
        if PROBE_RESPONSE * last <= short <= last / PROBE_RESPONSE:
            # Fewer calls, the same latency: it is the host's own now, slower
            # or not.
            self.baseline_rtt = short
        elif short < self.baseline_rtt:
            # Faster with fewer calls: queueing, and a lower baseline; maybe
            # lower still with fewer calls again.
            if short < NOISE_BAND * self.baseline_rtt:
                self._probe_in = PROBE_SOON
            self.baseline_rtt = short
        # Slower with fewer calls: the host is changing under the probe, and
        # the probe tells nothing.

    def _probe_gap(self, gap: tuple[int, int] = PROBE_EVERY) -> int:
        low, high = gap
        return low + int(self._random() * (high - low + 1))

    def _next_window(self, now: float) -> None:
        self._samples = 0
        self._rtt_sum = 0.0
        self._peak = self.in_use
        self._due = now + self._interval * (0.75 + 0.5 * self._random())
