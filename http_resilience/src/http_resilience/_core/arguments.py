"""Checks of the arguments public entry points take: `of_type`, `is_async_callable`.

Where the public entry points check what they are given (a pipeline, options,
a header name), they refuse a wrong type the same way: what the argument must
be, and the type it got, by name; never the value, which may hold a secret.
A callable they take is told sync or async once, when it is given.
"""

from __future__ import annotations

import functools
import inspect
from typing import TypeVar, cast

__all__ = ["is_async_callable", "of_type"]

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


def is_async_callable(target: object) -> bool:
    """Whether calling `target` gives an awaitable, told before it is called.

    An ``async def`` function or method, a `functools.partial` of one, or an
    object whose ``__call__`` is ``async def``.

    Example:
        >>> async def fetch(scope: object) -> None: ...
        >>> is_async_callable(functools.partial(fetch)), is_async_callable(len)
        (True, False)
    """
    while isinstance(target, functools.partial):
        target = cast("functools.partial[object]", target).func
    return inspect.iscoroutinefunction(target) or inspect.iscoroutinefunction(
        type(target).__call__  # an object whose __call__ is async def
    )
