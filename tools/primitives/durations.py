"""`Duration`: a `timedelta` field that also reads seconds, `"200ms"` and ISO 8601.

The packages may not import each other, and a duration must read the same in
each: each keeps a copy of this module in its ``_primitives/``, written by
tools/copy_primitives.py from tools/primitives/durations.py.

A duration is one of:

- a `timedelta`;
- a number of seconds, `int` or `float`;
- a string: a number of seconds, with a unit or without (``ms``, ``s``,
  ``m``, ``h``, in any letter case), digits in ASCII, spaces allowed around
  the number and the unit (``"200ms"``, ``"1.5 s"``, ``".5"``, ``"2H"``,
  ``"0.5"`` as environment variables give it); or any other string pydantic
  reads as a `timedelta`, ISO 8601 above all (``"PT0.2S"``, ``"P1DT2H"``).
  Spaces around the whole string are ignored.

It is refused, with a message saying what a duration is: True and False
(pydantic would read one second), negative, NaN and infinite numbers,
negative strings and `timedelta`s, anything else, and anything longer than
`MAX_DURATION`.
"""

from __future__ import annotations

import math
import re
from datetime import timedelta
from typing import TYPE_CHECKING, Annotated, Final, TypeAlias

from pydantic import BeforeValidator, TypeAdapter, ValidationError, ValidationInfo

if TYPE_CHECKING:
    from .setting import Setting

__all__ = [
    "MAX_DURATION",
    "Duration",
    "DurationInput",
    "OptionalDuration",
    "in_seconds",
    "read_duration",
]

MAX_DURATION: Final = timedelta(days=24)
"""The longest duration an option takes: 24 days.

One limit for every duration (a breaker's window is held to it too, though
nothing waits it). Each runtime caps its waits: `time.sleep`,
`threading` waits and socket timeouts raise `OverflowError` past 2**63 - 1
nanoseconds on Linux (`threading.TIMEOUT_MAX`, about 292 years), thread waits
past 2**32 - 2 milliseconds on Windows (`threading.TIMEOUT_MAX` there, 49.7
days), and `selectors`/`select.epoll` past 2**31 - 1 milliseconds (24.8 days).
asyncio caps its own waits and takes any length. 24 days is below each, so an
option that validates can always be waited.
"""

DurationInput: TypeAlias = timedelta | float | str
"""What a duration option takes: a `timedelta`, seconds, or a string."""

_SPACES = " \t\n\r\f\v"
# ASCII digits only: fullwidth or Arabic-Indic digits are no duration.
_SHORT = re.compile(
    r"(?P<sign>[+-]?)\s*(?P<number>\d+(?:\.\d*)?|\.\d+)\s*(?P<unit>ms|s|m|h)?",
    re.ASCII | re.IGNORECASE,
)
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
_MAX_SECONDS = MAX_DURATION.total_seconds()
_LONGEST = 40  # characters of a value quoted in a message
_TIMEDELTA: TypeAdapter[timedelta] = TypeAdapter(timedelta)


def read_duration(value: object, name: str = "a duration") -> timedelta:
    """Read `value` as a duration (see the module's docstring for the rules).

    Args:
        value: The duration as given.
        name: What to call it in an error: the option's field name.

    Raises:
        ValueError: `value` is no duration, is negative, or is longer than
            `MAX_DURATION`; the message says which and what a duration is.

    Example:
        >>> read_duration("200MS")
        datetime.timedelta(microseconds=200000)
    """
    if isinstance(value, bool):
        raise ValueError("a duration is a number of seconds or a string like '200ms'")
    if isinstance(value, int | float):
        # An int is compared as it is: float() of a huge one would overflow.
        if not (isinstance(value, int) or math.isfinite(value)) or value < 0:
            raise ValueError(
                f"a duration must be finite and not negative, got {_shown(value)}"
            )
        return _from_seconds(value, name, f"{_shown(value)} s")
    if isinstance(value, str):
        text = value.strip(_SPACES)
        found = _SHORT.fullmatch(text)
        if found is not None:
            unit = (found["unit"] or "s").lower()
            seconds = float(found["number"]) * _UNIT_SECONDS[unit]
            if found["sign"] == "-" and seconds > 0:
                raise ValueError(
                    f"a duration must not be negative, got {_shown(value)}"
                )
            return _from_seconds(seconds, name, _shown(value))
        return _checked(_parsed(text, value), name, _shown(value))
    return _checked(
        value if isinstance(value, timedelta) else _parsed(value, value),
        name,
        _shown(value),
    )


def in_seconds(duration: timedelta) -> str:
    """`duration` for a message, in seconds: ``"45 s"``, ``"0.2 s"``.

    Example:
        >>> in_seconds(timedelta(days=24))
        '2073600 s'
    """
    return f"{duration.total_seconds():.15g} s"


def _from_seconds(seconds: float, name: str, shown: str) -> timedelta:
    if seconds > _MAX_SECONDS:
        raise ValueError(_too_long(name, shown))
    return timedelta(seconds=seconds)


def _parsed(value: object, given: object) -> timedelta:
    try:
        return _TIMEDELTA.validate_python(value)
    except ValidationError:
        # pydantic's own message ("invalid digit in duration") does not say
        # what a duration may look like.
        raise ValueError(
            f"{_shown(given)} is not a duration: give seconds, '200ms', '2s', '5m', "
            "'1h' or ISO 8601 such as 'PT0.2S'"
        ) from None


def _checked(duration: timedelta, name: str, shown: str) -> timedelta:
    if duration < timedelta(0):
        raise ValueError(f"a duration must not be negative, got {shown}")
    if duration > MAX_DURATION:
        raise ValueError(_too_long(name, shown))
    return duration


def _shown(value: object) -> str:
    """`value` for a message: a `timedelta` as `str` gives it, the rest cut short."""
    if isinstance(value, timedelta):
        return str(value)
    if isinstance(value, int) and abs(value) > 10**_LONGEST:
        # repr() of an int past 4300 digits raises.
        sign = "-" if value < 0 else ""
        return f"about {sign}10**{int(math.log10(abs(value)))}"
    text = repr(value)
    return text if len(text) <= _LONGEST else text[: _LONGEST - 3] + "..."


def _too_long(name: str, shown: str) -> str:
    return (
        f"{name} may be at most 24 days (MAX_DURATION), the longest wait that "
        f"sleeps, thread waits and socket timeouts take on every platform; "
        f"got {shown}"
    )


def _validate(value: object, info: ValidationInfo) -> timedelta:
    return read_duration(value, info.field_name or "a duration")


if TYPE_CHECKING:
    Duration = Setting[timedelta, DurationInput]
    OptionalDuration = Setting[timedelta | None, DurationInput | None]
else:
    Duration = Annotated[timedelta, BeforeValidator(_validate)]
    OptionalDuration = Duration | None
"""`Duration`: a `timedelta` field read by `read_duration`: seconds, strings,
ISO 8601. `OptionalDuration`: the same, or None.

To type checkers each is a `Setting` that takes `DurationInput` (or None) and
holds a `timedelta` (or None), so a model's constructor takes every form
pydantic reads; a default is given through `default`
(``timeout: Duration = default(DEFAULT_TIMEOUT)``).
"""
