"""The only module of `mediator_resilience` that reads time or sleeps."""

from __future__ import annotations

import asyncio
import time
from typing import Protocol, runtime_checkable

__all__ = ["Clock", "FakeClock", "SystemClock"]


@runtime_checkable
class Clock(Protocol):
    """Where the retry behavior waits; bind `FakeClock` in tests."""

    def monotonic(self) -> float:
        """Seconds from an arbitrary point; only differences mean anything."""
        ...

    async def sleep(self, seconds: float) -> None:
        """Wait on the async path."""
        ...

    def sleep_sync(self, seconds: float) -> None:
        """Wait on the sync path (`send_sync`)."""
        ...


class SystemClock:
    """The real clock: `time.monotonic`, `asyncio.sleep`, `time.sleep`."""

    def monotonic(self) -> float:
        """`time.monotonic()`."""
        return time.monotonic()

    async def sleep(self, seconds: float) -> None:
        """`asyncio.sleep(seconds)`."""
        await asyncio.sleep(seconds)

    def sleep_sync(self, seconds: float) -> None:
        """`time.sleep(seconds)`."""
        time.sleep(seconds)


class FakeClock:
    """A clock for tests: sleeping advances it at once and is recorded.

    `sleeps` lists every wait asked for, in seconds, so a test asserts the
    backoff without spending it. The async `sleep` still yields to the event
    loop once, so a task can be cancelled during a backoff, as with a real one.

    Example:
        >>> clock = FakeClock()
        >>> clock.sleep_sync(0.2)
        >>> clock.sleeps, clock.monotonic()
        ([0.2], 0.2)
    """

    def __init__(self, start: float = 0.0) -> None:
        self.now = start
        self.sleeps: list[float] = []

    def monotonic(self) -> float:
        """The fake time, in seconds."""
        return self.now

    def advance(self, seconds: float) -> None:
        """Move the fake time forward."""
        self.now += seconds

    async def sleep(self, seconds: float) -> None:
        """Record the wait, advance, and yield to the loop once."""
        self.sleeps.append(seconds)
        self.now += seconds
        await asyncio.sleep(0)

    def sleep_sync(self, seconds: float) -> None:
        """Record the wait and advance."""
        self.sleeps.append(seconds)
        self.now += seconds
