"""Correlation ids: one per logical call, carried by every attempt of it.

The id of a call is the one set with `correlation_id` (a context variable, so
it follows the task and the threads `asyncio.to_thread` starts), else a new
one. The resilient transport puts it on the wire itself, inside the retry and
without a layer of its own: it runs a stamp (`correlation_stamp`) on the copy
it makes of each attempt. The first attempt of a call chooses the id and
leaves it in the request's extensions, so every later attempt (and hedged
copy) of the call sends the same one, and so does a redirect's next hop,
whose request httpx builds with the extensions of the one before.

A header the request already has (set by the caller, or a client default) is
left as it is.

A factory may be given a source of ids of its own (`correlation_stamp`'s
`source`, such as ``mediator.current_correlation_id``), so the HTTP calls of a
request carry the id its other records carry. The source is asked once per
call, on its first attempt, and only a valid id it returns is taken; else the
rule above holds. Any callable of no argument will do: this package knows no
other package's context.

The stamp is on the path of every attempt, so it is kept to a few list and
dictionary operations: a new id is a per-process random prefix and a counter
(`new_correlation_id`), not a fresh read of the system's random source, and the
header is looked for and added in the attempt's own list of raw header pairs,
rather than through `httpx.Headers`' mapping methods, which decode and
normalise every header of the copy first.
"""

from __future__ import annotations

import itertools
import os
import re
import secrets
from collections.abc import Callable, Generator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Final, cast

import httpx

from http_resilience._core.pipeline import Stamp
from http_resilience._core.raw_headers import KEEPS_TRIPLES, LOWER_KEY, triples

__all__ = [
    "CORRELATION_EXTENSION",
    "DEFAULT_CORRELATION_HEADER",
    "MAX_CORRELATION_LENGTH",
    "CorrelationSource",
    "check_correlation_source",
    "check_header_name",
    "correlation_id",
    "correlation_stamp",
    "current_correlation_id",
    "inbound_correlation_id",
    "is_correlation_id",
]

DEFAULT_CORRELATION_HEADER: Final = "X-Correlation-ID"
CORRELATION_EXTENSION: Final = "http_resilience.correlation_id"
"""The request extension that carries a call's id from its first attempt to the rest."""

MAX_CORRELATION_LENGTH: Final = 200
"""The longest correlation id, in characters, set here or taken from a caller.

The same limit as `mediator`'s (each package keeps its own copy of the rule):
200 is the longest request id common routers pass on (Heroku's), so an id a
caller's platform made is kept, and still short enough to go on every attempt
and into every log line.
"""
# Visible ASCII but the comma: what any server, proxy and log line takes as
# is. A comma is refused because HTTP lets any hop join two lines of a header
# into one with commas (RFC 9110, 5.3): a value with one may be two ids.
_VALUE: Final = re.compile(rf"[\x21-\x2b\x2d-\x7e]{{1,{MAX_CORRELATION_LENGTH}}}")
_REFUSED: Final = (
    f"a correlation id is 1 to {MAX_CORRELATION_LENGTH} visible ASCII characters "
    "without spaces or commas"
)
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

