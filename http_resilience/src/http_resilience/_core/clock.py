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
    "SYSTEM_CLOCK",
    "AttemptDeadline",
    "Clock",
    "SystemClock",
    "attempt_deadline",
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


class AttemptDeadline:
    """The deadline of the sync attempt a thread runs, if any: one per thread.

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

    __slots__ = ("bound", "left_at", "queue_end", "queued_out", "span", "when")

    def __init__(self) -> None:
        self.when: float | None = None
        self.span: float | None = None
        self.bound = math.inf
        self.queue_end = math.inf
        self.left_at: float | None = None
        self.queued_out = False

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


class _PerThread(threading.local):
    """Each thread's `AttemptDeadline`, made on its first use in the thread."""

    def __init__(self) -> None:
        self.deadline = AttemptDeadline()


_PER_THREAD: Final = _PerThread()


def attempt_deadline() -> AttemptDeadline:
    """The current thread's `AttemptDeadline`.

    One plain object per thread, looked up once per attempt: its fields are
    read and written many times in one, and a `threading.local`'s each cost
    a lookup of the thread's own.
    """
    return _PER_THREAD.deadline
