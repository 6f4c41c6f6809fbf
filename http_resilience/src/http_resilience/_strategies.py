"""The two strategies that refuse before sending: the limiter and the breaker.

Each refusal raises a fresh exception (re-raising one cached instance would
grow its traceback on every rejection) and reports a `RejectionEvent`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import httpx

from http_resilience._breaker import (
    PASS,
    REJECTED,
    BreakerState,
    CircuitBreaker,
    TransitionListener,
)
from http_resilience._classify import FAILURE_EXCEPTIONS, is_failure_status
from http_resilience._clock import Clock, reader
from http_resilience._errors import BrokenCircuitError, RateLimitedError
from http_resilience._hosts import HostRegistry
from http_resilience._limiter import (
    GRANTED,
    QUEUED,
    AsyncConcurrencyLimiter,
    ConcurrencyLimiter,
)
from http_resilience._options import HttpResilienceOptions
from http_resilience._pipeline import Call, Handler
from http_resilience._strategy_options import BreakerOptions
from http_resilience._telemetry import Telemetry

__all__ = ["SHARED_HOST", "BreakerStrategy", "LimiterStrategy"]

SHARED_HOST = "*"
"""The host `BreakerEvent`s carry when one breaker serves every host."""


class LimiterStrategy:
    """At most `permits` requests inside at once, `queue_limit` more waiting.

    A request beyond both raises `RateLimitedError` at once: it never reached
    the breaker (so it is no evidence against the host) nor the retry.

    Args:
        next: The handler inside.
        permits: Requests inside at once.
        queue_limit: Requests that may wait for a permit.
        telemetry: Where rejections are reported.
    """

    __slots__ = ("_async", "_next", "_sync", "_telemetry")

    def __init__(
        self, next: Handler, *, permits: int, queue_limit: int, telemetry: Telemetry
    ) -> None:
        self._next = next
        self._async = AsyncConcurrencyLimiter(permits=permits, queue_limit=queue_limit)
        self._sync = ConcurrencyLimiter(permits=permits, queue_limit=queue_limit)
        self._telemetry = telemetry

    @property
    def in_use(self) -> int:
        """Permits held (async and sync callers together)."""
        return self._async.in_use + self._sync.in_use

    async def handle(self, request: httpx.Request, call: Call) -> httpx.Response:
        """Take a permit (maybe after queueing), run the inside, give it back."""
        limiter = self._async
        entry = limiter.try_enter()
        if entry is not GRANTED:
            if entry is not QUEUED:
                raise self._refused(call)
            await limiter.wait()
        try:
            return await self._next.handle(request, call)
        finally:
            limiter.leave()

    def handle_sync(self, request: httpx.Request, call: Call) -> httpx.Response:
        """The blocking twin of `handle`."""
        limiter = self._sync
        if not limiter.enter():
            raise self._refused(call)
        try:
            return self._next.handle_sync(request, call)
        finally:
            limiter.leave()

    def _refused(self, call: Call) -> RateLimitedError:
        self._telemetry.rejection(call.method, call.host, "concurrency_limit")
        return RateLimitedError(
            f"{call.where()}: refused, the concurrency limit and its queue are full"
        )


class BreakerStrategy:
    """The circuit breaker around each physical attempt, per host or shared.

    Records a failure for a failure status or a `FAILURE_EXCEPTIONS` exception,
    a success for any other response; any other exception (a total timeout, a
    cancellation, a bug) records nothing and passes a probe's turn on.

    Args:
        next: The handler inside.
        options: failure_ratio, minimum_throughput, sampling_duration,
            break_duration, breaker_per_host and maximum_hosts.
        clock: The breaker's time.
        telemetry: Where transitions and rejections are reported.

    Attributes:
        breaker: The breaker that guards a host (given its normalised key).
    """

    __slots__ = (
        "_lock",
        "_next",
        "_now",
        "_options",
        "_registry",
        "_telemetry",
        "breaker",
    )

    def __init__(
        self,
        next: Handler,
        *,
        options: HttpResilienceOptions | BreakerOptions,
        clock: Clock,
        telemetry: Telemetry,
    ) -> None:
        self._next = next
        self._options = options
        self._now = reader(clock)
        self._telemetry = telemetry
        # The sync transport may be called from many threads; the async one
        # runs on one loop and never takes it.
        self._lock = threading.Lock()
        self._registry: HostRegistry | None = None
        if options.breaker_per_host:
            registry = HostRegistry(
                options.maximum_hosts, self._new_breaker, telemetry.breaker
            )
            self._registry = registry
            self.breaker: Callable[[str], CircuitBreaker] = registry.breaker
        else:

            def moved(
                breaker: CircuitBreaker, previous: BreakerState, current: BreakerState
            ) -> None:
                telemetry.breaker(SHARED_HOST, previous, current)

            shared = self._new_breaker(moved)
            self.breaker = lambda host: shared

    @property
    def registry(self) -> HostRegistry | None:
        """The per-host breakers; None when one breaker is shared."""
        return self._registry

    async def handle(self, request: httpx.Request, call: Call) -> httpx.Response:
        """Ask the breaker, send one attempt, tell the breaker how it went."""
        now = self._now
        breaker = self.breaker(call.host)
        # Closed, the breaker lets every attempt through: no need to read time.
        ticket = PASS if breaker.closed else breaker.acquire(now())
        if ticket == REJECTED:
            raise self._rejected(breaker, call)
        try:
            response = await self._next.handle(request, call)
        except FAILURE_EXCEPTIONS:
            breaker.record(ticket, True, now())
            raise
        except BaseException:
            breaker.release(ticket)
            raise
        failed = is_failure_status(response.status_code)
        breaker.record(ticket, failed, now())
        return response

    def handle_sync(self, request: httpx.Request, call: Call) -> httpx.Response:
        """The blocking twin of `handle`, the breaker behind a lock."""
        now = self._now
        lock = self._lock
        with lock:
            breaker = self.breaker(call.host)
            ticket = breaker.acquire(now())
            if ticket == REJECTED:
                raise self._rejected(breaker, call)
        try:
            response = self._next.handle_sync(request, call)
        except FAILURE_EXCEPTIONS:
            with lock:
                breaker.record(ticket, True, now())
            raise
        except BaseException:
            with lock:
                breaker.release(ticket)
            raise
        failed = is_failure_status(response.status_code)
        with lock:
            breaker.record(ticket, failed, now())
        return response

    def _new_breaker(self, on_transition: TransitionListener) -> CircuitBreaker:
        options = self._options
        return CircuitBreaker(
            failure_ratio=options.failure_ratio,
            minimum_throughput=options.minimum_throughput,
            sampling_duration=options.sampling_duration.total_seconds(),
            break_duration=options.break_duration.total_seconds(),
            on_transition=on_transition,
        )

    def _rejected(self, breaker: CircuitBreaker, call: Call) -> BrokenCircuitError:
        self._telemetry.rejection(call.method, call.host, "circuit_open")
        retry_after = breaker.retry_after(self._now())
        return BrokenCircuitError(
            f"{call.where()}: circuit open, request not sent", retry_after=retry_after
        )
