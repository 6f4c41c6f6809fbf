"""`Duration`: a `timedelta` field that also reads `"200ms"`, `"2s"`, `"5m"`, `"1h"`.

Numbers are seconds and ISO 8601 strings (`"PT0.2S"`) are read by pydantic
itself; this adds the short forms people write in configuration files, and a
bare number in a string (`"0.5"`, as environment variables give it) as seconds.
"""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Annotated

from pydantic import BeforeValidator, TypeAdapter, ValidationError

__all__ = ["Duration"]

# ASCII digits and spaces only: fullwidth or Arabic-Indic digits are no duration.
_SHORT = re.compile(
    r"\s*(?P<number>\d+(?:\.\d*)?|\.\d+)\s*(?P<unit>ms|s|m|h)?\s*", re.ASCII
)
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
_TIMEDELTA: TypeAdapter[timedelta] = TypeAdapter(timedelta)


def _read_short_form(value: object) -> object:
    if isinstance(value, bool):
        # pydantic would read True as one second.
        raise ValueError("a duration is a number of seconds or a string like '200ms'")
    if isinstance(value, str):
        found = _SHORT.fullmatch(value.lower())
        if found is not None:
            seconds = float(found["number"]) * _UNIT_SECONDS[found["unit"] or "s"]
            try:
                return timedelta(seconds=seconds)
            except OverflowError:
                # Raised as it is, it would escape pydantic unnamed.
                raise ValueError(
                    "too long a duration: it may not exceed 999,999,999 days"
                ) from None
        try:
            return _TIMEDELTA.validate_python(value)
        except ValidationError:
            # pydantic's own message ("invalid digit in duration") does not say
            # what a duration may look like.
            raise ValueError(
                f"{value!r} is not a duration: give seconds, '200ms', '2s', '5m', "
                "'1h' or ISO 8601 such as 'PT0.2S'"
            ) from None
    return value


Duration = Annotated[timedelta, BeforeValidator(_read_short_form)]
"""A `timedelta` read from a `timedelta`, seconds (a number or a numeric string),
`"200ms"`/`"2s"`/`"5m"`/`"1h"` or ISO 8601."""
