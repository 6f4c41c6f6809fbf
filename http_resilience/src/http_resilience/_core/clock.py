"""What `http_resilience` adds to the shared clock: fast reads, UTC, deadlines.

`Clock`, `SystemClock`, `checkpoint` (and `FakeClock`) come from
`shared_clock`, a copy of tools/primitives/clock.py that `mediator_resilience`
shares; this module and that one are the only ones that read time or sleep.
Everything else takes a `Clock`, so a test drives time with
`http_resilience.testing.FakeClock` instead of waiting.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Final

from http_resilience._core.shared_clock import Clock, SystemClock, checkpoint

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

    Attributes:
        when: The deadline on `real_time`; None outside an attempt.
    """

    when: float | None = None


ATTEMPT_DEADLINE: Final = AttemptDeadline()
