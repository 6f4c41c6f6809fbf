"""Correlation ids on the wire: the stamp that writes a call's id into each attempt.

The id itself (the context variable, `correlation_id`, how new ids are made
and which ids are valid) is the core's: `http_resilience._core.correlation`.
The resilient transport puts it on the wire itself, inside the retry and
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

import re
from typing import Final, cast

import httpx

from http_resilience._core.correlation import (
    CORRELATION_EXTENSION,
    CURRENT_CORRELATION,
    CorrelationSource,
    is_correlation_id,
    new_correlation_id,
)
from http_resilience._core.raw_headers import KEEPS_TRIPLES, LOWER_KEY, triples
from http_resilience._core.send import Stamp

__all__ = [
    "DEFAULT_CORRELATION_HEADER",
    "check_correlation_source",
    "check_header_name",
    "correlation_stamp",
]

DEFAULT_CORRELATION_HEADER: Final = "X-Correlation-ID"
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
    if is_correlation_id(given):
        return cast("str", given)
    return CURRENT_CORRELATION.get() or new_correlation_id()


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
                chosen = CURRENT_CORRELATION.get() or new_correlation_id()
            else:
                chosen = _from(source)
            extensions[CORRELATION_EXTENSION] = chosen
        return chosen

    def stamp(attempt: httpx.Request, request: httpx.Request) -> None:
        entries = triples(attempt.headers)
        if lowered in map(LOWER_KEY, entries):  # the search runs in C
            return
        chosen = chosen_for(request)
        # Visible ASCII: `correlation_id`, `_from` and `new_correlation_id` make
        # no other.
        entries.append((raw_key, lowered, chosen.encode("ascii")))

    def stamp_through_mapping(attempt: httpx.Request, request: httpx.Request) -> None:
        if header not in attempt.headers:
            attempt.headers[header] = chosen_for(request)

    return stamp if KEEPS_TRIPLES else stamp_through_mapping
