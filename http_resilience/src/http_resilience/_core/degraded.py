"""A degraded answer: what marks it, what may cause it, how a caller reads it.

A fallback or the stale cache answers in place of a failure. The response
they hand back carries a `Degradation` under ``extensions["http_resilience.
degraded"]`` (`DEGRADED_EXTENSION`), read with `degradation`; the transport's
`RequestEvent` copies its source into ``degraded``, so telemetry counts the
call as a logical success that degraded, apart from its physical attempts.

What may degrade (`is_degradable`) is an outage or a refusal, never a
mistake: a failure status (408, 429, the 5xx but 501 and 505), a transport
failure or a timeout, an open breaker, a limiter or a quota that refused. A
failure the client caused itself (a header it cannot send, a URL with no
usable scheme, its own pool's wait), a status outside 100-599, a response
over a bound of ours, a second resilience layer, a bug (any other exception)
and a cancellation never degrade: a stale answer would hide them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal, TypeAlias

import httpx

from http_resilience._core.classify import (
    LOCAL_REFUSALS,
    SELF_CAUSED_EXCEPTIONS,
    InvalidStatusError,
    is_failure_status,
    is_invalid_status,
)

__all__ = [
    "DEGRADED_EXTENSION",
    "Degradation",
    "DegradationSource",
    "degradation",
    "is_degradable",
    "mark_degraded",
    "outcome_name",
]

DEGRADED_EXTENSION: Final = "http_resilience.degraded"
"""The response extension that holds a degraded answer's `Degradation`."""

DegradationSource: TypeAlias = Literal["stale-cache", "fallback"]
"""Where a degraded answer came from: the stale cache, or a fallback function."""


@dataclass(frozen=True, slots=True)
class Degradation:
    """How a response degraded: its source, the failure it stands in for, its age.

    Found on a degraded response with `degradation(response)`.

    Attributes:
        source: ``"stale-cache"`` (the last good answer, served again by
            `ResiliencePipeline.add_stale_cache`) or ``"fallback"`` (a
            function given to `ResiliencePipeline.add_fallback`).
        reason: The failure it replaced: the status code as a string
            (``"503"``), or the exception's type name (``"ConnectError"``,
            ``"BrokenCircuitError"``).
        age: For a stale answer, its age in seconds: since the host gave it,
            plus the ``Age`` it came with (its ``Age`` header holds the
            same, in whole seconds); None for a fallback's.

    Example:
        >>> Degradation("stale-cache", "503", 12.5).age
        12.5
    """

    source: DegradationSource
    reason: str
    age: float | None = None


def degradation(response: httpx.Response) -> Degradation | None:
    """How `response` degraded, or None: the host answered it itself.

    Example:
        >>> degradation(httpx.Response(200)) is None
        True
    """
    found = response.extensions.get(DEGRADED_EXTENSION)
    return found if isinstance(found, Degradation) else None


def mark_degraded(response: httpx.Response, degraded: Degradation) -> httpx.Response:
    """`response`, its extensions holding `degraded`; returned."""
    response.extensions[DEGRADED_EXTENSION] = degraded
    return response


_NEVER: Final = (*SELF_CAUSED_EXCEPTIONS, InvalidStatusError)
_OUTAGES: Final = (httpx.TransportError, *LOCAL_REFUSALS)


def is_degradable(outcome: httpx.Response | BaseException) -> bool:
    """Whether a call that ended with `outcome` may be answered degraded.

    Example:
        >>> is_degradable(httpx.Response(503)), is_degradable(httpx.Response(404))
        (True, False)
        >>> is_degradable(httpx.ConnectError("refused")), is_degradable(KeyError())
        (True, False)
    """
    if isinstance(outcome, httpx.Response):
        return is_failure_status(outcome.status_code)
    if not isinstance(outcome, _OUTAGES) or isinstance(outcome, _NEVER):
        return False
    return not (
        isinstance(outcome, httpx.RemoteProtocolError) and is_invalid_status(outcome)
    )


def outcome_name(outcome: httpx.Response | BaseException) -> str:
    """The status code as a string, or the exception's type name."""
    if isinstance(outcome, httpx.Response):
        return str(outcome.status_code)
    return type(outcome).__name__
