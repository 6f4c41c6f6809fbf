"""`of_type`: an argument of the type it must be, or a `TypeError` saying so.

Where the public entry points check what they are given (a pipeline, options,
a header name), they refuse a wrong type the same way: what the argument must
be, and the type it got, by name; never the value, which may hold a secret.
"""

from __future__ import annotations

from typing import TypeVar

__all__ = ["of_type"]

_T = TypeVar("_T")


def of_type(value: object, kind: type[_T], must: str) -> _T:
    """`value`, if it is a `kind`; else a `TypeError`: `must`, and what it got.

    Raises:
        TypeError: `value` is not a `kind`.

    Example:
        >>> of_type("x-deadline", str, "deadline_header must be a header name")
        'x-deadline'
        >>> of_type(3, str, "deadline_header must be a header name")
        Traceback (most recent call last):
        ...
        TypeError: deadline_header must be a header name, got int
    """
    if not isinstance(value, kind):
        raise TypeError(f"{must}, got {type(value).__qualname__}")
    return value
