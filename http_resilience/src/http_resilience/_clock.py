"""The only module of `http_resilience` that reads time or sleeps.

Everything else takes a `Clock`, so a test drives time with
`http_resilience.testing.FakeClock` instead of waiting.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Protocol, runtime_checkable

__all__ = ["SYSTEM_CLOCK", "Clock", "SystemClock", "checkpoint", "reader", "utc_now"]


@runtime_checkable
class Clock(Protocol):
    """Monotonic time and sleeping, in seconds; inject your own to control time.

    `with_retry` awaits `sleep` before every retry, also when the delay is zero,
    so that a cancellation is observed between attempts. `with_retry_sync`
    calls `sleep_sync` instead.
    """

    def monotonic(self) -> float:
        """Seconds since an arbitrary point; only differences mean anything."""
        ...

    async def sleep(self, seconds: float) -> None:
        """Wait `seconds` without blocking the event loop; a cancellation point."""
        ...

    def sleep_sync(self, seconds: float) -> None:
        """Block the calling thread for `seconds`."""
        ...


class SystemClock:
    """The process's monotonic clock and the event loop's sleep (asyncio)."""

    def monotonic(self) -> float:
        """Seconds from `time.monotonic`."""
        return time.monotonic()

    async def sleep(self, seconds: float) -> None:
        """Sleep with `asyncio.sleep`; a zero delay still yields to the loop."""
        await asyncio.sleep(seconds)

    def sleep_sync(self, seconds: float) -> None:
        """Sleep with `time.sleep`."""
        time.sleep(seconds)

    def __repr__(self) -> str:
        return "SystemClock()"


SYSTEM_CLOCK = SystemClock()
"""The clock every options class uses unless given another."""


async def checkpoint() -> None:
    """Yield to the event loop once, so a pending cancellation is delivered."""
    await asyncio.sleep(0)


def reader(clock: Clock) -> Callable[[], float]:
    """What reads `clock` fastest: `time.monotonic` itself for the system clock.

    For code that reads the clock on every request, where a method call that
    only forwards to `time.monotonic` is a cost worth saving.
    """
    if type(clock) is SystemClock:
        return time.monotonic
    return clock.monotonic


def utc_now() -> datetime:
    """The wall clock, in UTC: only to read an HTTP date that came without ``Date``."""
    return datetime.now(UTC)
