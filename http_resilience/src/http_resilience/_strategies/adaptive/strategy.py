"""The adaptive limiter's strategy: a limit per host, the refusal, the two drivers.

`AdaptiveLimiterStrategy` finds each call's `AdaptiveLimit` (its host's, in a
bounded registry, or the one every host shares) and refuses a call beyond
the limit and its queue with `RateLimitedError` (reason
``"concurrency_limit"``, as the static limiter): a local refusal, so the retry
never repeats it and the breaker counts nothing against the host. The drivers
time each call on the pipeline's clock and tell the limit its RTT when the call
succeeded at its first attempt; every other outcome only gives the permit back.
A queued caller waits on an anyio event (a thread: a threading event): the
queue is the slow path, so one waiter type serves asyncio and trio.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import TYPE_CHECKING

import anyio
import httpx

from http_resilience._core.call import AsyncHandler, Call, SyncHandler
from http_resilience._core.classify import FAILURE_BY_STATUS
from http_resilience._core.clock import Clock, reader
from http_resilience._core.drive import AsyncDriver, SyncDriver
from http_resilience._core.errors import RateLimitedError
from http_resilience._core.host_registry import ALL_HOSTS
from http_resilience._core.telemetry import Telemetry
from http_resilience._strategies.adaptive.limit import GRANTED, QUEUED, AdaptiveLimit

if TYPE_CHECKING:
    from http_resilience._strategies.adaptive.options import AdaptiveLimiterOptions

__all__ = ["AdaptiveLimiterStrategy", "AsyncAdaptiveLimiter", "SyncAdaptiveLimiter"]


class _Place:
    """A queued coroutine's place: an event set with the permit."""

    __slots__ = ("event", "granted")

    def __init__(self) -> None:
        self.event = anyio.Event()
        self.granted = False


class _ThreadPlace:
    """A queued thread's place."""

    __slots__ = ("event", "granted")

    def __init__(self) -> None:
        self.event = threading.Event()
        self.granted = False


class AdaptiveLimiterStrategy:
    """Which limit a call takes a permit of, and how a refusal is reported.

    Args:
        options: The limits' bounds, the queue, per host or shared.
        clock: Times each call.
        telemetry: Where refusals are reported.
        random: A float in [0, 1) per sample window (its jitter).

    Attributes:
        now: Reads the clock.
        limit_of: The `AdaptiveLimit` of a host (given its normalised key).
    """

    __slots__ = (
        "_limits",
        "_lock",
        "_maximum",
        "_new",
        "_telemetry",
        "limit_of",
        "now",
    )

    def __init__(
        self,
        *,
        options: AdaptiveLimiterOptions,
        clock: Clock,
        telemetry: Telemetry,
        random: Callable[[], float],
    ) -> None:
        self.now = now = reader(clock)
        self._telemetry = telemetry
        self._maximum = options.maximum_hosts
        low, high, first = options.min_limit, options.max_limit, options.initial_limit
        queue = options.queue_limit

        def new() -> AdaptiveLimit:
            return AdaptiveLimit(
                min_limit=low,
                max_limit=high,
                initial_limit=first,
                queue_limit=queue,
                now=now(),
                random=random,
            )

        self._new = new
        self._limits: OrderedDict[str, AdaptiveLimit] = OrderedDict()
        self._lock = threading.Lock()
        if options.per_host:
            self.limit_of: Callable[[str], AdaptiveLimit] = self._host_limit
        else:
            shared = self._limits[ALL_HOSTS] = new()
            self.limit_of = lambda host: shared

    def limits(self) -> list[tuple[str, AdaptiveLimit]]:
        """Each host held and its limit (``"*"`` for the one every host shares)."""
        return [*self._limits.items()]

    def _host_limit(self, host: str) -> AdaptiveLimit:
        limits = self._limits
        found = limits.get(host)
        if found is not None:
            try:  # noqa: SIM105 - every call passes here; `suppress` costs more
                limits.move_to_end(host)
            except KeyError:
                pass  # another thread dropped it just now: it still serves
            return found
        with self._lock:
            found = limits.get(host)
            if found is None:
                if len(limits) >= self._maximum:
                    # A dropped host's calls in flight give their permits
                    # back to the dropped limit; the host starts afresh.
                    limits.popitem(last=False)
                found = limits[host] = self._new()
            return found

    def refused(self, call: Call) -> RateLimitedError:
        """Report the refusal; the error to raise."""
        self._telemetry.rejection(call.method, call.host, "concurrency_limit")
        return RateLimitedError(
            f"{call.where()}: refused, the adaptive concurrency limit and its "
            "queue are full"
        )


