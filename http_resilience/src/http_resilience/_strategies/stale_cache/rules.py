"""What the stale cache may store and serve, read from the headers: no I/O, no time.

Conservative where RFC 9111 leaves room. A request is left alone (neither
stored nor served) unless it is a GET or a HEAD without ``Range`` and without
``Cache-Control: no-store``; one with ``Cache-Control: no-cache`` asked for a
fresh answer, so it is never served stale (its answer is still stored). A
response is stored only when its status is one a cache may keep by default
and that a host answers when it is fine (200, 203, 204, 300, 301, 308, 404,
410), and it says none of ``no-store``, ``no-cache``, ``must-revalidate``,
``proxy-revalidate`` or ``private`` (unless `store_private`), has no
``Vary: *`` and sets no cookie (replayed later, it would set an old one).
RFC 5861's ``stale-if-error=N`` on a response shortens how long it may be
served stale to its freshness (``max-age``) plus N seconds, never beyond
`max_stale`.
"""

from __future__ import annotations

import math
from typing import Final

import httpx

__all__ = [
    "STORED_STATUSES",
    "cache_directives",
    "initial_age",
    "leaves_alone",
    "may_serve",
    "stale_window",
    "vary_names",
]

STORED_STATUSES: Final = frozenset({200, 203, 204, 300, 301, 308, 404, 410})
"""Statuses stored: cacheable by default (RFC 9110 section 15.1), the partial
206 and the errors of the request itself (405, 414, 501) left out."""

_METHODS: Final = frozenset({"GET", "HEAD"})
_NEVER_STORED: Final = ("no-store", "no-cache", "must-revalidate", "proxy-revalidate")


def cache_directives(headers: httpx.Headers) -> dict[str, str | None]:
    """The ``Cache-Control`` directives, names in lower case; a value unquoted.

    Every ``Cache-Control`` line counts; an empty item is skipped.

    Example:
        >>> cache_directives(httpx.Headers({"Cache-Control": 'max-age=60, Private'}))
        {'max-age': '60', 'private': None}
    """
    found: dict[str, str | None] = {}
    for line in headers.get_list("cache-control"):
        for item in line.split(","):
            name, equals, value = item.partition("=")
            name = name.strip().lower()
            if name:
                found[name] = value.strip().strip('"') if equals else None
    return found


def leaves_alone(request: httpx.Request) -> bool:
    """Whether the cache neither stores nor serves `request`'s answers."""
    if request.method not in _METHODS or "range" in request.headers:
        return True
    return "no-store" in cache_directives(request.headers)


def may_serve(request: httpx.Request) -> bool:
    """Whether a stale answer may be served to `request` (it did not ask no-cache)."""
    return "no-cache" not in cache_directives(request.headers)


def _seconds(value: str | None) -> int | None:
    if value is None or not value.isdigit():
        return None
    return int(value)


def stale_window(
    response: httpx.Response, max_stale: float, *, store_private: bool
) -> float | None:
    """How long `response` may be served stale, in seconds; None: not stored.

    `max_stale` unless the response's ``stale-if-error`` says less.

    Example:
        >>> def window(cache_control: str) -> float | None:
        ...     headers = {"Cache-Control": cache_control}
        ...     response = httpx.Response(200, headers=headers)
        ...     return stale_window(response, 300.0, store_private=False)
        >>> window("max-age=60")
        300.0
        >>> window("max-age=10, stale-if-error=20")
        30.0
        >>> window("no-store") is None
        True
    """
    if response.status_code not in STORED_STATUSES:
        return None
    headers = response.headers
    said = cache_directives(headers)
    if any(name in said for name in _NEVER_STORED):
        return None
    if "private" in said and not store_private:
        return None
    if "set-cookie" in headers or "*" in vary_names(headers):
        return None
    stale = _seconds(said.get("stale-if-error"))
    if stale is None:
        return max_stale
    fresh = _seconds(said.get("max-age")) or 0
    return float(min(max_stale, fresh + stale))


def vary_names(headers: httpx.Headers) -> tuple[str, ...]:
    """The request headers ``Vary`` names, in lower case, sorted, once each."""
    names = {
        name.strip().lower()
        for line in headers.get_list("vary")
        for name in line.split(",")
        if name.strip()
    }
    return tuple(sorted(names))


def initial_age(headers: httpx.Headers) -> float:
    """The ``Age`` the host (or a cache before it) gave; 0 when absent or malformed."""
    age = _seconds(headers.get("age", "").strip())
    return 0.0 if age is None or not math.isfinite(age) else float(age)
