"""What counts as a failure, and which requests may be sent again.

Pure functions of a status, an exception or a request: no I/O, no time.
"""

from __future__ import annotations

from typing import Final, cast

import httpx

from http_resilience._core.errors import (
    AttemptTimeoutError,
    BrokenCircuitError,
    RateLimitedError,
)

__all__ = [
    "FAILURE_BY_STATUS",
    "FAILURE_EXCEPTIONS",
    "LOCAL_REFUSALS",
    "RETRY_AFTER_STATUSES",
    "SAFE_METHODS",
    "SELF_CAUSED_EXCEPTIONS",
    "UNSAFE_METHODS",
    "has_idempotency_key",
    "is_failure",
    "is_failure_status",
    "is_replayable",
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
the breaker, but for `SELF_CAUSED_EXCEPTIONS`. Anything else ends the call as
it is."""

SELF_CAUSED_EXCEPTIONS: Final = (
    httpx.LocalProtocolError,
    httpx.UnsupportedProtocol,
    httpx.PoolTimeout,
)
"""Transport errors the client causes itself: a header h11 refuses to send, a
URL with no usable scheme, a wait for the client's own connection pool. No
byte reached the host, so they say nothing about it: raised at once, never
retried or hedged, and never breaker evidence."""

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


def is_failure(outcome: httpx.Response | BaseException) -> bool:
    """Whether an attempt's outcome, a response or an exception, is a failure.

    An exception in `SELF_CAUSED_EXCEPTIONS` is not: the client caused it.

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
    return isinstance(outcome, FAILURE_EXCEPTIONS) and not isinstance(
        outcome, SELF_CAUSED_EXCEPTIONS
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
    request: httpx.Request, *, retry_unsafe_methods: bool, stream: object = None
) -> bool:
    """Whether a failed attempt of `request` may be followed by another.

    Its method must be safe or idempotent (`SAFE_METHODS`), or unsafe methods
    allowed, or the request must carry an ``Idempotency-Key``; and its body
    must be replayable (`is_replayable`).

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
        request.method in SAFE_METHODS
        or retry_unsafe_methods
        or has_idempotency_key(request)
    ):
        return False
    return is_replayable(request.stream if stream is None else stream)
