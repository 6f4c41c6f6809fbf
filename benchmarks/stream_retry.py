"""What `with_retry` costs per item over iterating the source directly.

Run by `make bench`. The source is trivial and in memory (a generator over a
range), so what is measured is the per-item cost of passing through the retry
loop when nothing breaks. Each row iterates one stream of `ITEMS` items; the
figure is ns per item, best of `REPEATS` repeats taken round-robin over the
rows, with the ratio to the bare iteration of the same kind (async or sync).

Aim (issue 6): <= 2x the bare iteration. `RETHROW_MID_STREAM` (the default)
only needs to know whether anything was yielded; `RESTART_FROM_START` counts
every item for `StreamRetryContext.items_yielded`, so it costs a little more.
This script only reports: it never fails on a timing.
"""

from __future__ import annotations

import asyncio
import gc
import platform
import time
from collections.abc import AsyncGenerator, AsyncIterable, Callable, Generator, Iterable
from dataclasses import dataclass

from http_resilience import (
    PartialStreamPolicy,
    StreamRetryContext,
    StreamRetryOptions,
    with_retry,
    with_retry_sync,
)

ITEMS = 200_000
REPEATS = 9
AIM_RATIO = 2.0
RESTART = StreamRetryOptions(
    partial_stream_policy=PartialStreamPolicy.RESTART_FROM_START
)


async def source(
    context: StreamRetryContext | None = None,
) -> AsyncGenerator[int, None]:
    for item in range(ITEMS):
        yield item


def sync_source(
    context: StreamRetryContext | None = None,
) -> Generator[int, None, None]:
    yield from range(ITEMS)


async def consume(stream: AsyncIterable[int]) -> None:
    async for _ in stream:
        pass


def consume_sync(stream: Iterable[int]) -> None:
    for _ in stream:
        pass


@dataclass
class Row:
    label: str
    best: float = float("inf")  # seconds per item

    @property
    def ns(self) -> float:
        return self.best * 1e9


@dataclass
class AsyncRow(Row):
    stream: Callable[[], AsyncIterable[int]] = source


@dataclass
class SyncRow(Row):
    stream: Callable[[], Iterable[int]] = sync_source


ASYNC_ROWS = [
    AsyncRow("bare: async for over the source", stream=source),
    AsyncRow(
        "with_retry, RETHROW_MID_STREAM (default)", stream=lambda: with_retry(source)
    ),
    AsyncRow(
        "with_retry, RESTART_FROM_START", stream=lambda: with_retry(source, RESTART)
    ),
]
SYNC_ROWS = [
    SyncRow("bare: for over the source", stream=sync_source),
    SyncRow(
        "with_retry_sync, RETHROW_MID_STREAM",
        stream=lambda: with_retry_sync(sync_source),
    ),
    SyncRow(
        "with_retry_sync, RESTART_FROM_START",
        stream=lambda: with_retry_sync(sync_source, RESTART),
    ),
]


async def time_async(row: AsyncRow) -> float:
    gc.collect()
    started = time.perf_counter()
    await consume(row.stream())
    return (time.perf_counter() - started) / ITEMS


def time_sync(row: SyncRow) -> float:
    gc.collect()
    started = time.perf_counter()
    consume_sync(row.stream())
    return (time.perf_counter() - started) / ITEMS


async def measure() -> None:
    # Warm-up, and a check that every row yields every item.
    for row in ASYNC_ROWS:
        assert len([item async for item in row.stream()]) == ITEMS, row.label
    for sync_row in SYNC_ROWS:
        assert len(list(sync_row.stream())) == ITEMS, sync_row.label
    for _ in range(REPEATS):
        for row in ASYNC_ROWS:
            row.best = min(row.best, await time_async(row))
        for sync_row in SYNC_ROWS:
            sync_row.best = min(sync_row.best, time_sync(sync_row))


def report() -> None:
    print(
        f"stream retry, per item ({ITEMS:,} items, best of {REPEATS}; "
        f"Python {platform.python_version()})"
    )
    print(f"{'path':<44} {'ns/item':>8} {'ratio':>6} {'aim':>6}  verdict")
    baseline = 0.0
    rows: list[Row] = [*ASYNC_ROWS, *SYNC_ROWS]
    for row in rows:
        if row.label.startswith("bare"):
            baseline = row.ns
            print(f"{row.label:<44} {row.ns:>8.1f} {1.0:>5.2f}x {'':>6}")
            continue
        ratio = row.ns / baseline
        verdict = "within" if ratio <= AIM_RATIO else "over"
        print(
            f"{row.label:<44} {row.ns:>8.1f} {ratio:>5.2f}x "
            f"{'<=' + format(AIM_RATIO, '.0f') + 'x':>6}  {verdict}"
        )


def main() -> None:
    asyncio.run(measure())
    report()
    print(
        "RESTART_FROM_START counts every item for StreamRetryContext.items_yielded "
        "and tells a failure of the source from an exception thrown in at `yield`; "
        "the default policy needs neither after the first item."
    )


if __name__ == "__main__":
    main()
