"""The retry's decision: which delay before the next attempt, or stop.

Pure: given the attempt that failed, its response, the time and the deadline,
it answers a delay or None.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

import httpx

from http_resilience._core.classify import (
    RETRY_AFTER_STATUSES,
    SAFE_METHODS,
    Backoff,
    may_retry,
)
from http_resilience._core.clock import utc_now
from http_resilience._core.retry_after import parse_retry_after
from http_resilience._primitives.backoff import exponential, jitter_factor
from http_resilience._primitives.testing_mode import retries_allowed

__all__ = ["RetryDecision"]


@dataclass(frozen=True, slots=True, kw_only=True)
class RetryDecision:
    """Whether a failed attempt is followed by another, and after how long.

    The delay before retry n (n = the attempt that failed, from 1) is
    ``base_delay * 2**(n-1)`` times a jitter factor in [0.5, 1); a 429 or 503
    with a valid ``Retry-After`` asks for its own wait instead. A delay that
    would reach the deadline ends the call: the wait is never shortened.

    Args:
        max_retry_attempts: Retries after the first attempt.
        base_delay: Seconds before the first retry.
        retry_unsafe_methods: Retry POST, PATCH and CONNECT as well.
        random: A float in [0, 1) per call, for the jitter.
        wall_clock: The present, to read a ``Retry-After`` date when the
            response has no valid ``Date``.
        backoff: The delays' curve: exponential, linear or constant.
        max_delay: The cap on a delay before jitter, seconds.
        retry_methods: The methods retried without `retry_unsafe_methods`.

    Example:
        >>> decision = RetryDecision(
        ...     max_retry_attempts=3, base_delay=2.0, retry_unsafe_methods=False,
        ...     random=lambda: 0.0,
        ... )
        >>> [decision.delay(n, None) for n in (1, 2, 3)]
        [1.0, 2.0, 4.0]
        >>> decision.next_delay(1, None, now=0.0, deadline=30.0)
        1.0
        >>> decision.next_delay(4, None, now=0.0, deadline=30.0) is None
        True
    """

    max_retry_attempts: int
    base_delay: float
    retry_unsafe_methods: bool
    random: Callable[[], float]
    wall_clock: Callable[[], datetime] = utc_now
    backoff: Backoff = "exponential"
    max_delay: float = math.inf
    retry_methods: frozenset[str] = SAFE_METHODS

    def will_retry(self, request: httpx.Request, stream: object = None) -> bool:
        """Whether a failed attempt of `request` may be sent again at all.

        `stream`: the body before the first attempt, if it may have changed.
        """
        return self.max_retry_attempts > 0 and may_retry(
            request,
            retry_unsafe_methods=self.retry_unsafe_methods,
            stream=stream,
            methods=self.retry_methods,
        )

    def delay(self, attempt: int, response: httpx.Response | None) -> float:
        """Seconds to wait after failed attempt `attempt` (from 1).

        Raises:
            ValueError: The random source returned a value outside [0, 1).
        """
        if response is not None and response.status_code in RETRY_AFTER_STATUSES:
            values = response.headers.get_list("retry-after")
            if values:
                asked = parse_retry_after(
                    values,
                    now=self.wall_clock(),
                    date=response.headers.get_list("date"),
                )
                if asked is not None:
                    return asked
        jitter = jitter_factor(self.random())
        return min(self.curve(attempt), self.max_delay) * jitter

    def curve(self, attempt: int) -> float:
        """The delay after failed attempt `attempt` before jitter and the cap."""
        if self.backoff == "constant":
            return self.base_delay
        if self.backoff == "linear":
            return self.base_delay * max(attempt, 1)
        return exponential(self.base_delay, attempt)

    def allows(self, attempt: int, wait: float, *, now: float, deadline: float) -> bool:
        """Whether another attempt may follow attempt `attempt` after `wait` s.

        Within `max_retry_attempts` (fewer under `set_testing`'s cap), and the
        wait ending before `deadline`.
        """
        return (
            attempt <= retries_allowed(self.max_retry_attempts)
            and now + wait < deadline
        )

    def next_delay(
        self,
        attempt: int,
        response: httpx.Response | None,
        *,
        now: float,
        deadline: float,
    ) -> float | None:
        """The wait before the next attempt, or None to end the call now.

        None when the `max_retry_attempts` retries are spent, or when the wait
        would reach `deadline` (seconds on the same clock as `now`).
        """
        if attempt > retries_allowed(self.max_retry_attempts):
            return None
        wait = self.delay(attempt, response)
        return wait if self.allows(attempt, wait, now=now, deadline=deadline) else None
