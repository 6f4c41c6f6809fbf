"""Where `mediator` reads time; everything else takes a `Clock` or a `WallClock`.

`Clock` and `SystemClock` are the primitives' (`mediator._primitives.clock`, a
mirror of tools/primitives/clock.py), so `mediator.Clock` has the one shape
every package's `Clock` has: `monotonic`, `sleep` and `sleep_sync`. A
`FakeClock` of either resilience package is one. The wall clock, for what
outlives a process, is this module's own.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Protocol, runtime_checkable

from mediator._primitives.clock import Clock, SystemClock

__all__ = ["Clock", "SystemClock", "SystemWallClock", "WallClock", "utc_now"]


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
