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

from http_resilience._core.raw_headers import KEEPS_TRIPLES, LOWER_KEY, triples

__all__ = [
    "STORED_STATUSES",
    "cache_directives",
    "initial_age",
    "key_parts",
    "leaves_alone",
    "may_serve",
    "read_request",
    "read_response",
    "stale_window",
    "vary_names",
    "vary_parts",
]

STORED_STATUSES: Final = frozenset({200, 203, 204, 300, 301, 308, 404, 410})
"""Statuses stored: cacheable by default (RFC 9110 section 15.1), the partial
206 and the errors of the request itself (405, 414, 501) left out."""

_METHODS: Final = frozenset({"GET", "HEAD"})
_NEVER_STORED: Final = ("no-store", "no-cache", "must-revalidate", "proxy-revalidate")

# The headers each side is read for, lower case: most calls carry none of
# them, which `frozenset.isdisjoint` sees in C without a loop in Python.
_REQUEST_NAMES: Final = frozenset(
    {b"authorization", b"cache-control", b"cookie", b"range"}
)
_RESPONSE_NAMES: Final = frozenset({b"age", b"cache-control", b"set-cookie", b"vary"})

Triples = list[tuple[bytes, bytes, bytes]]
"""Headers as (raw name, lower-case name, value) bytes, in the order sent."""


def _triples(headers: httpx.Headers) -> Triples:
    """`headers` as triples, on an httpx that does not keep them (`KEEPS_TRIPLES`)."""
    return [(name, name.lower(), value) for name, value in headers.raw]


def _decoded(headers: httpx.Headers, values: list[bytes]) -> list[str]:
    """`values` of `headers` as the mapping gives them (in its encoding)."""
    encoding = headers.encoding
    return [value.decode(encoding) for value in values]


def cache_directives(headers: httpx.Headers) -> dict[str, str | None]:
    """The ``Cache-Control`` directives, names in lower case; a value unquoted.

    Every ``Cache-Control`` line counts; an empty item is skipped.

    Example:
        >>> cache_directives(httpx.Headers({"Cache-Control": 'max-age=60, Private'}))
        {'max-age': '60', 'private': None}
    """
    return _directives(headers.get_list("cache-control"))


def _directives(lines: list[str]) -> dict[str, str | None]:
    found: dict[str, str | None] = {}
    for line in lines:
        for item in line.split(","):
            name, equals, value = item.partition("=")
            name = name.strip().lower()
            if name:
                found[name] = value.strip().strip('"') if equals else None
    return found


def leaves_alone(request: httpx.Request) -> bool:
    """Whether the cache neither stores nor serves `request`'s answers."""
    return read_request(request) is None


def read_request(request: httpx.Request) -> list[bytes] | None:
    """The parts of `request`'s key (`key_parts`); None: the cache leaves it alone."""
    if request.method not in _METHODS:
        return None
    alone, parts = _scan_request(request)
    return None if alone else parts


def key_parts(request: httpx.Request) -> list[bytes]:
    """The parts of `request`'s key, to be hashed: what tells its entry apart.

    The method, the URL and, when the request carries any, the number of
    its ``Authorization`` values, those values and its ``Cookie`` values
    (raw, as they will be sent).
    """
    return _scan_request(request)[1]


def _scan_request(request: httpx.Request) -> tuple[bool, list[bytes]]:
    """Whether ``Range`` or ``no-store`` leave `request` alone, and `key_parts`.

    In one pass over its headers.
    """
    parts = [request.method.encode(), str(request.url).encode()]
    headers = request.headers
    entries = triples(headers) if KEEPS_TRIPLES else _triples(headers)
    if _REQUEST_NAMES.isdisjoint(map(LOWER_KEY, entries)):
        return False, parts
    authorization: list[bytes] = []
    cookie: list[bytes] = []
    cache_control: list[bytes] = []
    alone = False
    for _, name, value in entries:
        if name == b"authorization":
            authorization.append(value)
        elif name == b"cookie":
            cookie.append(value)
        elif name == b"cache-control":
            cache_control.append(value)
        elif name == b"range":
            alone = True
    if not alone and cache_control:
        alone = "no-store" in _directives(_decoded(headers, cache_control))
    if authorization or cookie:
        parts.append(b"%d" % len(authorization))
        parts += authorization
        parts += cookie
    return alone, parts


