"""The concurrency limiter: permits, a bounded queue, and a refusal beyond it.

`ConcurrencyLimit` is the decision (counts, no waiting); `AsyncConcurrencyLimiter`
and `ConcurrencyLimiter` are the two drivers that make a queued caller wait.
Permits are handed to waiters first come, first served. A queued coroutine
waits on an asyncio future, or on trio for an anyio event (`_Handoff`).
"""

from __future__ import annotations

import asyncio
import threading
from collections import deque
from collections.abc import Callable

import anyio
import httpx

from http_resilience._core.backend import asyncio_loop
from http_resilience._core.call import AsyncHandler, Call, SyncHandler
from http_resilience._core.drive import AsyncDriver, SyncDriver
from http_resilience._core.errors import RateLimitedError
from http_resilience._core.telemetry import Telemetry
from http_resilience._strategies.concurrency.limit import (
    GRANTED,
    QUEUED,
    ConcurrencyLimit,
    Entry,
)

__all__ = [
    "AsyncConcurrencyLimiter",
    "AsyncLimiter",
    "ConcurrencyLimiter",
    "LimiterStrategy",
    "SyncLimiter",
]


class _Handoff:
    """A queued caller's place off asyncio (trio): an event set with the permit."""

    __slots__ = ("event", "granted")

    def __init__(self) -> None:
        self.event = anyio.Event()
        self.granted = False

    def done(self) -> bool:
        """Whether the permit was handed over."""
        return self.granted

    def set_result(self, result: None) -> None:
        """Hand the permit over and wake the caller."""
        self.granted = True
        self.event.set()


class _Permits:
    """What both limiters hold: the counts of one `ConcurrencyLimit`."""

    __slots__ = ("_limit",)

    def __init__(self, *, permits: int, queue_limit: int) -> None:
        self._limit = ConcurrencyLimit(permits=permits, queue_limit=queue_limit)

    @property
    def in_use(self) -> int:
        """Permits held."""
        return self._limit.in_use

    @property
    def counts(self) -> ConcurrencyLimit:
        """The counts, to read: permits, in use, queued, the queue's limit."""
        return self._limit


class AsyncConcurrencyLimiter(_Permits):
    """`ConcurrencyLimit` for coroutines on one event loop (asyncio or trio)."""

    __slots__ = ("_waiters", "try_enter")

    def __init__(self, *, permits: int, queue_limit: int) -> None:
        super().__init__(permits=permits, queue_limit=queue_limit)
        self._waiters: deque[asyncio.Future[None] | _Handoff] = deque()
        self.try_enter: Callable[[], Entry] = self._limit.enter
        """`GRANTED` or `REFUSED` at once, or `QUEUED`: then await `wait`."""

    async def wait(self) -> None:
        """Wait, after `QUEUED`, until a permit is handed over; cancellable."""
        loop = asyncio_loop()
        if loop is None:
            await self._wait_anyio()
            return
        waiter: asyncio.Future[None] = loop.create_future()
        self._waiters.append(waiter)
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                # The permit arrived as the caller was cancelled: pass it on.
                self.leave()
            else:
                try:
                    self._waiters.remove(waiter)
                except ValueError:
                    pass  # `leave` dropped it already, and its place with it
                else:
                    self._limit.abandon()
            raise

    async def _wait_anyio(self) -> None:
        """`wait` on another library than asyncio (trio), through anyio."""
        waiter = _Handoff()
        self._waiters.append(waiter)
        try:
            await waiter.event.wait()
        except BaseException:  # the cancellation of trio, or of a scope
            if waiter.granted:
                # The permit arrived as the caller was cancelled: pass it on.
                self.leave()
            else:
                self._waiters.remove(waiter)
                self._limit.abandon()
            raise

    def leave(self) -> None:
        """Give back a permit, to the first waiter if there is one."""
        waiters = self._waiters
        # Waiters cancelled but not yet resumed: their place goes now.
        while waiters and waiters[0].done():
            waiters.popleft()
            self._limit.abandon()
        if self._limit.leave():
            waiters.popleft().set_result(None)


class ConcurrencyLimiter(_Permits):
    """`ConcurrencyLimit` for threads; each queued thread waits on its own event."""

    __slots__ = ("_lock", "_waiters")

    def __init__(self, *, permits: int, queue_limit: int) -> None:
        super().__init__(permits=permits, queue_limit=queue_limit)
        self._lock = threading.Lock()
        self._waiters: deque[threading.Event] = deque()

    def enter(self) -> bool:
        """Take a permit, waiting in the queue if need be; False when refused."""
        with self._lock:
            entry = self._limit.enter()
            if entry is not QUEUED:
                return entry is GRANTED
            waiter = threading.Event()
            self._waiters.append(waiter)
        # A queued thread blocks until a permit is handed to it, as a semaphore
        # would: the queue is for short bursts, and `queue_limit` bounds it.
        waiter.wait()
        return True

    def leave(self) -> None:
        """Give back a permit, to the first waiting thread if there is one."""
        with self._lock:
            if self._limit.leave():
                self._waiters.popleft().set()


class LimiterStrategy:
    """What both limiters decide: how a request beyond the limit is refused.

    At most `permits` requests inside at once, `queue_limit` more waiting. A
    request beyond both raises `RateLimitedError` at once: it never reached
    the breaker (so it is no evidence against the host) nor the retry.
    `AsyncLimiter` and `SyncLimiter` drive it.

    Args:
        telemetry: Where rejections are reported.
    """

    __slots__ = ("_telemetry",)

    def __init__(self, telemetry: Telemetry) -> None:
        self._telemetry = telemetry

    def refused(self, call: Call) -> RateLimitedError:
        """Report the refusal; the error to raise."""
        self._telemetry.rejection(call.method, call.host, "concurrency_limit")
        return RateLimitedError(
            f"{call.where()}: refused, the concurrency limit and its queue are full"
        )


class AsyncLimiter(AsyncDriver[LimiterStrategy]):
    """The limiter on an event loop: a queued request awaits its permit."""

    __slots__ = ("limiter",)

    def __init__(
        self,
        next: AsyncHandler,
        limiter: AsyncConcurrencyLimiter,
        strategy: LimiterStrategy,
    ) -> None:
        super().__init__(next, strategy)
        self.limiter = limiter

    async def handle(self, request: httpx.Request, call: Call) -> httpx.Response:
        """Take a permit (maybe after queueing), run the inside, give it back."""
        limiter = self.limiter
        entry = limiter.try_enter()
        if entry is not GRANTED:
            if entry is not QUEUED:
                raise self.strategy.refused(call)
            await limiter.wait()
        try:
            return await self._next.handle(request, call)
        finally:
            limiter.leave()


class SyncLimiter(SyncDriver[LimiterStrategy]):
    """The limiter for threads: a queued request blocks until its permit."""

    __slots__ = ("limiter",)

    def __init__(
        self, next: SyncHandler, limiter: ConcurrencyLimiter, strategy: LimiterStrategy
    ) -> None:
        super().__init__(next, strategy)
        self.limiter = limiter

    def handle_sync(self, request: httpx.Request, call: Call) -> httpx.Response:
        """Take a permit (maybe after queueing), run the inside, give it back."""
        limiter = self.limiter
        if not limiter.enter():
            raise self.strategy.refused(call)
        try:
            return self._next.handle_sync(request, call)
        finally:
            limiter.leave()
