"""Test helpers for code that uses `http_resilience`: a clock you control.

Example:
    >>> from http_resilience import StreamRetryOptions
    >>> clock = FakeClock()
    >>> options = StreamRetryOptions(clock=clock, use_jitter=False)
"""

from __future__ import annotations

from datetime import timedelta

from http_resilience._clock import checkpoint

__all__ = ["FakeClock"]


class FakeClock:
    """A `Clock` whose time moves only when told to; sleeping never waits.

    `sleep` and `sleep_sync` record the delay asked for, move the clock on by
    it and return at once. The async `sleep` still yields to the event loop
    once, also for a zero delay, so a cancellation reaches the code under test
    exactly where a real sleep would deliver it.

    Args:
        start: The initial reading of `monotonic()`, in seconds; default 0.

    Example:
        >>> clock = FakeClock()
        >>> clock.sleep_sync(0.2)
        >>> clock.advance(1)
        >>> clock.monotonic(), clock.sleeps
        (1.2, [0.2])
    """

    def __init__(self, start: float = 0.0) -> None:
        self._now = float(start)
        self._sleeps: list[float] = []

    @property
    def sleeps(self) -> list[float]:
        """The delays asked of `sleep` and `sleep_sync`, in seconds, in order.

        A copy: clear the record with `clear_sleeps()`.
        """
        return list(self._sleeps)

    def clear_sleeps(self) -> None:
        """Forget the delays recorded so far."""
        self._sleeps.clear()

    def monotonic(self) -> float:
        """The current fake time, in seconds."""
        return self._now

    def advance(self, seconds: float | timedelta) -> None:
        """Move the clock forward by `seconds` (a number or a `timedelta`).

        Raises:
            ValueError: If `seconds` is negative: a monotonic clock never goes
                back.
        """
        step = seconds.total_seconds() if isinstance(seconds, timedelta) else seconds
        if step < 0:
            raise ValueError(f"a monotonic clock never goes back; got {step!r} s")
        self._now += step

    async def sleep(self, seconds: float) -> None:
        """Record `seconds`, move the clock on by it and yield to the loop once."""
        self._sleep(seconds)
        await checkpoint()

    def sleep_sync(self, seconds: float) -> None:
        """Record `seconds` and move the clock on by it, without blocking."""
        self._sleep(seconds)

    def _sleep(self, seconds: float) -> None:
        self._sleeps.append(seconds)
        self._now += max(seconds, 0.0)

    def __repr__(self) -> str:
        return f"FakeClock(now={self._now!r}, sleeps={len(self._sleeps)})"
