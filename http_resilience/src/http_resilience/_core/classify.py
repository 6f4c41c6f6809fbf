"""What counts as a failure, and which requests may be sent again.

Pure functions of a status, an exception or a request: no I/O, no time.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable, Iterable
from typing import Final, Literal, TypeAlias, cast

import httpx

from http_resilience._core.errors import (
    AttemptTimeoutError,
    BrokenCircuitError,
    RateLimitedError,
    TotalTimeoutError,
)
from http_resilience._core.nested import note_exhausted

__all__ = [
    "DEFAULT_FAILURE_STATUSES",
    "FAILURE_BY_STATUS",
    "FAILURE_EXCEPTIONS",
    "FINAL_MARK",
    "LOCAL_REFUSALS",
    "RETRY_AFTER_STATUSES",
    "SAFE_METHODS",
    "SELF_CAUSED_EXCEPTIONS",
    "UNSAFE_METHODS",
    "Backoff",
    "Classifier",
    "InvalidStatusError",
    "Outcome",
    "failure_table",
    "has_idempotency_key",
    "is_classified_failure",
    "is_failure",
    "is_failure_status",
    "is_invalid_status",
    "is_replayable",
    "mark_final",
    "may_retry",
]

SAFE_METHODS: Final = frozenset({"GET", "HEAD", "OPTIONS", "TRACE", "PUT", "DELETE"})
"""Methods sent again after a failure: safe or idempotent by their definition."""

UNSAFE_METHODS: Final = frozenset({"POST", "PATCH", "CONNECT"})
"""Methods sent again only when allowed: a second POST may charge a card twice.
A method in neither set (an extension method) is treated as unsafe."""

RETRY_AFTER_STATUSES: Final = frozenset({429, 503})
"""Statuses whose ``Retry-After`` the retry honours."""

FAILURE_EXCEPTIONS: Final = (httpx.TransportError, AttemptTimeoutError)
"""Exceptions of one attempt that count as its failure: retried, and seen by
the breaker, but for `SELF_CAUSED_EXCEPTIONS` and `TotalTimeoutError` (an
`httpx.TimeoutException` too, but the whole call's time, spent: final). Anything
else ends the call as it is."""

SELF_CAUSED_EXCEPTIONS: Final = (
    httpx.LocalProtocolError,
    httpx.UnsupportedProtocol,
    httpx.PoolTimeout,
)
"""Transport errors the client causes itself: a header h11 refuses to send, a
URL with no usable scheme, a wait for the client's own connection pool. No
byte reached the host, so they say nothing about it: raised at once, never
retried or hedged, and never breaker evidence."""


class InvalidStatusError(httpx.RemoteProtocolError):
    """A response whose status is outside 100-599: no HTTP answer at all.

    The host broke the protocol, and a second attempt would meet the same
    server: raised at once, never retried or hedged, and no breaker evidence
    (it is no sign of a host down or overloaded, which is what a breaker
    counts). An `httpx.RemoteProtocolError`, so code that catches those
    still does.

    Attributes:
        status_code: The status the server sent.
    """

    def __init__(
        self, message: str, *, request: httpx.Request, status_code: int
    ) -> None:
        super().__init__(message, request=request)
        self.status_code = status_code


# h11 refuses a status below 100 itself, as a protocol error of its own
# whose message (h11 0.14 to 0.16) names the range and the status it read.
_H11_BAD_STATUS = re.compile(r"status_code should be in range \[\d+, \d+\), not \d+")


def is_invalid_status(exc: BaseException) -> bool:
    """Whether `exc` reports a status outside 100-599.

    An `InvalidStatusError`, or the protocol error h11 raises for a status
    below 100 on the wire (``HTTP/1.1 099 ...``).

    Example:
        >>> is_invalid_status(httpx.RemoteProtocolError(
        ...     "InformationalResponse status_code should be in range"
        ...     " [100, 200), not 99"
        ... ))
        True
        >>> is_invalid_status(httpx.RemoteProtocolError("peer closed connection"))
        False
    """
    if isinstance(exc, InvalidStatusError):
        return True
    return isinstance(exc, httpx.RemoteProtocolError) and (
        _H11_BAD_STATUS.search(str(exc)) is not None
    )


LOCAL_REFUSALS: Final = (BrokenCircuitError, RateLimitedError)
"""What an attempt raises when a strategy refused to send it: an open breaker,
a limiter, a quota. It never left the process, so it charges no retry budget
and is no evidence against the host."""

_IDEMPOTENCY_KEY: Final = "idempotency-key"


def is_failure_status(status_code: int) -> bool:
    """Whether a response with this status is a failed attempt.

    408, 429 and every 5xx but 501 (Not Implemented) and 505 (HTTP Version Not
    Supported), which a second attempt cannot change.

    Example:
        >>> [is_failure_status(code) for code in (200, 404, 429, 501, 503)]
        [False, False, True, False, True]
    """
    if status_code < 500:
        return status_code == 429 or status_code == 408
    return status_code != 501 and status_code != 505


FAILURE_BY_STATUS: Final = tuple(is_failure_status(code) for code in range(600))
"""`is_failure_status` of every status an attempt may answer (0-599), as one lookup.

For the code that asks on every attempt; the pipeline's send has already
refused a status outside 100-599.
"""


DEFAULT_FAILURE_STATUSES: Final = frozenset(
    code for code in range(100, 600) if is_failure_status(code)
)
"""`is_failure_status` as a set: 408, 429 and the 5xx but 501 and 505."""

Outcome: TypeAlias = httpx.Response | Exception
"""What an attempt ended with: a response, or the exception it raised."""

Classifier: TypeAlias = Callable[[Outcome], bool | None]
"""Your own say on an attempt's outcome: True a failure, False not, None: let
the status set (or, for an exception, the built-in rule) decide."""

Backoff: TypeAlias = Literal["exponential", "linear", "constant"]
"""How the delay grows with each retry: ``base * 2**(n-1)``, ``base * n``,
``base``."""


FINAL_MARK: Final = "resilience_final"
"""Marks a failure this client already retried to exhaustion: final for the
layers outside it. An exception carries it as an attribute set to True, the
last response of such a call as a key of its ``extensions``. A retry outside
(the mediator's `is_transient_failure`) reads it by this name, without
importing this package."""


def mark_final(outcome: httpx.Response | BaseException) -> None:
    """Mark `outcome` with `FINAL_MARK`: retried here to exhaustion.

    The inbound request this call serves, if a `ResilienceContextMiddleware`
    keeps one, notes it too (`note_exhausted`): its failed answer says so.
    """
    note_exhausted()
    if isinstance(outcome, httpx.Response):
        outcome.extensions[FINAL_MARK] = True
        return
    # An exception class with slots cannot carry it: left unmarked.
    with contextlib.suppress(AttributeError):
        setattr(outcome, FINAL_MARK, True)


def failure_table(statuses: Iterable[int]) -> tuple[bool, ...]:
    """Whether each status 0-599 is in `statuses`, as one lookup."""
    codes = frozenset(statuses)
    return tuple(code in codes for code in range(600))


def is_classified_failure(
    outcome: Outcome, table: tuple[bool, ...], classify: Classifier | None
) -> bool:
    """Whether `outcome` is a failure: `classify` first, then the set or the rule.

    An exception the client caused itself (`SELF_CAUSED_EXCEPTIONS`), a
    refusal in this process (`LOCAL_REFUSALS`) or a status outside 100-599
    (`is_invalid_status`) is never one, whatever `classify` says: it says
    nothing about the host's health, and another attempt cannot change it.
    `classify` is never shown a cancellation (not an `Exception`).
    """
    if isinstance(outcome, _NEVER_FAILURES):
        return False
    if isinstance(outcome, httpx.RemoteProtocolError) and is_invalid_status(outcome):
        return False
    if classify is not None:
        said = classify(outcome)
        if said is not None:
            return bool(said)
    if isinstance(outcome, httpx.Response):
        return table[outcome.status_code]
    return isinstance(outcome, FAILURE_EXCEPTIONS) and not isinstance(
        outcome, TotalTimeoutError
    )


_NEVER_FAILURES: Final = (*SELF_CAUSED_EXCEPTIONS, *LOCAL_REFUSALS, InvalidStatusError)


def is_failure(outcome: httpx.Response | BaseException) -> bool:
    """Whether an attempt's outcome, a response or an exception, is a failure.

    An exception in `SELF_CAUSED_EXCEPTIONS` is not: the client caused it;
    nor is a status outside 100-599 (`is_invalid_status`): no attempt can
    change it.

    Example:
        >>> is_failure(httpx.ConnectError("refused"))
        True
        >>> is_failure(httpx.UnsupportedProtocol("ftp://"))
        False
        >>> is_failure(ValueError("a bug"))
        False
    """
    if isinstance(outcome, httpx.Response):
        return is_failure_status(outcome.status_code)
    return (
        isinstance(outcome, FAILURE_EXCEPTIONS)
        and not isinstance(outcome, SELF_CAUSED_EXCEPTIONS)
        and not isinstance(outcome, TotalTimeoutError)
        and not is_invalid_status(outcome)
    )


def has_idempotency_key(request: httpx.Request) -> bool:
    """Whether the request carries a non-empty ``Idempotency-Key`` header."""
    return any(value.strip() for value in request.headers.get_list(_IDEMPOTENCY_KEY))


def is_replayable(stream: object) -> bool:
    """Whether a request body can be sent again, whole.

    Bytes, text, JSON and form bodies (`httpx.ByteStream`, also what a read
    request holds) are; so is multipart whose files are bytes or seekable
    files, which httpx rewinds itself. Generators, async iterators and
    file-like streams passed as ``content`` are one-shot: a second attempt
    would raise `httpx.StreamConsumed` or send an empty body.

    Example:
        >>> is_replayable(httpx.Request("POST", "http://x", json={}).stream)
        True
        >>> chunks = iter([b"a", b"b"])
        >>> is_replayable(httpx.Request("POST", "http://x", content=chunks).stream)
        False
    """
    if isinstance(stream, httpx.ByteStream):
        return True
    fields: object = getattr(stream, "fields", None)
    if type(stream).__name__ != "MultipartStream" or not isinstance(fields, list):
        return False
    for field in cast("list[object]", fields):
        file: object = getattr(field, "file", None)
        if file is None or isinstance(file, bytes | str):
            continue
        seekable = getattr(file, "seekable", None)
        try:
            if not (callable(seekable) and seekable()):
                return False
        except Exception:
            return False
    return True


def may_retry(
    request: httpx.Request,
    *,
    retry_unsafe_methods: bool,
    stream: object = None,
    methods: frozenset[str] = SAFE_METHODS,
) -> bool:
    """Whether a failed attempt of `request` may be followed by another.

    Its method must be one of `methods` (by default `SAFE_METHODS`: safe or
    idempotent), or unsafe methods allowed, or the request must carry an
    ``Idempotency-Key``; and its body must be replayable (`is_replayable`).

    `stream` is the body as it was before the first attempt, when an attempt
    may have replaced it (a transport that reads a one-shot body leaves a
    buffered copy behind: the body it had was still one-shot).

    Example:
        >>> post = httpx.Request("POST", "http://x", json={"item": "book"})
        >>> may_retry(post, retry_unsafe_methods=False)
        False
        >>> post.headers["Idempotency-Key"] = "order-7"
        >>> may_retry(post, retry_unsafe_methods=False)
        True
    """
    if not (
        request.method in methods
        or retry_unsafe_methods
        or has_idempotency_key(request)
    ):
        return False
    return is_replayable(request.stream if stream is None else stream)
