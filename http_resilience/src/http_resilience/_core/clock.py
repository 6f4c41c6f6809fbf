"""What `http_resilience` adds to the shared clock: fast reads, UTC, deadlines.

`Clock`, `SystemClock`, `checkpoint` (and `FakeClock`) come from
`_primitives.clock`, a copy of tools/primitives/clock.py that the other
packages keep too; this module and that one are the only ones that read time or sleep.
Everything else takes a `Clock`, so a test drives time with
`http_resilience.testing.FakeClock` instead of waiting.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Final

from http_resilience._primitives.clock import Clock, SystemClock, checkpoint

__all__ = [
    "ATTEMPT_DEADLINE",
    "SYSTEM_CLOCK",
    "AttemptDeadline",
    "Clock",
    "SystemClock",
    "checkpoint",
    "reader",
    "real_time",
    "utc_now",
    "wall_time",
]


SYSTEM_CLOCK = SystemClock()
"""The clock every options class uses unless given another."""


def reader(clock: Clock) -> Callable[[], float]:
    """What reads `clock` fastest: `time.monotonic` itself for the system clock.

    For code that reads the clock on every request, where a method call that
    only forwards to `time.monotonic` is a cost worth saving.
    """
    if type(clock) is SystemClock:
        return time.monotonic
    return clock.monotonic


def wall_time() -> float:
    """Unix seconds: the time replicas share (through Redis), not a duration's."""
    return time.time()


def utc_now() -> datetime:
    """The wall clock, in UTC: only to read an HTTP date that came without ``Date``."""
    return datetime.now(UTC)


real_time: Final = reader(SYSTEM_CLOCK)
"""The clock socket timeouts run on: the deadline in the thread-local is on it."""


class AttemptDeadline(threading.local):
    """The deadline of the sync attempt the current thread runs, if any.

    A wait for a slot of the client's own pool is no time of the host's: the
    attempt's own clock starts at its first socket operation (`due`), when
    it has left the pool's queue, and runs `span` seconds from there, never
    past `bound`. A first operation that comes at or after `queue_end`
    finds the wait for a slot over its bound: `queued_out`, and no time left.

    Attributes:
        when: The deadline on `real_time`; None outside an attempt.
        span: The attempt's seconds, counted from its first socket operation;
            None once that came (or for a deadline fixed from the start).
        bound: The latest `when` may be: the deadline around the attempt's.
        queue_end: When the wait for a slot runs out.
        left_at: When the first socket operation came; None: not yet.
        queued_out: Whether it came too late, the wait for a slot run out.
    """

    when: float | None = None
    span: float | None = None
    bound: float = math.inf
    queue_end: float = math.inf
    left_at: float | None = None
    queued_out: bool = False

    def due(self) -> float | None:
        """The deadline for a socket operation now; the first starts the clock."""
        span = self.span
        if span is None:
            return self.when
        self.span = None
        now = self.left_at = real_time()
        if now >= self.queue_end:
            self.queued_out = True
            self.when = now  # nothing left: the operation is refused
            return now
        when = now + span
        if when > self.bound:
            when = self.bound
        self.when = when
        return when


ATTEMPT_DEADLINE: Final = AttemptDeadline()
