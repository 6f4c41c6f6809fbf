"""The time-based rate limiter: at most so many requests a second, per host or shared.

`TokenBucket` is the decision, on plain numbers: `burst` permits at most,
refilled at `rate` a second. A request takes one; when none is left it may
reserve the next one to come, if fewer than `queue_limit` are reserved ahead
of it, and wait until it is due (on the pipeline's clock, never past the
call's deadline); otherwise it is refused at once with `RateLimitedError`
(reason ``"rate_limit"``), whose ``retry_after`` says when a permit comes. A
reservation given up (a cancelled or timed-out wait) is handed back.

Not in the standard pipeline: add it with `ResiliencePipeline.add_rate_limiter`.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import TYPE_CHECKING

import httpx

from http_resilience._core.call import Call
from http_resilience._core.clock import Clock, reader
from http_resilience._core.drive import AsyncDriver, SyncDriver
from http_resilience._core.refusal import rate_limited
from http_resilience._core.telemetry import Telemetry
from http_resilience._strategies.rate_limit.bucket import REFUSED, TokenBucket

if TYPE_CHECKING:
    from http_resilience._strategies.rate_limit.options import RateLimiterOptions

__all__ = ["AsyncRateLimiter", "RateLimiterStrategy", "SyncRateLimiter"]


class RateLimiterStrategy:
    """Which bucket a call takes from, and how a refusal is reported.

    Args:
        options: The rate, the burst, the queue, per host or shared.
        clock: The buckets' time and the waits.
        telemetry: Where refusals are reported.
    """

    __slots__ = (
        "_buckets",
        "_lock",
        "_maximum",
        "_new",
        "_shared",
        "_telemetry",
        "clock",
        "now",
    )

    def __init__(
        self, *, options: RateLimiterOptions, clock: Clock, telemetry: Telemetry
    ) -> None:
        self.clock = clock
        self.now = now = reader(clock)
        self._telemetry = telemetry
        self._maximum = options.maximum_hosts
        rate, burst, queue = (
            options.permits_per_second,
            options.burst,
            options.queue_limit,
        )

        def new() -> TokenBucket:
            return TokenBucket(rate=rate, burst=burst, queue_limit=queue, now=now())

        self._new: Callable[[], TokenBucket] = new
        self._shared = None if options.per_host else new()
        self._buckets: OrderedDict[str, TokenBucket] = OrderedDict()
        self._lock = threading.Lock()

    def bucket(self, host: str) -> TokenBucket:
        """The bucket of host `host` (made on first use), or the shared one."""
        if self._shared is not None:
            return self._shared
        with self._lock:
            buckets = self._buckets
            found = buckets.get(host)
            if found is None:
                if len(buckets) >= self._maximum:
                    buckets.popitem(last=False)
                found = buckets[host] = self._new()
            else:
                buckets.move_to_end(host)
            return found

    def take(self, call: Call) -> tuple[TokenBucket, float]:
        """A permit for `call`: its bucket and the wait; raises when refused.

        Raises:
            RateLimitedError: No permit now, and none may be waited for (the
                queue is full, or the wait would pass the call's deadline).
        """
        bucket = self.bucket(call.host)
        now = self.now()
        wait = bucket.take(now, call.deadline - now)
        if wait == REFUSED:
            raise rate_limited(
                self._telemetry,
                call,
                "rate_limit",
                "the rate limit is reached",
                "the next permit in",
                bucket.next_permit(now),
            )
        return bucket, wait


class AsyncRateLimiter(AsyncDriver[RateLimiterStrategy]):
    """`RateLimiterStrategy` on an event loop: a reserved permit is awaited."""

    __slots__ = ()

    async def handle(self, request: httpx.Request, call: Call) -> httpx.Response:
        """Take a permit, waiting for a reserved one, then run the inside."""
        strategy = self.strategy
        bucket, wait = strategy.take(call)
        if wait > 0.0:
            try:
                await strategy.clock.sleep(wait)
            except BaseException:
                bucket.give_back(strategy.now())
                raise
        return await self._next.handle(request, call)


class SyncRateLimiter(SyncDriver[RateLimiterStrategy]):
    """`RateLimiterStrategy` for threads: a reserved permit is waited for, blocking."""

    __slots__ = ()

    def handle_sync(self, request: httpx.Request, call: Call) -> httpx.Response:
        """Take a permit, waiting for a reserved one, then run the inside."""
        strategy = self.strategy
        bucket, wait = strategy.take(call)
        if wait > 0.0:
            try:
                strategy.clock.sleep_sync(wait)
            except BaseException:
                bucket.give_back(strategy.now())
                raise
        return self._next.handle_sync(request, call)