CorrelationSource = Callable[[], str | None]
"""Where a factory's clients read a call's id first: a callable of no argument.

What it returns is checked on every call: anything but a valid id (None, an
empty or overlong string, a character outside visible ASCII or a comma, not a
string at all) falls back to this package's own rule.
"""

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
        value: The id: 1 to 200 visible ASCII characters, no spaces or commas
            (such as an incoming request's own correlation id). None makes a
            new one.

    Yields:
        The id in force inside the block.

    Raises:
        TypeError: `value` is neither a string nor None.
        ValueError: `value` is empty, too long, or has a character outside
            visible ASCII, or a comma. The message does not repeat the value.

    Example:
        >>> with correlation_id() as made:
        ...     current_correlation_id() == made
        True
    """
    if value is None:
        value = new_correlation_id()
    elif not isinstance(cast("object", value), str):
        raise TypeError(
            f"a correlation id must be a string, got {type(value).__name__}"
        )
    elif _VALUE.fullmatch(value) is None:
        raise ValueError(_REFUSED)
    token = _current.set(value)
    try:
        yield value
    finally:
        _current.reset(token)


def is_correlation_id(value: object) -> bool:
    """True when `value` is a string `correlation_id` takes.

    Example:
        >>> is_correlation_id("order-42"), is_correlation_id("a, b")
        (True, False)
    """
    return isinstance(value, str) and _VALUE.fullmatch(value) is not None


def inbound_correlation_id(values: list[bytes]) -> str | None:
    """The id a caller sent, from the values of every line of its header.

    Taken only when it sent the header once, with a valid id (outer spaces and
    tabs aside, which are no part of a field value): a header sent twice, or
    a value with a comma in it (two lines a hop joined), names no one id.

    Example:
        >>> inbound_correlation_id([b" order-42 "])
        'order-42'
        >>> inbound_correlation_id([b"a", b"b"]) is None
        True
    """
    if len(values) != 1:
        return None
    text = values[0].strip(b" \t").decode("ascii", errors="replace")
    return text if _VALUE.fullmatch(text) is not None else None


def new_correlation_id() -> str:
    """A new id: a UUID in its usual 36-character form, unique in practice.

    Version 8 (RFC 9562's layout of one's own): a random prefix of 74 bits,
    drawn once per process (and again in a forked child), then a 48-bit
    counter. Unique across processes as random UUIDs are, unique within one
    until its 2**48th id, and about a tenth of the cost of `uuid.uuid4`, which
    reads the system's random source on every call.

    Example:
        >>> import uuid
        >>> made = new_correlation_id()
        >>> (len(made), uuid.UUID(made).version, made == new_correlation_id())
        (36, 8, False)
    """
    # `next` on an `itertools.count` is one step under the GIL: no lock needed.
    return f"{_prefix}{next(_counter) & _COUNTER_MASK:012x}"


_COUNTER_MASK: Final = (1 << 48) - 1
_counter = itertools.count()


def _new_prefix() -> str:
    """``xxxxxxxx-xxxx-8xxx-Vxxx-``: 74 random bits, version 8, variant 10."""
    bits = secrets.randbits(74)
    return (
        f"{bits >> 42:08x}-{(bits >> 26) & 0xFFFF:04x}-"
        f"8{(bits >> 14) & 0xFFF:03x}-"
        f"{0x8 | ((bits >> 12) & 0x3):x}{bits & 0xFFF:03x}-"
    )


_prefix = _new_prefix()


def _renew_prefix() -> None:
    # A forked child shares the parent's counter: a prefix of its own keeps
    # its ids apart from the parent's.
    global _prefix
    _prefix = _new_prefix()


if hasattr(os, "register_at_fork"):  # pragma: no branch - not on Windows
    os.register_at_fork(after_in_child=_renew_prefix)


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


def check_correlation_source(
    correlation: CorrelationSource | None,
) -> CorrelationSource | None:
    """`correlation` if it is None or callable.

    Raises:
        TypeError: It is neither; the message names the argument.
    """
    if correlation is not None and not callable(correlation):
        raise TypeError(
            "correlation must be a callable that returns the current correlation "
            f"id (or None), got {type(correlation).__name__}"
        )
    return correlation


def _from(source: CorrelationSource) -> str:
    """The id `source` gives if it is a valid one, else this package's own."""
    given = source()
    if isinstance(given, str) and _VALUE.fullmatch(given) is not None:
        return given
    return _current.get() or new_correlation_id()


def correlation_stamp(header: str, source: CorrelationSource | None = None) -> Stamp:
    """What writes the call's id into each attempt's `header`.

    The resilient transport runs it on the copy it makes of every attempt
    (its `_stamp`), with the request the attempt copies.

    Args:
        header: The header that carries the id.
        source: Asked first, once per call, for the call's id; what it gives
            is taken only when it is a valid id (1 to 200 visible ASCII
            characters, no commas). An exception it raises fails the call.
    """
    raw_key = header.encode("ascii")
    lowered = raw_key.lower()

    def chosen_for(request: httpx.Request) -> str:
        extensions = request.extensions
        chosen = extensions.get(CORRELATION_EXTENSION)
        if not isinstance(chosen, str):
            if source is None:
                chosen = _current.get() or new_correlation_id()
            else:
                chosen = _from(source)
            extensions[CORRELATION_EXTENSION] = chosen
        return chosen

    def stamp(attempt: httpx.Request, request: httpx.Request) -> None:
        entries = triples(attempt.headers)
        if lowered in map(LOWER_KEY, entries):  # the search runs in C
            return
        # `chosen_for`, written out: this runs on every attempt.
        extensions = request.extensions
        chosen = extensions.get(CORRELATION_EXTENSION)
        if not isinstance(chosen, str):
            if source is None:
                chosen = _current.get() or new_correlation_id()
            else:
                chosen = _from(source)
            extensions[CORRELATION_EXTENSION] = chosen
        # Visible ASCII: `correlation_id`, `_from` and `new_correlation_id` make
        # no other.
        entries.append((raw_key, lowered, chosen.encode("ascii")))

    def stamp_through_mapping(attempt: httpx.Request, request: httpx.Request) -> None:
        if header not in attempt.headers:
            attempt.headers[header] = chosen_for(request)

    return stamp if KEEPS_TRIPLES else stamp_through_mapping
