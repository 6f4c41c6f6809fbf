"""The constant-arrival-rate load driver, on in-process calls."""

from __future__ import annotations

import asyncio
import time
from collections import Counter

import pytest

from http_resilience.testing import FakeClock
from tests.support.load import MAX_DURATION, MAX_RATE, LoadResult, run_load

pytestmark = pytest.mark.anyio


async def test_arrivals_keep_their_rate() -> None:
    starts: list[float] = []

    async def call(index: int) -> None:
        starts.append(time.perf_counter())

    began = time.perf_counter()
    result = await run_load(call, rate=200, duration=1.0)
    assert (result.arrivals, result.started, result.completed) == (200, 200, 200)
    assert (result.dropped, result.abandoned, sum(result.failed.values())) == (0, 0, 0)
    offsets = [start - began for start in starts]
    # Spread over the second, not bunched: about 100 in each half.
    assert 190 <= sum(offset < 1.0 for offset in offsets) <= 200
    assert 90 <= sum(offset < 0.5 for offset in offsets) <= 110
    assert 0.95 <= result.elapsed < 1.5
    assert len(result.latencies) == 200
    assert 0 <= result.p50 <= result.p99 <= result.max < 0.5


class ReleasingClock(FakeClock):
    """A fake clock that sets `release` once its time reaches `at`."""

    def __init__(self, release: asyncio.Event, at: float) -> None:
        super().__init__()
        self.release, self.at = release, at

    async def sleep(self, seconds: float) -> None:
        await super().sleep(seconds)
        if self.monotonic() >= self.at:
            self.release.set()


async def test_arrivals_over_the_in_flight_cap_are_dropped_not_queued() -> None:
    release = asyncio.Event()
    clock = ReleasingClock(release, at=0.3)

    async def call(index: int) -> None:
        await release.wait()

    result = await run_load(call, rate=100, duration=0.5, max_in_flight=3, clock=clock)
    assert result.arrivals == 50
    # Three start and hold the cap until 0.3 s: the arrivals until then are
    # dropped, and those after the release start again.
    assert result.started + result.dropped == 50
    assert 25 <= result.dropped <= 30
    assert result.started >= 20
    assert result.completed == result.started
    assert result.abandoned == 0


async def test_latencies_and_failures_are_recorded() -> None:
    clock = FakeClock()

    async def call(index: int) -> None:
        clock.advance(index / 1000)
        if index % 4 == 0:
            raise ConnectionError("planted")
        if index % 4 == 1:
            raise TimeoutError

    result = await run_load(call, rate=100, duration=0.4, clock=clock)
    assert (result.started, result.completed) == (40, 20)
    assert result.failed == {"ConnectionError": 10, "TimeoutError": 10}
    assert result.latencies == pytest.approx([i / 1000 for i in range(40)])
    assert result.p50 == pytest.approx(0.019)
    assert result.p95 == pytest.approx(0.037)
    assert result.p99 == pytest.approx(0.039)
    assert result.max == pytest.approx(0.039)
    # Each call moved the clock on, so later arrivals started late.
    assert result.max_lateness > 0


async def test_calls_past_the_drain_are_cancelled_and_counted_abandoned() -> None:
    cancelled = 0

    async def call(index: int) -> None:
        nonlocal cancelled
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled += 1
            raise

    result = await run_load(call, rate=50, duration=0.2, drain=0.1, clock=FakeClock())
    assert (result.started, result.abandoned, cancelled) == (10, 10, 10)
    assert result.completed == 0
    assert result.latencies == ()
    with pytest.raises(ValueError, match="no call ended"):
        _ = result.p50


def test_percentiles_use_the_nearest_rank() -> None:
    result = LoadResult(
        arrivals=100,
        started=100,
        dropped=0,
        completed=100,
        failed=Counter[str](),
        abandoned=0,
        latencies=tuple(float(i) for i in range(1, 101)),
        max_lateness=0.0,
        elapsed=1.0,
    )
    assert (result.p50, result.p95, result.p99, result.max) == (50, 95, 99, 100)
    assert result.percentile(0) == 1
    with pytest.raises(ValueError, match=r"fraction must be in \[0, 1\]"):
        result.percentile(1.5)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"rate": MAX_RATE + 1, "duration": 1}, "rate must be in"),
        ({"rate": 0, "duration": 1}, "rate must be in"),
        ({"rate": 10, "duration": MAX_DURATION + 1}, "duration must be in"),
        ({"rate": 10, "duration": 1, "max_in_flight": 0}, "max_in_flight must be"),
        ({"rate": 10, "duration": 1, "drain": -1}, "drain must be finite"),
    ],
)
async def test_the_bounds_are_enforced(options: dict[str, float], message: str) -> None:
    async def call(index: int) -> None:
        pass

    with pytest.raises(ValueError, match=message):
        await run_load(call, **options)  # type: ignore[arg-type]
