"""The retry's decision: which delay before the next attempt, or stop.

Pure: given the attempt that failed, its response, the time and the deadline,
it answers a delay or None.
"""

from __future__ import annotations

import math
from collections.abc import Callable
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

    __slots__ = (
        "_backoff",
        "_base",
        "_ceiling",
        "_max",
        "_methods",
        "_random",
        "_unsafe",
        "_wall_clock",
    )

    def __init__(
        self,
        *,
        max_retry_attempts: int,
        base_delay: float,
        retry_unsafe_methods: bool,
        random: Callable[[], float],
        wall_clock: Callable[[], datetime] = utc_now,
        backoff: Backoff = "exponential",
        max_delay: float = math.inf,
        retry_methods: frozenset[str] = SAFE_METHODS,
    ) -> None:
        self._max = max_retry_attempts
        self._base = base_delay
        self._unsafe = retry_unsafe_methods
        self._random = random
        self._wall_clock = wall_clock
        self._backoff: Backoff = backoff
        self._ceiling = max_delay
        self._methods = retry_methods

    def will_retry(self, request: httpx.Request, stream: object = None) -> bool:
        """Whether a failed attempt of `request` may be sent again at all.

        `stream`: the body before the first attempt, if it may have changed.
        """
        return self._max > 0 and may_retry(
            request,
            retry_unsafe_methods=self._unsafe,
            stream=stream,
            methods=self._methods,
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
                    now=self._wall_clock(),
                    date=response.headers.get_list("date"),
                )
                if asked is not None:
                    return asked
        jitter = jitter_factor(self._random())
        return min(self.curve(attempt), self._ceiling) * jitter

    def curve(self, attempt: int) -> float:
        """The delay after failed attempt `attempt` before jitter and the cap."""
        if self._backoff == "constant":
            return self._base
        if self._backoff == "linear":
            return self._base * max(attempt, 1)
        return exponential(self._base, attempt)

    def allows(self, attempt: int, wait: float, *, now: float, deadline: float) -> bool:
        """Whether another attempt may follow attempt `attempt` after `wait` s.

        Within `max_retry_attempts` (fewer under `set_testing`'s cap), and the
        wait ending before `deadline`.
        """
        return attempt <= retries_allowed(self._max) and now + wait < deadline

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
        if attempt > retries_allowed(self._max):
            return None
        wait = self.delay(attempt, response)
        return wait if self.allows(attempt, wait, now=now, deadline=deadline) else None
