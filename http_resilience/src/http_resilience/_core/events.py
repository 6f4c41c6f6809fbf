"""Events the HTTP pipeline reports: one frozen dataclass per kind, to listeners.

No event carries header values, bodies, URL userinfo or query strings: the
request is described by its client name, method, and normalised host only.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Final, Literal, TypeAlias

from http_resilience._core.degraded import DegradationSource

__all__ = [
    "CLOSED",
    "HALF_OPEN",
    "OPEN",
    "AttemptEvent",
    "BaselineEvent",
    "BreakerEvent",
    "BreakerState",
    "ConcurrencyLimitEvent",
    "HedgeEvent",
    "HttpEvent",
    "HttpEventListener",
    "NestedRetryEvent",
    "RejectionEvent",
    "RejectionReason",
    "RequestEvent",
    "RetryEvent",
    "TimeoutEvent",
    "TripRule",
]


@dataclass(frozen=True, slots=True)
class AttemptEvent:
    """One physical attempt ended.

    Attributes:
        client: The client's name.
        method: The HTTP method.
        host: ``scheme://host:port``, normalised; no path, query or userinfo.
        attempt: 1 for the first attempt of the logical call.
        outcome: The status code as a string ("200", "503"), or the failure's
            type name ("ConnectError", "AttemptTimeoutError").
        duration: Seconds the attempt took.
    """

    client: str
    method: str
    host: str
    attempt: int
    outcome: str
    duration: float


@dataclass(frozen=True, slots=True)
class RetryEvent:
    """A retry is about to wait.

    Attributes:
        attempt: The attempt that failed.
        delay: Seconds before the next attempt.
        reason: The status code as a string, or the failure's type name.
    """

    client: str
    method: str
    host: str
    attempt: int
    delay: float
    reason: str


@dataclass(frozen=True, slots=True)
class BreakerEvent:
    """A host's circuit breaker changed state."""

    client: str
    host: str
    previous: Literal["closed", "open", "half_open"]
    current: Literal["closed", "open", "half_open"]


TripRule: TypeAlias = Literal["failure_ratio", "baseline", "slow_calls"]
"""The rule that opened a breaker whose baseline was armed: the configured
`failure_ratio`, the host's own error rate times `breaker_baseline_factor`, or
the slow-call rule."""


@dataclass(frozen=True, slots=True)
class BaselineEvent:
    """A host's baseline armed, was disarmed by a trip, or moved its attempt timeout.

    Sent when what the adaptive rules read changes state, not per attempt:
    when the baseline has learned `baseline_min_samples` attempts (armed),
    when a trip disarms it (`tripped` names the rule), and while armed when
    the attempt timeout it sets moves (by a latency bucket, 19 %).

    Attributes:
        client: The client's name.
        host: ``scheme://host:port``; ``"*"`` for the breaker every host shares.
        armed: Whether the adaptive rules read the baseline now.
        p50: The host's median latency of a successful attempt, in seconds.
        p95: Its 95th percentile.
        error_rate: The host's own share of failed attempts.
        failure_threshold: The failure ratio that opens the breaker now.
        attempt_timeout: The most seconds an attempt to the host is given
            now; None: the configured `attempt_timeout` (not armed, or the
            rule is off).
        tripped: When a trip disarmed the baseline, the rule that opened
            the breaker; else None.
    """

    client: str
    host: str
    armed: bool
    p50: float
    p95: float
    error_rate: float
    failure_threshold: float
    attempt_timeout: float | None
    tripped: TripRule | None = None


@dataclass(frozen=True, slots=True)
class ConcurrencyLimitEvent:
    """A host's adaptive concurrency limit moved (at most once per sample window).

    Attributes:
        client: The client's name.
        host: ``scheme://host:port``; ``"*"`` for the limit every host shares.
        previous: The limit before.
        limit: The limit now.
    """

    client: str
    host: str
    previous: int
    limit: int


RejectionReason: TypeAlias = Literal[
    "circuit_open", "concurrency_limit", "quota", "retry_budget", "rate_limit"
]
"""Why an attempt was not sent: an open breaker, the concurrency limiter, a
published quota, the retry budget, a rate limiter."""


@dataclass(frozen=True, slots=True)
class RejectionEvent:
    """An attempt refused in this process, never sent.

    Attributes:
        reason: ``"circuit_open"`` (the host's breaker), ``"concurrency_limit"``
            (the limiter), ``"quota"`` (the host's published quota),
            ``"retry_budget"`` (a retry or a hedged copy the budget refused:
            the call ends with what its last attempt gave), ``"rate_limit"``
            (a rate limiter).
    """

    client: str
    method: str
    host: str
    reason: RejectionReason


@dataclass(frozen=True, slots=True)
class TimeoutEvent:
    """An attempt or the whole call timed out."""

    client: str
    method: str
    host: str
    kind: Literal["attempt", "total"]
    after: float


@dataclass(frozen=True, slots=True)
class HedgeEvent:
    """A hedged attempt is sent beside the attempts still in flight.

    Attributes:
        attempt: The hedged attempt's number: 2 for the first hedge.
        after: Seconds since the call's first attempt was sent.
        reason: ``"delay"`` when the attempt before it went `delay` without an
            answer; else that attempt's failure: its status code as a string,
            or the failure's type name.
    """

    client: str
    method: str
    host: str
    attempt: int
    after: float
    reason: str


@dataclass(frozen=True, slots=True)
class NestedRetryEvent:
    """A call failed while its caller is retrying the request it serves.

    Attributes:
        caller_attempt: The caller's attempt this work serves (2 or more).
        suppressed: True when this call therefore made no retry of its own
            (``nested_retries="suppress"``); False when it retries as usual
            and only reports (``"report"``).
    """

    client: str
    method: str
    host: str
    caller_attempt: int
    suppressed: bool


@dataclass(frozen=True, slots=True)
class RequestEvent:
    """A logical call ended: all its attempts, waits and refusals behind it.

    Sent only to listeners (never logged), after the events of the call's
    attempts, when the transport hands back the response's head or raises.

    Attributes:
        client: The client's name.
        method: The HTTP method.
        host: ``scheme://host:port``, normalised; no path, query or userinfo.
        outcome: The status code of the response returned, as a string
            ("200", "503"), or the type name of the exception raised
            ("ConnectError", "BrokenCircuitError", "CancelledError").
        duration: Seconds from the call's start to its end, on the pipeline's
            clock; the body is read after it.
        rejected: True when the call ended refused in this process (an open
            breaker, a limiter, a spent quota): `BrokenCircuitError` or
            `RateLimitedError`.
        degraded: Where the answer came from when the call ended in a
            failure and a stale cache or a fallback answered in its place
            (``"stale-cache"``, ``"fallback"``): a logical success that
            degraded, its `outcome` the status of the answer given. None
            when the host answered (or the call failed).
    """

    client: str
    method: str
    host: str
    outcome: str
    duration: float
    rejected: bool = False
    degraded: DegradationSource | None = None


HttpEvent: TypeAlias = (
    AttemptEvent
    | RetryEvent
    | HedgeEvent
    | NestedRetryEvent
    | BreakerEvent
    | BaselineEvent
    | ConcurrencyLimitEvent
    | RejectionEvent
    | TimeoutEvent
    | RequestEvent
)
HttpEventListener: TypeAlias = Callable[[HttpEvent], None]
"""Called with every event, synchronously; it must be quick and must not raise."""

BreakerState: TypeAlias = Literal["closed", "open", "half_open"]

CLOSED: Final = "closed"
OPEN: Final = "open"
HALF_OPEN: Final = "half_open"