def _succeeded(response: httpx.Response, call: Call) -> bool:
    """An RTT sample: answered at the first attempt, and not a failure."""
    return call.attempt == 1 and not FAILURE_BY_STATUS[response.status_code]


class AsyncAdaptiveLimiter(AsyncDriver[AdaptiveLimiterStrategy]):
    """The adaptive limiter on an event loop (asyncio or trio)."""

    __slots__ = ("_waiters",)

    def __init__(self, next: AsyncHandler, strategy: AdaptiveLimiterStrategy) -> None:
        super().__init__(next, strategy)
        self._waiters: dict[AdaptiveLimit, list[_Place]] = {}

    async def handle(self, request: httpx.Request, call: Call) -> httpx.Response:
        """Take a permit (maybe after queueing), run the inside, give it back."""
        strategy = self.strategy
        limit = strategy.limit_of(call.host)
        entry = limit.enter()
        if entry is not GRANTED:
            if entry is not QUEUED:
                raise strategy.refused(call)
            await self._wait(limit)
        started = strategy.now()
        try:
            response = await self._next.handle(request, call)
        except BaseException:
            self._leave(limit)
            raise
        if _succeeded(response, call):
            ended = strategy.now()
            limit.sample(ended - started, ended)
        self._leave(limit)
        return response

    async def _wait(self, limit: AdaptiveLimit) -> None:
        place = _Place()
        self._waiters.setdefault(limit, []).append(place)
        try:
            await place.event.wait()
        except BaseException:  # a cancellation, of asyncio, trio or a scope
            if place.granted:
                self._leave(limit)  # the permit came as the caller left: pass it on
            else:
                self._waiters[limit].remove(place)
                limit.abandon()
            raise

    def _leave(self, limit: AdaptiveLimit) -> None:
        if limit.leave():
            waiters = self._waiters[limit]
            place = waiters.pop(0)
            if not waiters:
                del self._waiters[limit]
            place.granted = True
            place.event.set()


class SyncAdaptiveLimiter(SyncDriver[AdaptiveLimiterStrategy]):
    """The adaptive limiter for threads: one lock over the counts and the limit."""

    __slots__ = ("_lock", "_waiters")

    def __init__(self, next: SyncHandler, strategy: AdaptiveLimiterStrategy) -> None:
        super().__init__(next, strategy)
        self._lock = threading.Lock()
        self._waiters: dict[AdaptiveLimit, list[_ThreadPlace]] = {}

    def handle_sync(self, request: httpx.Request, call: Call) -> httpx.Response:
        """Take a permit (maybe after queueing), run the inside, give it back."""
        strategy = self.strategy
        limit = strategy.limit_of(call.host)
        place: _ThreadPlace | None = None
        with self._lock:
            entry = limit.enter()
            if entry is QUEUED:
                place = _ThreadPlace()
                self._waiters.setdefault(limit, []).append(place)
        if entry is not GRANTED:
            if place is None:
                raise strategy.refused(call)
            # Blocks until a permit is handed over, as the static limiter's
            # queue does: `queue_limit` bounds it.
            place.event.wait()
        started = strategy.now()
        try:
            response = self._next.handle_sync(request, call)
        except BaseException:
            self._leave(limit, started, None)
            raise
        rtt = strategy.now() - started if _succeeded(response, call) else None
        self._leave(limit, started, rtt)
        return response

    def _leave(self, limit: AdaptiveLimit, started: float, rtt: float | None) -> None:
        with self._lock:
            if rtt is not None:
                limit.sample(rtt, started + rtt)
            if limit.leave():
                waiters = self._waiters[limit]
                place = waiters.pop(0)
                if not waiters:
                    del self._waiters[limit]
                place.granted = True
                place.event.set()
