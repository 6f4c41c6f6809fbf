"""`Retry-After`: every form read, every malformed value ignored, never raised."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from http_resilience._core.retry_after import (
    MAX_RETRY_AFTER,
    parse_http_date,
    parse_retry_after,
)

NOW = datetime(2025, 3, 1, 12, 0, 0, tzinfo=UTC)


def wait(*values: str, date: tuple[str, ...] = ()) -> float | None:
    return parse_retry_after(values, now=NOW, date=date)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("0", 0.0),
        ("2", 2.0),
        ("120", 120.0),
        ("  7\t", 7.0),
        ("007", 7.0),
        ("999999999", MAX_RETRY_AFTER),
        ("86401", MAX_RETRY_AFTER),
    ],
)
def test_delta_seconds(value: str, expected: float) -> None:
    assert wait(value) == expected


@pytest.mark.parametrize(
    "value",
    [
        "Sat, 01 Mar 2025 12:00:30 GMT",  # IMF-fixdate
        "Saturday, 01-Mar-25 12:00:30 GMT",  # RFC 850
        "Sat Mar  1 12:00:30 2025",  # asctime
        "sat, 01 mar 2025 12:00:30 gmt",  # names in any case
        "Mon, 01 Mar 2025 12:00:30 GMT",  # the day name is not checked
    ],
)
def test_all_three_http_date_forms(value: str) -> None:
    assert wait(value) == 30.0


def test_a_date_in_the_past_is_no_wait() -> None:
    assert wait("Sat, 01 Mar 2025 11:00:00 GMT") == 0.0


def test_a_far_date_is_capped() -> None:
    assert wait("Sat, 01 Mar 2125 12:00:00 GMT") == MAX_RETRY_AFTER


def test_a_date_is_read_against_the_responses_own_date() -> None:
    # The server's clock is an hour behind ours: its 30 s are still 30 s.
    assert (
        wait(
            "Sat, 01 Mar 2025 11:00:30 GMT",
            date=("Sat, 01 Mar 2025 11:00:00 GMT",),
        )
        == 30.0
    )


@pytest.mark.parametrize(
    "date",
    [(), ("nonsense",), ("Sat, 01 Mar 2025 11:00:00 GMT",) * 2],
)
def test_without_one_valid_date_header_our_clock_is_used(date: tuple[str, ...]) -> None:
    assert wait("Sat, 01 Mar 2025 12:00:30 GMT", date=date) == 30.0


def test_delta_seconds_ignore_the_date_header() -> None:
    assert wait("5", date=("Sat, 01 Mar 2025 00:00:00 GMT",)) == 5.0


@pytest.mark.parametrize(
    "value",
    [
        "",
        " ",
        "-1",
        "+5",
        "1.5",
        "1e3",
        "nan",
        "NaN",
        "inf",
        "-0",
        "0x10",
        "1_000",
        "5 s",
        "5,6",
        "\u0665",  # ARABIC-INDIC DIGIT FIVE: a digit to str.isdigit, not to HTTP
        "\uff11\uff12",  # FULLWIDTH digits
        "1" * 10,
        "9" * 5000,
        "Sat, 01 Mar 2025 12:00:30",  # IMF-fixdate without its zone
        "Sat, 01 Mar 2025 12:00:30 UTC",
        "Sat, 01 Mar 2025 12:00:30 +0000",
        "Saturday, 01-Mar-25 12:00:30",  # RFC 850 without its zone
        "2025-03-01T12:00:30Z",  # ISO 8601 is not an HTTP date
        "Sat, 30 Feb 2025 12:00:30 GMT",  # no such day
        "Sat, 01 Mar 2025 24:00:00 GMT",
        "Sat, 01 Mar 2025 12:61:00 GMT",
        "Sat, 01 Foo 2025 12:00:30 GMT",
        "Sat, 1 Mar 2025 12:00:30 GMT",  # IMF-fixdate wants two digits
        "Sat Mar 1 12:00:30 2025",  # asctime pads a one-digit day with a space
        "Sat, 01 Mar 2025 12:00:30 GMT trailing",
        "Sat, \u0660\u0661 Mar 2025 12:00:30 GMT",  # ARABIC-INDIC day
    ],
)
def test_malformed_values_are_ignored(value: str) -> None:
    assert wait(value) is None


def test_a_repeated_header_is_ignored_even_when_the_values_agree() -> None:
    assert wait("5", "5") is None
    assert wait("5", "Sat, 01 Mar 2025 12:00:30 GMT") is None
    assert wait() is None


def test_a_leap_second_reads_as_the_second_before() -> None:
    assert wait("Sat, 01 Mar 2025 12:00:60 GMT") == 59.0


@pytest.mark.parametrize(
    ("two_digits", "year"),
    [("25", 2025), ("75", 2075), ("76", 1976), ("94", 1994), ("00", 2000)],
)
def test_an_rfc850_year_more_than_50_years_ahead_is_from_the_last_century(
    two_digits: str, year: int
) -> None:
    found = parse_http_date(f"Sunday, 06-Nov-{two_digits} 08:49:37 GMT", now=NOW)
    assert found is not None
    assert found.year == year


# --- properties --------------------------------------------------------------


def check(result: float | None) -> None:
    if result is not None:
        assert math.isfinite(result)
        assert 0.0 <= result <= MAX_RETRY_AFTER


DIGITS = st.text(alphabet="0123456789", min_size=1, max_size=12)
DATES = st.datetimes(
    min_value=datetime(1900, 1, 1),  # noqa: DTZ001 - hypothesis adds the zone
    max_value=datetime(2200, 1, 1),  # noqa: DTZ001
    timezones=st.just(UTC),
)
NOWS = st.datetimes(
    min_value=datetime(1970, 1, 1),  # noqa: DTZ001
    max_value=datetime(2100, 1, 1),  # noqa: DTZ001
    timezones=st.just(UTC),
)


@settings(max_examples=1500, deadline=None)
@given(
    values=st.lists(
        st.one_of(
            st.text(max_size=40),
            DIGITS,
            st.integers(min_value=-(10**12), max_value=10**12).map(str),
            st.floats(allow_nan=True, allow_infinity=True).map(str),
            DATES.map(lambda moment: moment.strftime("%a, %d %b %Y %H:%M:%S GMT")),
        ),
        max_size=3,
    ),
    date=st.lists(st.text(max_size=40), max_size=2),
    now=NOWS,
)
def test_the_parser_never_raises_and_never_answers_out_of_range(
    values: list[str], date: list[str], now: datetime
) -> None:
    check(parse_retry_after(values, now=now, date=date))


@settings(max_examples=1000, deadline=None)
@given(digits=DIGITS)
def test_delta_seconds_up_to_nine_digits_are_read_and_capped(digits: str) -> None:
    result = parse_retry_after([digits], now=NOW)
    if len(digits) > 9:
        assert result is None
    else:
        assert result == min(float(int(digits)), MAX_RETRY_AFTER)


@settings(max_examples=1000, deadline=None)
@given(moment=DATES, now=NOWS)
def test_every_form_of_a_date_gives_the_same_wait(
    moment: datetime, now: datetime
) -> None:
    moment = moment.replace(microsecond=0)
    forms = [
        moment.strftime("%a, %d %b %Y %H:%M:%S GMT"),
        f"{moment:%a %b} {moment.day:2d} {moment:%H:%M:%S %Y}",
    ]
    expected = min(max((moment - now).total_seconds(), 0.0), MAX_RETRY_AFTER)
    for form in forms:
        assert parse_retry_after([form], now=now) == expected
    rfc850 = moment.strftime("%A, %d-%b-%y %H:%M:%S GMT")
    check(parse_retry_after([rfc850], now=now))
    if now.year - 49 <= moment.year <= now.year + 50:
        assert parse_retry_after([rfc850], now=now) == expected


def test_a_date_one_hour_ahead_is_an_hour() -> None:
    ahead = NOW + timedelta(hours=1)
    assert wait(ahead.strftime("%a, %d %b %Y %H:%M:%S GMT")) == 3600.0


# --- to the exact figure: the RFC 850 century both ways, whitespace ---------
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
