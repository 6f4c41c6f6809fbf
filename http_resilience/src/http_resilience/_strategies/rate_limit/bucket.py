"""The rate limiter's decision: a token bucket on plain numbers.

`TokenBucket` holds `burst` permits at most, refilled at `rate` a second; it
is told the time (`now`) and answers a wait, or `REFUSED`.
"""

from __future__ import annotations

import threading
from typing import Final

__all__ = ["REFUSED", "TokenBucket"]

REFUSED: Final = -1.0
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
