"""What the context middleware decides from a caller's headers, whatever the server.

The checks of `ResilienceContextMiddleware`'s options and the reading of the
deadline and attempt headers, as plain functions: the WSGI middleware calls
them, with the ASGI middleware's rules and messages.
"""

from __future__ import annotations

import functools
import inspect
import math
import re
from collections.abc import Callable
from datetime import timedelta
from typing import Any, Final, cast

from http_resilience._core.raw_headers import is_token
from http_resilience._primitives.durations import in_seconds, read_duration

__all__ = [
    "MAX_ATTEMPT",
    "checked_limits",
    "checked_trusted",
    "default_deadline",
    "lowered",
    "read_attempt",
    "read_deadline",
    "trusts",
]

_INTEGER: Final = re.compile(rb"[0-9]{1,12}")
_DIGITS: Final = re.compile(rb"[0-9]+")
_LONGEST_READ: Final = 12
"""Digits of a deadline read as a number; more is far past any limit (31 years)."""
MAX_ATTEMPT: Final = 1000
"""The highest attempt number a caller may say it makes."""


def checked_limits(safety_margin: float, max_deadline: float) -> None:
    """Refuse a margin or limit that is no finite number of seconds >= 0.

    Raises:
        ValueError: Either is negative, NaN or infinite, named.
    """
    for name, value in (
        ("safety_margin", safety_margin),
        ("max_deadline", max_deadline),
    ):
        if not math.isfinite(value) or value < 0:
            raise ValueError(f"{name} must be a finite number of seconds >= 0")


def read_deadline(value: bytes, safety_margin: float, longest: float) -> float | None:
    """The seconds a caller's deadline header leaves; None if it is malformed.

    Less `safety_margin`, at least 0 and at most `longest`. Any run of digits
    is a deadline, however long: one too long to read as a number is past
    every limit, so it is clamped to `longest` like a large one, never
    converted (a megabyte of digits costs one scan, not a quadratic `int`).
    """
    text = value.strip()
    if not _DIGITS.fullmatch(text):
        return None
    text = text.lstrip(b"0") or b"0"
    if len(text) > _LONGEST_READ:
        return longest
    seconds = int(text) / 1000 - safety_margin
    return min(max(seconds, 0.0), longest)


def read_attempt(value: bytes) -> int | None:
    """The caller's attempt number, 1 to `MAX_ATTEMPT`; None if it is not one."""
    text = value.strip()
    if not _INTEGER.fullmatch(text) or not 1 <= int(text) <= MAX_ATTEMPT:
        return None
    return int(text)


def checked_trusted(trusted: object, where: str) -> Callable[[Any], bool] | None:
    """`trusted` if it is None or a plain callable; refused at once otherwise.

    `where` names what it is called with, such as ``"the WSGI environ"``.

    Raises:
        TypeError: It is not callable, or it is ``async``.
    """
    if trusted is None:
        return None
    if not callable(trusted):
        raise TypeError(
            f"trusted must be a callable that takes {where} and returns "
            f"True or False, or None, got {type(trusted).__name__}"
        )
    call: object = trusted
    while isinstance(call, functools.partial):
        call = cast("functools.partial[object]", call).func
    if inspect.iscoroutinefunction(call) or inspect.iscoroutinefunction(
        type(call).__call__  # an object whose __call__ is async def
    ):
        raise TypeError(
            "trusted must be a plain function, not async def: it decides from "
            f"{where} alone"
        )
    return cast("Callable[[Any], bool]", trusted)


def trusts(trusted: Callable[[Any], bool] | None, request: object) -> bool:
    """What `trusted` says of `request`; True when there is no `trusted`.

    Raises:
        TypeError: It returned something other than True or False.
    """
    if trusted is None:
        return True
    # Checked whatever the annotations say: a truthy string or a coroutine
    # must not pass for True.
    verdict = cast("object", trusted(request))
    if isinstance(verdict, bool):
        return verdict
    if inspect.iscoroutine(verdict):
        verdict.close()
    raise TypeError(f"trusted must return True or False, got {type(verdict).__name__}")


def default_deadline(value: object, max_deadline: float) -> timedelta | None:
    """`value` read as a duration: positive, and no longer than `max_deadline`.

    Raises:
        TypeError: It is no duration.
        ValueError: It is not positive, or longer than `max_deadline`.
    """
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, timedelta | int | float | str):
        raise TypeError(
            "default_deadline must be a timedelta, seconds or a string such as "
            f"'5s', or None, got {type(value).__name__}"
        )
    try:
        deadline = read_duration(value, "default_deadline")
    except ValueError as error:
        # The reader names the field in some messages, not in others.
        text = str(error)
        named = text if text.startswith("default_deadline") else None
        raise ValueError(named or f"default_deadline: {text}") from None
    if deadline <= timedelta(0):
        raise ValueError(
            f"default_deadline must be positive, got {in_seconds(deadline)}"
        )
    if deadline.total_seconds() > max_deadline:
        raise ValueError(
            f"default_deadline ({in_seconds(deadline)}) may not be longer than "
            f"max_deadline ({max_deadline:g} s)"
        )
    return deadline


def lowered(header: object, name: str) -> str | None:
    """The header to read, lower case; refused at once if it is no header name.

    Raises:
        TypeError: It is neither a string nor None.
        ValueError: It is no HTTP header name.
    """
    if header is None:
        return None
    if not isinstance(header, str):
        raise TypeError(
            f"{name} must be a header name or None, got {type(header).__name__}"
        )
    if not is_token(header):
        raise ValueError(f"{name} {header!r} is not an HTTP header name")
    return header.lower()
