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
from collections.abc import Callable
from typing import TYPE_CHECKING, Generic, Protocol, TypeVar

import anyio
import httpx

from http_resilience._core.call import AsyncHandler, Call, SyncHandler
from http_resilience._core.classify import FAILURE_BY_STATUS
from http_resilience._core.clock import Clock, reader
from http_resilience._core.drive import AsyncDriver, SyncDriver
from http_resilience._core.errors import RateLimitedError
from http_resilience._core.host_registry import ALL_HOSTS, HostStates
from http_resilience._core.telemetry import Telemetry
from http_resilience._strategies.adaptive.limit import GRANTED, QUEUED, AdaptiveLimit

if TYPE_CHECKING:
    from http_resilience._strategies.adaptive.options import AdaptiveLimiterOptions

__all__ = [
    "AdaptiveLimiterStrategy",
    "AsyncAdaptiveLimiter",
    "AsyncWaiters",
    "SyncAdaptiveLimiter",
]


class _Settable(Protocol):
    """An event a place is woken by: anyio's or a thread's."""

    def set(self) -> None:
        """Wake the waiter."""
        ...


E = TypeVar("E", bound=_Settable)


class _Place(Generic[E]):
    """A queued caller's place: its event, set with the permit."""

    __slots__ = ("event", "granted")

    def __init__(self, event: E) -> None:
        self.event = event
        self.granted = False


def _hand_over(
    waiters: dict[AdaptiveLimit, list[_Place[E]]], limit: AdaptiveLimit
) -> None:
    """`limit` gave a permit back to its first queued caller: wake it."""
    queue = waiters[limit]
    place = queue.pop(0)
    if not queue:
        del waiters[limit]
    place.granted = True
    place.event.set()


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
        limits: Each host held and its limit (``"*"`` for the one every host
            shares).
    """

    __slots__ = ("_per_host", "_telemetry", "limit_of", "limits", "now")

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
        self._per_host = options.per_host
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

        if options.per_host:
            states = HostStates(options.maximum_hosts, new)
            self.limit_of: Callable[[str], AdaptiveLimit] = states.get
            self.limits: Callable[[], list[tuple[str, AdaptiveLimit]]] = states.items
        else:
            shared = new()
            self.limit_of = lambda host: shared
            self.limits = lambda: [(ALL_HOSTS, shared)]

    def moved(self, call: Call, previous: int, limit: int) -> None:
        """Report that the limit `call` took a permit of moved to `limit`."""
        host = call.host if self._per_host else ALL_HOSTS
        self._telemetry.concurrency_limit(host, previous, limit)

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


class AsyncWaiters:
    """The callers queued for async limits: each woken in turn with its permit.

    The queue of `AsyncAdaptiveLimiter`, and of ``AdmissionMiddleware`` in
    front of a service's own handlers: `wait` after `AdaptiveLimit.enter`
    said ``"queued"``, `leave` in place of `AdaptiveLimit.leave`.
    """

    __slots__ = ("_waiters",)

    def __init__(self) -> None:
        self._waiters: dict[AdaptiveLimit, list[_Place[anyio.Event]]] = {}

    async def wait(self, limit: AdaptiveLimit) -> None:
        """Wait for a permit of `limit`; a cancelled caller gives its place back."""
        place = _Place(anyio.Event())
        self._waiters.setdefault(limit, []).append(place)
        try:
            await place.event.wait()
        except BaseException:  # a cancellation, of asyncio, trio or a scope
            if place.granted:
                self.leave(limit)  # the permit came as the caller left: pass it on
            else:
                self._waiters[limit].remove(place)
                limit.abandon()
            raise

    def leave(self, limit: AdaptiveLimit) -> None:
        """Give a permit of `limit` back, to its first queued caller if any."""
        if limit.leave():
            _hand_over(self._waiters, limit)


class AsyncAdaptiveLimiter(AsyncDriver[AdaptiveLimiterStrategy]):
    """The adaptive limiter on an event loop (asyncio or trio)."""

    __slots__ = ("_waiters",)

    def __init__(self, next: AsyncHandler, strategy: AdaptiveLimiterStrategy) -> None:
        super().__init__(next, strategy)
        self._waiters = AsyncWaiters()

    async def handle(self, request: httpx.Request, call: Call) -> httpx.Response:
        """Take a permit (maybe after queueing), run the inside, give it back."""
        strategy = self.strategy
        limit = strategy.limit_of(call.host)
        waiters = self._waiters
        entry = limit.enter()
        if entry is not GRANTED:
            if entry is not QUEUED:
                raise strategy.refused(call)
            await waiters.wait(limit)
        started = strategy.now()
        try:
            response = await self._next.handle(request, call)
        except BaseException:
            waiters.leave(limit)
            raise
        if _succeeded(response, call):
            ended = strategy.now()
            before = limit.limit
            limit.sample(ended - started, ended)
            if limit.limit != before:
                strategy.moved(call, before, limit.limit)
        waiters.leave(limit)
        return response


class SyncAdaptiveLimiter(SyncDriver[AdaptiveLimiterStrategy]):
    """The adaptive limiter for threads: one lock over the counts and the limit."""

    __slots__ = ("_lock", "_waiters")

    def __init__(self, next: SyncHandler, strategy: AdaptiveLimiterStrategy) -> None:
        super().__init__(next, strategy)
        self._lock = threading.Lock()
        self._waiters: dict[AdaptiveLimit, list[_Place[threading.Event]]] = {}

    def handle_sync(self, request: httpx.Request, call: Call) -> httpx.Response:
        """Take a permit (maybe after queueing), run the inside, give it back."""
        strategy = self.strategy
        limit = strategy.limit_of(call.host)
        place: _Place[threading.Event] | None = None
        with self._lock:
            entry = limit.enter()
            if entry is QUEUED:
                place = _Place(threading.Event())
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
        before, after = self._leave(limit, started, rtt)
        if after != before:
            strategy.moved(call, before, after)
        return response

    def _leave(
        self, limit: AdaptiveLimit, started: float, rtt: float | None
    ) -> tuple[int, int]:
        """Give the permit back, after the sample if any; the limit before and after."""
        with self._lock:
            before = limit.limit
            if rtt is not None:
                limit.sample(rtt, started + rtt)
            if limit.leave():
                _hand_over(self._waiters, limit)
            return before, limit.limit
