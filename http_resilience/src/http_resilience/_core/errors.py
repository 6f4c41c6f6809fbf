"""The exceptions the HTTP pipeline raises; `ResilienceError` is their root."""

from __future__ import annotations

from functools import partial
from typing import Literal

import httpx

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

    Those that report what the network did are httpx's exceptions as well,
    so ``except httpx.HTTPError`` catches every failure that came from the
    network, ours included: `AttemptTimeoutError` and `TotalTimeoutError`
    (deadlines that passed while the host had the request) are
    `httpx.TimeoutException`, `AttemptStalledError` (a body that stopped
    arriving) an `httpx.ReadTimeout`. An httpx timeout the wrapped transport
    raises before a deadline of ours passed reaches the caller as httpx
    raised it (an `httpx.ConnectTimeout` stays one), a note on it naming the
    attempt.

    Refusals made in this process are not httpx's: `BrokenCircuitError` and
    `RateLimitedError` (nothing was sent), `ResponseTooLargeError` (our own
    bound on a buffered body) and `ResilienceLayerError` (a configuration
    mistake). Catch `ResilienceError` for those.

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


class AttemptStalledError(ResilienceError, httpx.ReadTimeout):
    """A response body stopped arriving for longer than its attempt had.

    Raised while the body is read after the call returned (without
    `buffer_responses`), in place of the read timeout that found it: a
    download that keeps making progress is never cut, one that stalls is not
    left hanging. It is not retried: the call had already answered. An
    `httpx.ReadTimeout`, so code that catches httpx's timeouts still does.

    Args:
        message: What stalled, and for how long.
        request: The request whose response stalled; httpx's client sets it
            when it reads the body.
    """

    def __init__(self, message: str, *, request: httpx.Request | None = None) -> None:
        super().__init__(message, request=request)


class ResponseTooLargeError(ResilienceError):
    """A buffered response body passed `max_buffered_bytes`: not retried.

    Attributes:
        limit: The bound, in bytes, that the body went past.
    """

    def __init__(self, message: str, *, limit: int) -> None:
        super().__init__(message)
        self.limit = limit

    def __reduce__(self) -> tuple[object, ...]:
        """Pickle with `limit`, which the class needs and `args` lacks."""
        return (partial(type(self), limit=self.limit), self.args, vars(self))


class _PipelineTimeout(ResilienceError, httpx.TimeoutException):
    """A deadline of the pipeline's own passed: what it was, and the time spent."""

    def __init__(
        self,
        message: str,
        *,
        request: httpx.Request | None = None,
        elapsed: float | None = None,
        timeout: float | None = None,
    ) -> None:
        super().__init__(message, request=request)
        self.elapsed = elapsed
        self.timeout = timeout


class AttemptTimeoutError(_PipelineTimeout):
    """One attempt took longer than `attempt_timeout` (it counts as a failure).

    An `httpx.TimeoutException` as well: ``except httpx.TimeoutException``
    and ``except httpx.HTTPError`` catch it. Its ``request`` is the call's
    (set by the transport, or by httpx's client).

    Args:
        message: Which attempt, the time it took and the timeout.
        request: The call's request.
        elapsed: Seconds the attempt ran, as measured.
        timeout: The attempt's timeout, in seconds.

    Attributes:
        elapsed: Seconds the attempt ran, as measured; None when not known.
        timeout: The timeout that passed, in seconds; None when not known.
    """


class TotalTimeoutError(_PipelineTimeout):
    """The whole call, attempts and waits included, passed `total_request_timeout`.

    An `httpx.TimeoutException` as well, as `AttemptTimeoutError` is; it is
    never retried, nor counted against the host.

    Args:
        message: The time the call took and the timeout.
        request: The call's request.
        elapsed: Seconds the call ran, as measured.
        timeout: The call's total timeout (or the time a deadline scope left
            it), in seconds.

    Attributes:
        elapsed: Seconds the call ran, as measured; None when not known.
        timeout: The timeout that passed, in seconds; None when not known.
    """


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
