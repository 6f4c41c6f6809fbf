"""Reading ``Retry-After``: delta-seconds or an HTTP date, never an exception.

A malformed value is ignored (the caller falls back to its own backoff), never
raised: a server's bad header must not break the client. What counts as
malformed: a sign, a fraction, more than `MAX_DIGITS` digits, digits or letters
outside ASCII, a date without its ``GMT`` zone or with an impossible day, and a
header sent more than once (which of two waits would be meant?).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Final

__all__ = ["MAX_DIGITS", "MAX_RETRY_AFTER", "parse_http_date", "parse_retry_after"]

MAX_RETRY_AFTER: Final = 86_400.0
"""The longest wait `parse_retry_after` returns, in seconds (a day): longer ones
are capped. Any wait past the call's deadline ends the call anyway."""

MAX_DIGITS: Final = 9
"""Delta-seconds with more digits than this (31 years and more) are malformed."""

_OWS = " \t"
_DELTA = re.compile(rf"[0-9]{{1,{MAX_DIGITS}}}")
_DAY = r"(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun)"
_LONG_DAY = r"(?:Monday|Tuesday|Wednesday|Thursday|Friday|Saturday|Sunday)"
_MONTH = r"(?P<month>Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)"
_TIME = r"(?P<hour>[0-9]{2}):(?P<minute>[0-9]{2}):(?P<second>[0-9]{2})"
_IMF_FIXDATE = re.compile(
    rf"{_DAY}, (?P<day>[0-9]{{2}}) {_MONTH} (?P<year>[0-9]{{4}}) {_TIME} GMT",
    # Without ASCII, IGNORECASE matches the long s (U+017F) for "s", the Kelvin
    # sign for "k", ...: a month read that way is no key of `_MONTHS`.
    re.IGNORECASE | re.ASCII,
)
_RFC850 = re.compile(
    rf"{_LONG_DAY}, (?P<day>[0-9]{{2}})-{_MONTH}-(?P<year>[0-9]{{2}}) {_TIME} GMT",
    re.IGNORECASE | re.ASCII,
)
_ASCTIME = re.compile(
    rf"{_DAY} {_MONTH} (?P<day>[0-9]{{2}}| [0-9]) {_TIME} (?P<year>[0-9]{{4}})",
    re.IGNORECASE | re.ASCII,
)
_MONTHS: Final = {
    name: number
    for number, name in enumerate(
        [
            "jan",
            "feb",
            "mar",
            "apr",
            "may",
            "jun",
            "jul",
            "aug",
            "sep",
            "oct",
            "nov",
            "dec",
        ],
        start=1,
    )
}


def parse_http_date(text: str, *, now: datetime) -> datetime | None:
    """An HTTP date in any of its three forms, as an aware UTC `datetime`.

    The forms are IMF-fixdate (``Sun, 06 Nov 1994 08:49:37 GMT``), the obsolete
    RFC 850 form (``Sunday, 06-Nov-94 08:49:37 GMT``) and asctime
    (``Sun Nov  6 08:49:37 1994``, which is UTC by definition). Names are read
    in any case; the day name is not checked against the date.

    Args:
        text: The value, without surrounding whitespace.
        now: The present, to place an RFC 850 two-digit year: it is read as
            the year with those digits in (now - 50, now + 50], so a year more
            than 50 years ahead is taken from the century before.

    Returns:
        The moment, or None when `text` is not an HTTP date.

    Example:
        >>> now = datetime(2025, 1, 1, tzinfo=UTC)
        >>> parse_http_date("Sunday, 06-Nov-94 08:49:37 GMT", now=now).isoformat()
        '1994-11-06T08:49:37+00:00'
    """
    found = (
        _IMF_FIXDATE.fullmatch(text)
        or _RFC850.fullmatch(text)
        or _ASCTIME.fullmatch(text)
    )
    if found is None:
        return None
    year = int(found["year"])
    if len(found["year"]) == 2:
        # The year with these last two digits within 50 years of now.
        year += now.year - now.year % 100
        if year > now.year + 50:
            year -= 100
        elif year <= now.year - 50:
            year += 100
    second = int(found["second"])
    try:
        return datetime(
            year,
            _MONTHS[found["month"].lower()],
            int(found["day"]),
            int(found["hour"]),
            int(found["minute"]),
            # A leap second reads as the second before it.
            59 if second == 60 else second,
            tzinfo=UTC,
        )
    except ValueError:
        return None


def parse_retry_after(
    values: Sequence[str], *, now: datetime, date: Sequence[str] = ()
) -> float | None:
    """The wait a ``Retry-After`` header asks for, in seconds, or None.

    Args:
        values: Every ``Retry-After`` value the response carries (httpx:
            ``response.headers.get_list("retry-after")``). Anything but exactly
            one is ignored.
        now: The present, an aware `datetime`; an HTTP date is read relative
            to it unless the response's own ``Date`` is valid.
        date: Every ``Date`` value of the response. When it is exactly one
            valid HTTP date, a ``Retry-After`` date is read relative to it, so
            the server's clock and ours need not agree.

    Returns:
        A finite wait in [0, `MAX_RETRY_AFTER`]: delta-seconds as given, a date
        as the time until it (0 for a date passed), capped; None for a missing
        or malformed value.

    Example:
        >>> now = datetime(2025, 1, 1, tzinfo=UTC)
        >>> parse_retry_after(["120"], now=now)
        120.0
        >>> parse_retry_after(["Wed, 01 Jan 2025 00:00:30 GMT"], now=now)
        30.0
        >>> parse_retry_after(["-1"], now=now) is None
        True
    """
    if len(values) != 1:
        return None
    text = values[0].strip(_OWS)
    if _DELTA.fullmatch(text):
        return min(float(text), MAX_RETRY_AFTER)
    until = parse_http_date(text, now=now)
    if until is None:
        return None
    if len(date) == 1:
        sent = parse_http_date(date[0].strip(_OWS), now=now)
        if sent is not None:
            now = sent
    wait = (until - now).total_seconds()
    return min(max(wait, 0.0), MAX_RETRY_AFTER)
