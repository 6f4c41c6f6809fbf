"""httpx's headers as it keeps them: (raw key, lower-case key, value) triples.

Code that looks at every request or response (the correlation stamp, the quota
reader) searches the triples instead of the mapping, whose lookups decode and
compare every header each time. httpx has kept them since 0.18; an httpx that
stops gets `KEEPS_TRIPLES` False, and that code takes the public way.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Final

import httpx

__all__ = [
    "KEEPS_TRIPLES",
    "LOWER_KEY",
    "copy_headers",
    "header_writer",
    "is_token",
    "triples",
]


def _keeps_triples() -> bool:
    entries = getattr(httpx.Headers({"A": "b"}), "_list", None)
    return entries == [(b"A", b"a", b"b")] and isinstance(entries, list)


KEEPS_TRIPLES: Final = _keeps_triples()
"""Whether this httpx keeps headers as triples."""

LOWER_KEY: Final = operator.itemgetter(1)
"""A triple's lower-case key: ``map(LOWER_KEY, entries)`` searches in C."""


def triples(headers: httpx.Headers) -> list[tuple[bytes, bytes, bytes]]:
    """The headers' triples, as httpx keeps them; only when `KEEPS_TRIPLES`."""
    return headers._list  # pyright: ignore[reportPrivateUsage]


def _plain_headers() -> bool:
    """Whether `httpx.Headers` holds its triples and its encoding, nothing more."""
    return KEEPS_TRIPLES and set(vars(httpx.Headers({"A": "b"}))) == {
        "_list",
        "_encoding",
    }


_PLAIN_HEADERS: Final = _plain_headers()


def copy_headers(headers: httpx.Headers) -> httpx.Headers:
    """A copy of `headers` of its own: what ``httpx.Headers(headers)`` makes.

    Every attempt copies its caller's headers, so on an httpx that holds
    them as `_plain_headers` says the copy is made without its constructor's
    checks of what it was given (known to be headers already).
    """
    if not _PLAIN_HEADERS:
        return httpx.Headers(headers)
    copied = httpx.Headers.__new__(httpx.Headers)
    # Attribute by attribute, as the constructor sets them: the copy keeps
    # CPython's compact layout, which `vars(copied).update(...)` gives up.
    copied._list = headers._list.copy()  # pyright: ignore[reportPrivateUsage]
    copied._encoding = headers._encoding  # pyright: ignore[reportPrivateUsage]
    return copied


_TOKEN: Final = frozenset(
    "!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
)


def is_token(text: str) -> bool:
    """Whether `text` is an HTTP token (RFC 9110): a header name, or a method."""
    return bool(text) and set(text) <= _TOKEN


def header_writer(name: str) -> Callable[[httpx.Headers, bytes], None]:
    """What sets header `name` (an HTTP token), replacing any value it had.

    On the triples when httpx keeps them (no decoding of the other headers),
    else through the mapping. The name is encoded once, here.
    """
    raw = name.encode("ascii")
    lowered = raw.lower()

    def put(headers: httpx.Headers, value: bytes) -> None:
        if not KEEPS_TRIPLES:
            headers[name] = value.decode("latin-1")
            return
        entries = headers._list  # pyright: ignore[reportPrivateUsage] - `triples`, inline
        if lowered in map(LOWER_KEY, entries):
            entries[:] = [entry for entry in entries if entry[1] != lowered]
        entries.append((raw, lowered, value))

    return put
