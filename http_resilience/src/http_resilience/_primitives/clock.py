"""`Clock`, `SystemClock` and `FakeClock`: where the package reads time and sleeps.

Everything else takes a `Clock`, so a test drives time with `FakeClock` instead
of waiting. Sleeping runs on asyncio, and on any other async library (trio)
through anyio, imported only then: httpx depends on it, and a package without
it runs on asyncio alone. The packages may not import each other, so each
keeps a copy of this module, written by tools/copy_primitives.py from
tools/primitives/clock.py.
"""

from __future__ import annotations

import asyncio
import time
from datetime import timedelta
from typing import Protocol, runtime_checkable

__all__ = ["Clock", "FakeClock", "SystemClock", "checkpoint"]


@runtime_checkable
class Clock(Protocol):
    """Monotonic time and sleeping, in seconds; inject your own to control time.

    The async paths await `sleep` before every retry, also when the delay is
    zero, so that a cancellation is observed between attempts; the sync paths
    call `sleep_sync` instead.
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
    """The real clock: `time.monotonic`, `asyncio.sleep` and `time.sleep`.

    On an async library other than asyncio (trio), `sleep` is `anyio.sleep`.
    """

    def monotonic(self) -> float:
        """Seconds from `time.monotonic`."""
        return time.monotonic()

    async def sleep(self, seconds: float) -> None:
        """Sleep with `asyncio.sleep`; a zero delay still yields to the loop.

        On another async library (trio), with `anyio.sleep`.
        """
        if _on_asyncio():
            await asyncio.sleep(seconds)
        else:
            import anyio  # only off asyncio: see the module

            await anyio.sleep(seconds)

    def sleep_sync(self, seconds: float) -> None:
        """Sleep with `time.sleep`."""
        time.sleep(seconds)

    def __repr__(self) -> str:
        return "SystemClock()"


async def checkpoint() -> None:
    """Yield to the event loop once, so a pending cancellation is delivered."""
    if _on_asyncio():
        await asyncio.sleep(0)
    else:
        import anyio.lowlevel  # only off asyncio: see the module

        await anyio.lowlevel.checkpoint()


def _on_asyncio() -> bool:
    """Whether asyncio runs the current task (trio, even as a guest, does not)."""
    try:
        return asyncio.current_task() is not None
    except RuntimeError:  # no asyncio loop in this thread
        return False


class FakeClock:
    """A `Clock` whose time moves only when told to; sleeping never waits.

    `sleep` and `sleep_sync` record the delay asked for, move the clock on by
    it and return at once, so a test asserts the backoff without spending it.
    The async `sleep` still yields to the event loop once, also for a zero
    delay, so a cancellation reaches the code under test exactly where a real
    sleep would deliver it.

    Args:
        start: The initial reading of `monotonic()`, in seconds; default 0.

    Example:
        >>> clock = FakeClock()
        >>> clock.sleep_sync(0.2)
        >>> clock.advance(1)
        >>> clock.monotonic(), clock.now, clock.sleeps
        (1.2, 1.2, [0.2])
    """

    def __init__(self, start: float = 0.0) -> None:
        self._now = float(start)
        self._sleeps: list[float] = []

    @property
    def now(self) -> float:
        """The current fake time, in seconds: what `monotonic()` returns."""
        return self._now

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
