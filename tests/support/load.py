"""A constant-arrival-rate load driver, k6's executor of that name in small.

Arrivals come on a fixed schedule, ``start + i / rate``, whatever the calls
already running do: a slow server does not slow the arrivals down, so its
slowness shows up as latency and dropped arrivals instead of being hidden
(coordinated omission). Each arrival runs ``call(i)`` as its own task. When
`max_in_flight` calls are already running an arrival is dropped, not queued.

Bounded on these 2-core machines: at most `MAX_RATE` arrivals per second and
`MAX_DURATION` seconds per run; after the last arrival the calls still running
get `drain` seconds to end, then are cancelled and counted as abandoned.
Connections are the client's business (keep it at 16 or fewer).
"""

from __future__ import annotations

import asyncio
import math
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from http_resilience import Clock, SystemClock

__all__ = ["MAX_DURATION", "MAX_RATE", "LoadResult", "run_load"]

MAX_RATE = 400.0  # arrivals per second
MAX_DURATION = 10.0  # seconds
DEFAULT_MAX_IN_FLIGHT = 200
DEFAULT_DRAIN = 5.0  # seconds
# How long cancelled calls get to end; a call that swallows its cancellation
# is left behind after this rather than hanging the run.
CANCEL_TIMEOUT = 5.0  # seconds

Call = Callable[[int], Awaitable[object]]


@dataclass(frozen=True)
class LoadResult:
    """What a run did.

    Attributes:
        arrivals: Arrivals scheduled: ``round(rate * duration)``.
        started: Arrivals that started a call.
        dropped: Arrivals that found `max_in_flight` calls running.
        completed: Calls that returned.
        failed: Calls that raised, by exception class name.
        abandoned: Calls still running after the drain, then cancelled.
        latencies: Seconds each ended call took (returned or raised), sorted.
        max_lateness: The most an arrival started after its scheduled time, s.
        elapsed: Seconds from the first arrival to the end of the drain.
    """

    arrivals: int
    started: int
    dropped: int
    completed: int
    failed: Counter[str]
    abandoned: int
    latencies: tuple[float, ...]
    max_lateness: float
    elapsed: float

    def percentile(self, fraction: float) -> float:
        """The latency `fraction` of ended calls took at most (nearest rank).

        Raises:
            ValueError: `fraction` outside [0, 1], or no call ended.
        """
        if not 0 <= fraction <= 1:
            raise ValueError(f"fraction must be in [0, 1], got {fraction!r}")
        if not self.latencies:
            raise ValueError("no call ended: there is no latency to report")
        rank = max(1, math.ceil(fraction * len(self.latencies)))
        return self.latencies[rank - 1]

    @property
    def p50(self) -> float:
        """The median latency, seconds."""
        return self.percentile(0.50)

    @property
    def p95(self) -> float:
        """The 95th percentile latency, seconds."""
        return self.percentile(0.95)

    @property
    def p99(self) -> float:
        """The 99th percentile latency, seconds."""
        return self.percentile(0.99)

    @property
    def max(self) -> float:
        """The slowest call, seconds."""
        return self.percentile(1.0)


@dataclass
class _Tally:
    started: int = 0
    dropped: int = 0
    completed: int = 0
    failed: Counter[str] = field(default_factory=Counter[str])
    latencies: list[float] = field(default_factory=list[float])
    max_lateness: float = 0.0
    # Counted in the call itself: a done-callback would run a loop turn late.
    in_flight: int = 0


async def run_load(
    call: Call,
    *,
    rate: float,
    duration: float,
    max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
    drain: float = DEFAULT_DRAIN,
    clock: Clock | None = None,
) -> LoadResult:
    """Call `call(i)` at `rate` arrivals per second for `duration` seconds.

    An exception from `call` is counted, not raised; a cancellation of the
    run cancels every call in flight and propagates.

    Example:
        >>> async def hit(i: int) -> None:  # doctest: +SKIP
        ...     await client.get("/healthy")
        >>> result = await run_load(hit, rate=200, duration=1)  # doctest: +SKIP
        >>> result.dropped, result.p99  # doctest: +SKIP

    Raises:
        ValueError: `rate` outside (0, `MAX_RATE`], `duration` outside
            (0, `MAX_DURATION`], `max_in_flight` below 1 or a negative `drain`.
    """
    if not 0 < rate <= MAX_RATE:
        raise ValueError(f"rate must be in (0, {MAX_RATE}] per second, got {rate!r}")
    if not 0 < duration <= MAX_DURATION:
        raise ValueError(
            f"duration must be in (0, {MAX_DURATION}] seconds, got {duration!r}"
        )
    if max_in_flight < 1:
        raise ValueError(f"max_in_flight must be >= 1, got {max_in_flight!r}")
    if not 0 <= drain < math.inf:
        raise ValueError(f"drain must be finite and >= 0, got {drain!r}")
    clock = clock or SystemClock()
    arrivals = round(rate * duration)
    tally = _Tally()
    running: set[asyncio.Task[None]] = set()

    async def one(index: int) -> None:
        began = clock.monotonic()
        try:
            await call(index)
        except Exception as error:  # counted: a failed call is an outcome
            tally.failed[type(error).__name__] += 1
        else:
            tally.completed += 1
        finally:
            tally.in_flight -= 1
        tally.latencies.append(clock.monotonic() - began)

    start = clock.monotonic()
    try:
        for index in range(arrivals):
            due = start + index / rate
            now = clock.monotonic()
            if now < due:
                await clock.sleep(due - now)
                now = clock.monotonic()
            tally.max_lateness = max(tally.max_lateness, now - due)
            if tally.in_flight >= max_in_flight:
                tally.dropped += 1
                continue
            tally.in_flight += 1
            tally.started += 1
            task = asyncio.create_task(one(index))
            running.add(task)
            task.add_done_callback(running.discard)
        if running:
            await asyncio.wait(set(running), timeout=drain)
    finally:
        for task in running:
            task.cancel()
        if running:
            await asyncio.wait(set(running), timeout=CANCEL_TIMEOUT)
    elapsed = clock.monotonic() - start
    return LoadResult(
        arrivals=arrivals,
        started=tally.started,
        dropped=tally.dropped,
        completed=tally.completed,
        failed=tally.failed,
        abandoned=tally.started - tally.completed - tally.failed.total(),
        latencies=tuple(sorted(tally.latencies)),
        max_lateness=tally.max_lateness,
        elapsed=elapsed,
    )
