"""The exceptions the HTTP pipeline raises; `ResilienceError` is their root."""

from __future__ import annotations

from typing import Literal

__all__ = [
    "AttemptStalledError",
    "AttemptTimeoutError",
    "BrokenCircuitError",
    "RateLimitedError",
    "ResilienceError",
    "ResilienceLayerError",
    "ResponseTooLargeError",
    "TotalTimeoutError",
]


class ResilienceError(Exception):
    """Root of every exception `http_resilience` raises on its own account.

    Messages name the client, the method and the host, never header values,
    bodies, URL userinfo or query strings.
    """


class BrokenCircuitError(ResilienceError):
    """The host's circuit is open: the request never left the process.

    Attributes:
        retry_after: Seconds until the breaker lets a probe through, when known.
    """

    def __init__(self, message: str, *, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class AttemptStalledError(ResilienceError):
    """A response body stopped arriving for longer than its attempt had.

    Raised while the body is read after the call returned (without
    `buffer_responses`), in place of the read timeout that found it: a
    download that keeps making progress is never cut, one that stalls is not
    left hanging. It is not retried: the call had already answered.
    """


class ResponseTooLargeError(ResilienceError):
    """A buffered response body passed `max_buffered_bytes`: not retried.

    Attributes:
        limit: The bound, in bytes, that the body went past.
    """

    def __init__(self, message: str, *, limit: int) -> None:
        super().__init__(message)
        self.limit = limit


class AttemptTimeoutError(ResilienceError):
    """One attempt took longer than `attempt_timeout` (it counts as a failure)."""


class TotalTimeoutError(ResilienceError):
    """The whole call, attempts and waits included, passed `total_request_timeout`."""


class RateLimitedError(ResilienceError):
    """Refused before sending: a limiter is full, or the published quota is spent.

    Attributes:
        retry_after: Seconds to wait before trying again, when known.
        reason: ``"concurrency_limit"`` (the concurrency limiter: this process
            is overloaded), ``"rate_limit"`` (the rate limiter: no permit
            this second) or ``"quota"`` (the host's published quota is
            spent).
    """

    def __init__(
        self,
        message: str,
        *,
        retry_after: float | None = None,
        reason: Literal["concurrency_limit", "rate_limit", "quota"] = (
            "concurrency_limit"
        ),
    ) -> None:
        super().__init__(message)
        self.retry_after = retry_after
        self.reason: Literal["concurrency_limit", "rate_limit", "quota"] = reason


class ResilienceLayerError(ResilienceError):
    """A second resilience layer was stacked on one client (retries would multiply)."""
