"""The only module of `mediator` that reads time; everything else takes a `Clock`."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Protocol, runtime_checkable

__all__ = ["Clock", "SystemClock", "SystemWallClock", "WallClock", "utc_now"]


@runtime_checkable
class Clock(Protocol):
    """A monotonic clock in seconds; bind your own to control time in tests."""

    def monotonic(self) -> float:
        """Seconds since an arbitrary point; only differences mean anything."""
        ...


class SystemClock:
    """The process's high-resolution monotonic clock."""

    def monotonic(self) -> float:
        """Seconds from `time.perf_counter`."""
        return time.perf_counter()


def utc_now() -> datetime:
    """The wall-clock time, timezone-aware UTC: what idempotency records store."""
    return datetime.now(UTC)


@runtime_checkable
class WallClock(Protocol):
    """The time of day, for what outlives a process (idempotency leases).

    Bind your own to move time in tests: `IdempotencyBehavior` reads it for
    the claims it makes, their leases and their retention.
    """

    def now(self) -> datetime:
        """The current time, timezone-aware UTC."""
        ...


class SystemWallClock:
    """The system's wall clock, in UTC; the default `WallClock`."""

    def now(self) -> datetime:
        """`utc_now()`."""
        return utc_now()
