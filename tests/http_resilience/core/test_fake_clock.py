"""`FakeClock`: time moves only when told, sleeping records and never waits."""

from __future__ import annotations

from datetime import timedelta

import anyio
import pytest

from http_resilience import Clock, SystemClock
from http_resilience.testing import FakeClock

pytestmark = pytest.mark.anyio


def test_both_clocks_are_clocks() -> None:
    assert isinstance(FakeClock(), Clock)
    assert isinstance(SystemClock(), Clock)
    assert repr(SystemClock()) == "SystemClock()"


def test_time_moves_only_when_advanced_or_slept() -> None:
    clock = FakeClock(start=100)
    assert clock.monotonic() == 100.0
    clock.advance(2.5)
    clock.advance(timedelta(milliseconds=500))
    assert clock.monotonic() == 103.0
    assert clock.sleeps == []
    assert repr(clock) == "FakeClock(now=103.0, sleeps=0)"


def test_a_clock_never_goes_back() -> None:
    clock = FakeClock()
    with pytest.raises(ValueError, match="a monotonic clock never goes back; got -1 s"):
        clock.advance(-1)
    assert clock.monotonic() == 0.0


async def test_sleeping_records_the_delay_and_moves_time_without_waiting() -> None:
    clock = FakeClock()
    await clock.sleep(30.0)
    clock.sleep_sync(0.5)
    await clock.sleep(0)
    assert clock.sleeps == [30.0, 0.5, 0]
    assert clock.monotonic() == 30.5
    record = clock.sleeps
    record.append(1.0)  # a copy: the clock's own record is unchanged
    assert clock.sleeps == [30.0, 0.5, 0]
    clock.clear_sleeps()
    assert clock.sleeps == []
    assert clock.monotonic() == 30.5


@pytest.mark.parametrize("seconds", [0, 5.0])
async def test_an_async_sleep_is_a_cancellation_point(seconds: float) -> None:
    clock = FakeClock()
    after: list[str] = []
    with anyio.CancelScope() as scope:
        scope.cancel()
        await clock.sleep(seconds)
        after.append("not reached")
    assert scope.cancelled_caught
    assert after == []
    assert clock.sleeps == [seconds]


async def test_the_system_clock_sleeps_on_the_loop() -> None:
    clock = SystemClock()
    before = clock.monotonic()
    await clock.sleep(0)
    clock.sleep_sync(0)
    assert clock.monotonic() >= before
