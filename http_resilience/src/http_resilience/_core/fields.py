"""Field types the option models share: counts and ratios that refuse a bool.

And the model configuration every strategy's options use (frozen, no unknown
field).
"""

from __future__ import annotations

from typing import Annotated

from pydantic import (
    BeforeValidator,
    ConfigDict,
)

from http_resilience._core.classify import read_methods, read_status_codes

__all__ = ["FROZEN", "Count", "Methods", "Ratio", "RatioOrOff", "StatusCodes"]


def _not_a_bool(value: object) -> object:
    if isinstance(value, bool):
        # pydantic would read True as 1: `max_retry_attempts = true` in a
        # configuration file is a slip, not one retry.
        raise ValueError("give a number, not true or false")
    return value


Count = Annotated[int, BeforeValidator(_not_a_bool)]
"""An `int` field that refuses True and False (pydantic would read 1 and 0)."""
Ratio = Annotated[float, BeforeValidator(_not_a_bool)]
"""A `float` field that refuses True and False (pydantic would read 1.0, 0.0)."""

_OFF = frozenset({"none", "off", "null"})


def _off_or_number(value: object) -> object:
    if isinstance(value, str) and value.strip().lower() in _OFF:
        # How an environment variable or a configuration file turns it off.
        return None
    return _not_a_bool(value)


RatioOrOff = Annotated[float | None, BeforeValidator(_off_or_number)]
"""A `Ratio` that None turns off; ``"none"``, ``"off"`` and ``"null"`` (any
case) read as None, for the environment and configuration files."""

StatusCodes = Annotated[frozenset[int], BeforeValidator(read_status_codes)]
"""A set of HTTP statuses: ints, ``range``s, or ``"429, 500-504"``."""

Methods = Annotated[frozenset[str], BeforeValidator(read_methods)]
"""HTTP methods, read in upper case: names, or ``"GET, PUT"``."""

FROZEN = ConfigDict(frozen=True, extra="forbid")
