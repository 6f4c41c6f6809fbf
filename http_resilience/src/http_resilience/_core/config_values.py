"""Status sets and method names as a configuration gives them: read and checked.

The option fields of statuses and methods (`fields.StatusCodes`,
`fields.Methods`) read their values here: ints, ``range``s and strings such as
``"429, 500-504"``; names or ``"GET, PUT"``. Each raises `ValueError` on what
is not a status or a method, for pydantic to report.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final, cast

from http_resilience._core.raw_headers import is_token

__all__ = ["read_methods", "read_status_codes"]


def read_status_codes(value: object) -> frozenset[int]:
    """A set of statuses from ints, ``range``s and strings like ``"500-504, 429"``.

    Raises:
        ValueError: A status outside 100-599, a range backwards, or anything
            that is not a status.

    Example:
        >>> sorted(read_status_codes("429, 500-503"))
        [429, 500, 501, 502, 503]
        >>> sorted(read_status_codes([408, range(502, 505)]))
        [408, 502, 503, 504]
    """
    codes: set[int] = set()
    parts: Iterable[object]
    if isinstance(value, str):
        parts = [part for part in value.split(",") if part.strip()]
    elif isinstance(value, int | range):
        parts = [value]
    elif isinstance(value, Iterable):
        parts = cast("Iterable[object]", value)
    else:
        raise ValueError(_STATUSES_WANTED)
    for part in parts:
        if isinstance(part, bool):
            raise ValueError(_STATUSES_WANTED)
        if isinstance(part, int):
            codes.add(_status(part))
        elif isinstance(part, range) and part.step == 1 and len(part):
            codes.update(_status(code) for code in (part.start, part.stop - 1))
            codes.update(part)
        elif isinstance(part, str):
            low, dash, high = part.strip().partition("-")
            first, last = _digits(low), _digits(high) if dash else _digits(low)
            if first > last:
                raise ValueError(f"the range {part.strip()!r} runs backwards")
            codes.update(range(_status(first), _status(last) + 1))
        else:
            raise ValueError(_STATUSES_WANTED)
    return frozenset(codes)


_STATUSES_WANTED: Final = (
    'give statuses as ints, ranges or a string such as "429, 500-504"'
)


def _digits(text: str) -> int:
    text = text.strip()
    if not (text.isascii() and text.isdigit()):
        raise ValueError(f"{text!r} is not a status code")
    return int(text)


def _status(code: int) -> int:
    if not 100 <= code <= 599:
        raise ValueError(f"{code} is not an HTTP status (100-599)")
    return code


def read_methods(value: object) -> frozenset[str]:
    """HTTP methods, upper case, from names or one comma-joined string.

    Raises:
        ValueError: A name that is not an HTTP token.

    Example:
        >>> sorted(read_methods("get, put"))
        ['GET', 'PUT']
    """
    names: Iterable[object]
    if isinstance(value, str):
        names = [name for name in value.split(",") if name.strip()]
    elif isinstance(value, Iterable):
        names = cast("Iterable[object]", value)
    else:
        raise ValueError("give method names, or one string joined by commas")
    methods: set[str] = set()
    for name in names:
        if not isinstance(name, str) or not name.strip():
            raise ValueError(f"{name!r} is not an HTTP method")
        method = name.strip().upper()
        if not is_token(method):
            raise ValueError(f"{name!r} is not an HTTP method")
        methods.add(method)
    return frozenset(methods)
