"""Field types the option models share: counts and ratios that refuse a bool.

With their bounds, where more than one model holds the same rule (a count of
at least one, a positive duration), and the model configuration every
strategy's options use (frozen, no unknown field).
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import timedelta
from typing import TYPE_CHECKING, Annotated, TypeAlias, get_args

from pydantic import (
    BeforeValidator,
    ConfigDict,
    Field,
)

from http_resilience._core.config_values import read_methods, read_status_codes
from http_resilience._primitives.durations import Duration

if TYPE_CHECKING:
    from http_resilience._primitives.setting import Setting

__all__ = [
    "FROZEN",
    "Count",
    "Methods",
    "MethodsInput",
    "NonNegativeCount",
    "NonNegativeDuration",
    "PositiveCount",
    "PositiveDuration",
    "Ratio",
    "RatioOrOff",
    "StatusCodes",
    "StatusInput",
    "UnitRatio",
]


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

# Each bound stands before the reading, where pydantic puts the bounds of a
# `Field(...)` default: the bound checks the value read, and the JSON schema
# shows it as ``minimum`` (a bound after a validator would show as ``ge``).
PositiveCount = Annotated[int, Field(ge=1), BeforeValidator(_not_a_bool)]
"""A `Count` of at least 1 (hosts kept, permits, attempts that must happen)."""
NonNegativeCount = Annotated[int, Field(ge=0), BeforeValidator(_not_a_bool)]
"""A `Count` of at least 0 (retries, a queue: 0 turns it off)."""
UnitRatio = Annotated[float, Field(gt=0.0, le=1.0), BeforeValidator(_not_a_bool)]
"""A `Ratio` in (0, 1]."""
if TYPE_CHECKING:
    # Set as a `DurationInput`, read as a `timedelta`: see `Setting`.
    PositiveDuration = Duration
    NonNegativeDuration = Duration
else:
    PositiveDuration = Annotated[
        timedelta, Field(gt=timedelta(0)), *get_args(Duration)[1:]
    ]
    NonNegativeDuration = Annotated[
        timedelta, Field(ge=timedelta(0)), *get_args(Duration)[1:]
    ]
"""`PositiveDuration`: a `Duration` of more than zero (a timeout, a window).
`NonNegativeDuration`: a `Duration` of zero or more (a delay)."""

_OFF = frozenset({"none", "off", "null"})


def _off_or_number(value: object) -> object:
    if isinstance(value, str) and value.strip().lower() in _OFF:
        # How an environment variable or a configuration file turns it off.
        return None
    return _not_a_bool(value)


RatioOrOff = Annotated[float | None, BeforeValidator(_off_or_number)]
"""A `Ratio` that None turns off; ``"none"``, ``"off"`` and ``"null"`` (any
case) read as None, for the environment and configuration files."""

StatusInput: TypeAlias = "Iterable[int | range | str] | str | int"
"""What `retry_on_status` and `breaker_on_status` take: ints, ranges, or a
string such as ``"429, 500-504"``."""
MethodsInput: TypeAlias = "Iterable[str] | str"
"""What `retry_methods` takes: names, or one string joined by commas."""

if TYPE_CHECKING:
    # Set as what they read, held as sets: see `Setting`.
    StatusCodes = Setting[frozenset[int], StatusInput]
    Methods = Setting[frozenset[str], MethodsInput]
else:
    StatusCodes = Annotated[frozenset[int], BeforeValidator(read_status_codes)]
    Methods = Annotated[frozenset[str], BeforeValidator(read_methods)]
"""`StatusCodes`: a set of HTTP statuses: ints, ``range``s, or
``"429, 500-504"``. `Methods`: HTTP methods, read in upper case: names, or
``"GET, PUT"``."""

FROZEN = ConfigDict(frozen=True, extra="forbid")