def may_serve(request: httpx.Request) -> bool:
    """Whether a stale answer may be served to `request` (it did not ask no-cache)."""
    return "no-cache" not in cache_directives(request.headers)


_LARGEST_DELTA: Final = 2**31
"""RFC 9111's "infinity" for a delta-seconds too large to hold (section 1.2.2)."""


def _seconds(value: str | None) -> int | None:
    """A delta-seconds value (ASCII digits only), or None.

    Whatever a host sends (``Age: ²``, a ``max-age`` of thousands of digits)
    is a number or nothing: never an error out of the call.
    """
    if value is None or not (value.isascii() and value.isdigit()):
        return None
    if len(value) > 10:  # past 2**31 seconds
        return _LARGEST_DELTA
    return min(int(value), _LARGEST_DELTA)


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
    read = read_response(response, max_stale, store_private=store_private)
    return None if read is None else read[0]


def read_response(
    response: httpx.Response, max_stale: float, *, store_private: bool
) -> tuple[float, tuple[str, ...], float] | None:
    """What `stale_window`, `vary_names` and `initial_age` say, in one pass.

    None when `response` is not stored; else its window in seconds, the
    names its ``Vary`` lists and its ``Age``.
    """
    if response.status_code not in STORED_STATUSES:
        return None
    headers = response.headers
    entries = triples(headers) if KEEPS_TRIPLES else _triples(headers)
    if _RESPONSE_NAMES.isdisjoint(map(LOWER_KEY, entries)):
        return max_stale, (), 0.0
    cache_control: list[bytes] = []
    vary: list[bytes] = []
    age: list[bytes] = []
    for _, name, value in entries:
        if name == b"cache-control":
            cache_control.append(value)
        elif name == b"vary":
            vary.append(value)
        elif name == b"age":
            age.append(value)
        elif name == b"set-cookie":
            return None
    said = _directives(_decoded(headers, cache_control)) if cache_control else {}
    if any(name in said for name in _NEVER_STORED):
        return None
    if "private" in said and not store_private:
        return None
    names = _vary_names(_decoded(headers, vary)) if vary else ()
    if "*" in names:
        return None
    stale = _seconds(said.get("stale-if-error"))
    if stale is None:
        window = max_stale
    else:
        fresh = _seconds(said.get("max-age")) or 0
        window = float(min(max_stale, fresh + stale))
    return window, names, _age(", ".join(_decoded(headers, age))) if age else 0.0


def vary_names(headers: httpx.Headers) -> tuple[str, ...]:
    """The request headers ``Vary`` names, in lower case, sorted, once each."""
    return _vary_names(headers.get_list("vary"))


def _vary_names(lines: list[str]) -> tuple[str, ...]:
    names = {
        name.strip().lower()
        for line in lines
        for name in line.split(",")
        if name.strip()
    }
    return tuple(sorted(names))


def vary_parts(request: httpx.Request, names: tuple[str, ...]) -> list[bytes]:
    """`request`'s values for the headers `names` (lower case), to be hashed.

    Each name, the number of its values and those values (raw).
    """
    headers = request.headers
    entries = triples(headers) if KEEPS_TRIPLES else _triples(headers)
    parts: list[bytes] = []
    for name in names:
        lowered = name.encode()
        values = [value for _, key, value in entries if key == lowered]
        parts.append(lowered)
        parts.append(b"%d" % len(values))
        parts += values
    return parts


def initial_age(headers: httpx.Headers) -> float:
    """The ``Age`` the host (or a cache before it) gave; 0 when absent or malformed."""
    return _age(headers.get("age", ""))


def _age(value: str) -> float:
    age = _seconds(value.strip())
    return 0.0 if age is None or not math.isfinite(age) else float(age)
