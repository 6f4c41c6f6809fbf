"""`Retry-After` to the exact figure: the RFC 850 century both ways, whitespace.

Written to close what mutation testing (`make mutation`) found the other
`Retry-After` tests let through.
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from http_resilience._retry_after import parse_http_date, parse_retry_after

NOW = datetime(2025, 3, 1, 12, 0, 0, tzinfo=UTC)
# Late in a century, so that small two-digit years belong to the next one.
LATE = datetime(2080, 6, 1, tzinfo=UTC)


@pytest.mark.parametrize(
    ("two_digits", "year"),
    [
        ("29", 2129),
        ("30", 2130),  # now + 50: the last year of the window
        ("31", 2031),  # now - 49: the first
        ("80", 2080),
        ("99", 2099),
        ("00", 2100),
    ],
)
def test_an_rfc850_year_50_years_back_or_more_is_from_the_next_century(
    two_digits: str, year: int
) -> None:
    found = parse_http_date(f"Sunday, 06-Nov-{two_digits} 08:49:37 GMT", now=LATE)
    assert found == datetime(year, 11, 6, 8, 49, 37, tzinfo=UTC)


@pytest.mark.parametrize(
    "value",
    [
        "\x0b120",  # vertical tab
        "120\x0c",  # form feed
        "\r\n120",
        "120\n",
        "\xa0120",  # no-break space
        "\u2003120",  # em space
    ],
)
def test_only_spaces_and_tabs_are_optional_whitespace(value: str) -> None:
    assert parse_retry_after([value], now=NOW) is None
    assert parse_retry_after([" \t120\t "], now=NOW) == 120.0


def test_a_date_header_in_the_rfc850_form_is_the_reference_too() -> None:
    # The server's clock is a day behind ours; its own Date gives the wait.
    wait = parse_retry_after(
        ["Fri, 28 Feb 2025 12:01:00 GMT"],
        now=NOW,
        date=["Friday, 28-Feb-25 12:00:00 GMT"],
    )
    assert wait == 60.0


@pytest.mark.parametrize(
    ("date", "expected"),
    [
        (" \tFri, 28 Feb 2025 12:00:00 GMT\t ", 60.0),  # the server's clock
        ("\x0bFri, 28 Feb 2025 12:00:00 GMT", 0.0),  # malformed: ours, passed
        ("Fri, 28 Feb 2025 12:00:00 GMT\xa0", 0.0),
    ],
)
def test_a_date_header_takes_spaces_and_tabs_around_it_and_nothing_else(
    date: str, expected: float
) -> None:
    wait = parse_retry_after(["Fri, 28 Feb 2025 12:01:00 GMT"], now=NOW, date=[date])
    assert wait == expected
