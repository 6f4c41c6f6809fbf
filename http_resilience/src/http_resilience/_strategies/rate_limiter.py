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
from typing import ClassVar, Final

import httpx
from pydantic import BaseModel, Field

from http_resilience._core.builder import BuildContext, Placement
from http_resilience._core.clock import Clock, reader
from http_resilience._core.errors import RateLimitedError
from http_resilience._core.fields import FROZEN, Count, Ratio
from http_resilience._core.host_registry import DEFAULT_MAXIMUM_HOSTS
from http_resilience._core.pipeline import AsyncHandler, Call, SyncHandler
from http_resilience._core.telemetry import Telemetry
from http_resilience._primitives.durations import MAX_DURATION

__all__ = [
    "AsyncRateLimiter",
    "RateLimiterOptions",
    "RateLimiterStrategy",
    "SyncRateLimiter",
    "TokenBucket",
]

REFUSED: Final = -1.0

_SLOWEST: Final = 1 / MAX_DURATION.total_seconds()
"""One permit every 24 days: a slower rate would make a queued request wait
longer than any runtime can."""
"""What `TokenBucket.take` answers when the request may neither go nor wait."""


class TokenBucket:
    """Permits at `rate` a second, at most `burst` saved up, `queue_limit` reserved.

    Thread-safe (one lock, held briefly).

    Args:
        rate: Permits a second; more than 0.
        burst: Permits that may be saved up, and spent at once; at least 1.
        queue_limit: Permits that may be reserved ahead of time.
        now: When the bucket is made (it starts full).

    Example:
        >>> bucket = TokenBucket(rate=2.0, burst=1, queue_limit=1, now=0.0)
        >>> bucket.take(0.0), bucket.take(0.0), bucket.take(0.0)
        (0.0, 0.5, -1.0)
    """

    __slots__ = ("_burst", "_floor", "_last", "_lock", "_rate", "_tokens")

    def __init__(
        self, *, rate: float, burst: int, queue_limit: int, now: float
    ) -> None:
        self._rate = rate
        self._burst = float(burst)
        self._floor = -float(queue_limit)
        self._tokens = float(burst)
        self._last = now
        self._lock = threading.Lock()

    def take(self, now: float, limit: float = float("inf")) -> float:
        """Take a permit at `now`: 0.0 to go now, the seconds to wait, or `REFUSED`.

        A wait is a reservation: the permit is the caller's once it has
        waited. A wait that would end after `limit` (seconds from now) is
        `REFUSED` and reserves nothing.
        """
        with self._lock:
            tokens = self._refill(now)
            if tokens >= 1.0:
                self._tokens = tokens - 1.0
                return 0.0
            if tokens - 1.0 < self._floor:
                return REFUSED
            wait = (1.0 - tokens) / self._rate
            if wait > limit:
                return REFUSED
            self._tokens = tokens - 1.0
            return wait

    def next_permit(self, now: float) -> float:
        """Seconds until a permit is free (0.0 if one is), reserving nothing."""
        with self._lock:
            tokens = self._refill(now)
        return 0.0 if tokens >= 1.0 else (1.0 - tokens) / self._rate

    def give_back(self, now: float) -> None:
        """Hand back a permit reserved but not used (a wait given up)."""
        with self._lock:
            self._tokens = min(self._refill(now) + 1.0, self._burst)

    def _refill(self, now: float) -> float:
        elapsed = now - self._last
        if elapsed > 0:
            self._last = now
            self._tokens = min(self._tokens + elapsed * self._rate, self._burst)
        return self._tokens


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
            after = bucket.next_permit(now)
            self._telemetry.rejection(call.method, call.host, "rate_limit")
            raise RateLimitedError(
                f"{call.where()}: refused, the rate limit is reached; "
                f"the next permit in {after:.3g} s",
                retry_after=after,
                reason="rate_limit",
            )
        return bucket, wait


class AsyncRateLimiter:
    """`RateLimiterStrategy` on an event loop: a reserved permit is awaited."""

    __slots__ = ("_next", "strategy")

    def __init__(self, next: AsyncHandler, strategy: RateLimiterStrategy) -> None:
        self._next = next
        self.strategy = strategy

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


class SyncRateLimiter:
    """`RateLimiterStrategy` for threads: a reserved permit is waited for, blocking."""

    __slots__ = ("_next", "strategy")

    def __init__(self, next: SyncHandler, strategy: RateLimiterStrategy) -> None:
        self._next = next
        self.strategy = strategy

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


class RateLimiterOptions(BaseModel):
    """A time-based rate limiter for a custom pipeline (a token bucket).

    Attributes:
        permits_per_second: Requests a second, on average; at least one
            every 24 days (the longest wait every runtime takes).
        burst: Requests that may go at once after a quiet spell, at least 1.
            Default 1: evenly spaced.
        per_host: One bucket per scheme, host and port (at most
            `maximum_hosts`, least recently used forgotten); False shares one.
            Default True.
        queue_limit: Requests that may wait for a permit to come (never past
            the deadline of a timeout around the limiter); beyond it a request
            is refused at once with `RateLimitedError`. Default 0.
        maximum_hosts: The per-host buckets kept. Default 1024.

    Raises:
        pydantic.ValidationError: On construction, naming every invalid field.

    Example:
        >>> RateLimiterOptions(permits_per_second=20, burst=5).queue_limit
        0
    """

    model_config = FROZEN

    permits_per_second: Ratio = Field(ge=_SLOWEST, allow_inf_nan=False)
    burst: Count = Field(default=1, ge=1)
    per_host: bool = True
    queue_limit: Count = Field(default=0, ge=0)
    maximum_hosts: Count = Field(default=DEFAULT_MAXIMUM_HOSTS, ge=1)

    is_deadline: ClassVar[bool] = False
    repeats: ClassVar[bool] = False

    @property
    def label(self) -> str:
        """``"rate limiter 20/s"``."""
        return f"rate limiter {self.permits_per_second:g}/s"

    @property
    def waits_outside_attempts(self) -> bool:
        """A queued request waits for its permit outside any attempt."""
        return self.queue_limit > 0

    def will_repeat(self, request: httpx.Request) -> bool:
        """Never: a limiter sends nothing twice."""
        return False

    def build_async(
        self, next: AsyncHandler, context: BuildContext, place: Placement
    ) -> AsyncRateLimiter:
        """This transport's buckets, around `next`."""
        return AsyncRateLimiter(
            next,
            RateLimiterStrategy(
                options=self, clock=context.clock, telemetry=context.telemetry
            ),
        )

    def build_sync(
        self, next: SyncHandler, context: BuildContext, place: Placement
    ) -> SyncRateLimiter:
        """This transport's buckets, around `next`."""
        return SyncRateLimiter(
            next,
            RateLimiterStrategy(
                options=self, clock=context.clock, telemetry=context.telemetry
            ),
        )
