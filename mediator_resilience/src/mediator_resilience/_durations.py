"""Durations as configuration gives them: seconds, "200ms", "2s", or ISO 8601."""

from __future__ import annotations

import math
import re
from datetime import timedelta
from typing import Annotated, Any

from pydantic import AfterValidator, BeforeValidator

__all__ = ["Duration", "parse_duration"]

_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
_WITH_UNIT = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)\s*$", re.ASCII)
_NUMBER = re.compile(r"^\s*\d+(?:\.\d+)?\s*$", re.ASCII)


def parse_duration(value: Any) -> Any:
    """Turn numbers and unit strings into `timedelta`; leave the rest to pydantic.

    Numbers are seconds. Strings take one unit (``ms``, ``s``, ``m``, ``h``), a
    bare number of seconds, or ISO 8601 (``PT0.2S``), which pydantic reads.
    Negative, infinite and not-a-number values are refused, and so are
    durations past 999,999,999 days, which `timedelta` cannot hold.
    """
    if isinstance(value, bool):
        raise ValueError("a duration is a number of seconds or a string like '200ms'")
    if isinstance(value, int | float):
        if not math.isfinite(value) or value < 0:
            raise ValueError(
                f"a duration must be finite and not negative, got {value!r}"
            )
        return _seconds(value)
    if isinstance(value, str):
        match = _WITH_UNIT.match(value)
        if match:
            return _seconds(float(match[1]) * _UNITS[match[2]])
        if _NUMBER.match(value):
            return _seconds(float(value))
    return value


def _seconds(seconds: float) -> timedelta:
    try:
        return timedelta(seconds=seconds)
    except OverflowError:
        # Raised as it is, it would escape pydantic without naming the field.
        raise ValueError(
            "too long a duration: it may not exceed 999,999,999 days"
        ) from None


def _not_negative(value: timedelta) -> timedelta:
    if value < timedelta(0):
        raise ValueError(f"a duration must not be negative, got {value}")
    return value


Duration = Annotated[
    timedelta, BeforeValidator(parse_duration), AfterValidator(_not_negative)
]
"""A `timedelta` field that also accepts seconds, "200ms", "2s" and ISO 8601."""
