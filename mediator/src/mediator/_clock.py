"""The only module of `mediator` that reads time; everything else takes a `Clock`."""

from __future__ import annotations

import time
from typing import Protocol, runtime_checkable

__all__ = ["Clock", "SystemClock"]


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
