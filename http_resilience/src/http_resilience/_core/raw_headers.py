"""httpx's headers as it keeps them: (raw key, lower-case key, value) triples.

Code that looks at every request or response (the correlation stamp, the quota
reader) searches the triples instead of the mapping, whose lookups decode and
compare every header each time. httpx has kept them since 0.18; an httpx that
stops gets `KEEPS_TRIPLES` False, and that code takes the public way.
"""

from __future__ import annotations

import operator
from typing import Final

import httpx

__all__ = ["KEEPS_TRIPLES", "LOWER_KEY", "triples"]


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
