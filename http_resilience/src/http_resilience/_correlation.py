"""Correlation ids: one per logical call, carried by every attempt of it.

The id of a call is the one set with `correlation_id` (a context variable, so
it follows the task and the threads `asyncio.to_thread` starts), else a new
one. Two small pieces put it on the wire, so that it is stamped inside the
retry without a second resilience layer:

- a request hook, which the client runs before each request enters the
  pipeline, picks the id and leaves it in the request's extensions, unless
  the request has one already (a redirect hop carries its request's
  extensions, so a redirected call keeps one id);
- a transport wrapped around the one that sends each attempt, below the
  resilient transport, writes it into each attempt's header. The resilient
  transport copies the request's extensions into every attempt, so every
  attempt of one call carries the same id, and the id is chosen once, outside
  the retry.

A header the request already has (set by the caller, or a client default) is
left as it is.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Generator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Final

import httpx

__all__ = [
    "CORRELATION_EXTENSION",
    "DEFAULT_CORRELATION_HEADER",
    "AsyncCorrelationStamp",
    "CorrelationStamp",
    "assign_correlation_id",
    "assign_correlation_id_async",
    "check_header_name",
    "correlation_id",
    "current_correlation_id",
]

DEFAULT_CORRELATION_HEADER: Final = "X-Correlation-ID"
CORRELATION_EXTENSION: Final = "http_resilience.correlation_id"
"""The request extension that carries a call's id from the hook to each attempt."""

_MAX_LENGTH: Final = 200
# Visible ASCII, no spaces: what any server, proxy and log line takes as is.
_VALUE: Final = re.compile(rf"[\x21-\x7e]{{1,{_MAX_LENGTH}}}")
# RFC 9110 token characters.
_TOKEN: Final = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
# Headers an httpx client puts on every request (or every request with a body)
# by itself: a correlation header of one of these names would never be stamped.
_RESERVED: Final = frozenset(
    {
        "host",
        "accept",
        "accept-encoding",
        "connection",
        "user-agent",
        "content-length",
        "transfer-encoding",
    }
)

_current: ContextVar[str | None] = ContextVar(
    "http_resilience_correlation_id", default=None
)


def current_correlation_id() -> str | None:
    """The correlation id set by the innermost `correlation_id` block, if any.

    Example:
        >>> current_correlation_id() is None
        True
        >>> with correlation_id("order-42"):
        ...     current_correlation_id()
        'order-42'
    """
    return _current.get()


@contextmanager
def correlation_id(value: str | None = None) -> Generator[str]:
    """Give every HTTP call made inside the block this correlation id.

    The clients of an `HttpClientFactory` send it in their correlation header
    on every attempt of every call made inside the block: in this task, and in
    the tasks it starts and `asyncio.to_thread` calls, which copy the context
    (a plain `threading.Thread` does not). Blocks nest; leaving one restores
    the id around it.

    Args:
        value: The id: 1 to 200 visible ASCII characters, no spaces (such as an
            incoming request's own correlation id). None makes a new one.

    Yields:
        The id in force inside the block.

    Raises:
        ValueError: `value` is empty, too long, or has a character outside
            visible ASCII. The message does not repeat the value.

    Example:
        >>> with correlation_id() as made:
        ...     current_correlation_id() == made
        True
    """
    if value is None:
        value = new_correlation_id()
    elif _VALUE.fullmatch(value) is None:
        raise ValueError(
            f"a correlation id is 1 to {_MAX_LENGTH} visible ASCII characters "
            "without spaces"
        )
    token = _current.set(value)
    try:
        yield value
    finally:
        _current.reset(token)


def new_correlation_id() -> str:
    """A new random id (a UUID 4 in its usual 36-character form)."""
    return str(uuid.uuid4())


def check_header_name(name: str) -> str:
    """`name` if it is a valid HTTP header name.

    Raises:
        ValueError: It is empty, has a character a header name may not, or
            names a header httpx always sets itself (`Host`, `Content-Length`,
            ...), which the stamp would then never write.
    """
    if _TOKEN.fullmatch(name) is None:
        raise ValueError(
            f"correlation_header must be an HTTP header name, got {name!r}"
        )
    if name.lower() in _RESERVED:
        raise ValueError(
            f"correlation_header may not be {name!r}: httpx sets it on requests itself"
        )
    return name


def _assign(request: httpx.Request) -> None:
    if CORRELATION_EXTENSION not in request.extensions:
        chosen = _current.get()
        request.extensions[CORRELATION_EXTENSION] = (
            new_correlation_id() if chosen is None else chosen
        )


def assign_correlation_id(request: httpx.Request) -> None:
    """The sync client's request hook: choose the call's id, once."""
    _assign(request)


async def assign_correlation_id_async(request: httpx.Request) -> None:
    """The async client's request hook: choose the call's id, once."""
    _assign(request)


def _stamp(request: httpx.Request, header: str) -> None:
    if header in request.headers:
        return
    chosen = request.extensions.get(CORRELATION_EXTENSION)
    if not isinstance(chosen, str):
        # The client's request hooks were replaced: no id was chosen per call.
        chosen = _current.get() or new_correlation_id()
    # Each attempt is a request of its own (own headers), and all attempts of
    # one call carry the same id: writing into it cannot leak a wrong value.
    request.headers[header] = chosen


class AsyncCorrelationStamp(httpx.AsyncBaseTransport):
    """Writes the call's correlation id into each attempt, then sends it.

    Args:
        inner: The transport that sends.
        header: The header to write.
    """

    def __init__(self, inner: httpx.AsyncBaseTransport, header: str) -> None:
        self._inner = inner
        self._header = header

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        """Stamp `request` and send it through the wrapped transport."""
        _stamp(request, self._header)
        return await self._inner.handle_async_request(request)

    async def aclose(self) -> None:
        """Close the wrapped transport."""
        await self._inner.aclose()


class CorrelationStamp(httpx.BaseTransport):
    """The sync twin of `AsyncCorrelationStamp`."""

    def __init__(self, inner: httpx.BaseTransport, header: str) -> None:
        self._inner = inner
        self._header = header

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        """Stamp `request` and send it through the wrapped transport."""
        _stamp(request, self._header)
        return self._inner.handle_request(request)

    def close(self) -> None:
        """Close the wrapped transport."""
        self._inner.close()
