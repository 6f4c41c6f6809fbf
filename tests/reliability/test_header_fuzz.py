"""Every HTTP header http_resilience reads, fuzzed: nothing raises, no wait escapes.

The headers, and who reads them:

- ``Retry-After`` and ``Date``: `parse_retry_after` and `parse_http_date`, through
  `RetryDecision.delay` in the retry of both transports;
- ``Idempotency-Key``: `has_idempotency_key`, through `will_retry`;
- the correlation header (``X-Correlation-ID``): the stamp leaves a value the
  caller set as it is; `correlation_id` and `check_header_name` check the value
  and the name a user gives (their contract: `ValueError`, nothing else);
- ``Content-Length``, ``ETag`` and ``Last-Modified`` of a body's first response,
  and ``Content-Range``, ``Content-Length`` and ``ETag`` of a ``206``: where
  `resumable_bytes` picks a broken body up.

And the one header written from a number: the ``Retry-After`` of
`ResilienceErrorMiddleware`, which our own reader must read back.

Each parser gets at least 1,000 examples of arbitrary text and bytes (unicode,
case-folding look-alikes, huge and negative numbers, NaN and infinity spelled
out, dates from year 1 to 9999, garbage, nothing) next to well-formed values,
whose result is asserted exactly.
"""

from __future__ import annotations

import math
import re
import string
from collections.abc import AsyncIterator, Callable, MutableMapping
from datetime import UTC, datetime, timedelta
from typing import Any

import h11
import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from http_resilience import (
    AsyncResilientTransport,
    BrokenCircuitError,
    HttpResilienceOptions,
    RateLimitedError,
    ResilienceErrorMiddleware,
    ResilientTransport,
    StreamRetryOptions,
    correlation_id,
    resumable_bytes,
)
from http_resilience._core.call import Call
from http_resilience._core.clock import utc_now
from http_resilience._core.correlation import CORRELATION_EXTENSION
from http_resilience._core.retry_after import (
    MAX_RETRY_AFTER,
    parse_http_date,
    parse_retry_after,
)
from http_resilience._core.send import SyncSend
from http_resilience._strategies.retry.decision import RetryDecision
from http_resilience._streams.download import Download
from http_resilience._transport.stamp import (
    check_header_name,
    correlation_stamp,
)
from http_resilience.testing import FakeClock

pytestmark = pytest.mark.anyio

# Each parser's own test takes 1,000 examples; a test that checks the same
# parser again from another side (exact values, a second transport) fewer.
FUZZ = settings(
    max_examples=1000,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
AGAIN = settings(FUZZ, max_examples=300)

NOW = datetime(2025, 3, 1, 12, 0, 0, tzinfo=UTC)
URL = "http://fuzz.example/item"

# --- building blocks ------------------------------------------------------------------

DAYS = ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"]
LONG_DAYS = [
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "Saturday",
    "Sunday",
]
MONTHS = [
    "Jan",
    "Feb",
    "Mar",
    "Apr",
    "May",
    "Jun",
    "Jul",
    "Aug",
    "Sep",
    "Oct",
    "Nov",
    "Dec",
]


def imf_fixdate(moment: datetime) -> str:
    return (
        f"{DAYS[moment.weekday()]}, {moment.day:02d} {MONTHS[moment.month - 1]} "
        f"{moment.year:04d} {moment:%H:%M:%S} GMT"
    )


def rfc850(moment: datetime) -> str:
    return (
        f"{LONG_DAYS[moment.weekday()]}, {moment.day:02d}-"
        f"{MONTHS[moment.month - 1]}-{moment.year % 100:02d} {moment:%H:%M:%S} GMT"
    )


def asctime(moment: datetime) -> str:
    return (
        f"{DAYS[moment.weekday()]} {MONTHS[moment.month - 1]} {moment.day:2d} "
        f"{moment:%H:%M:%S} {moment.year:04d}"
    )


def expected_wait(moment: datetime, now: datetime) -> float:
    return min(max((moment - now).total_seconds(), 0.0), MAX_RETRY_AFTER)


# Year 1 to 9999: far past and far future, whole seconds as HTTP dates carry.
MOMENTS = st.datetimes(
    min_value=datetime(1, 1, 1),  # noqa: DTZ001 - hypothesis adds the zone
    max_value=datetime(9999, 12, 31, 23, 59, 59),  # noqa: DTZ001
    timezones=st.just(UTC),
).map(lambda moment: moment.replace(microsecond=0))
NOWS = st.datetimes(
    min_value=datetime(1970, 1, 1),  # noqa: DTZ001
    max_value=datetime(2200, 1, 1),  # noqa: DTZ001
    timezones=st.just(UTC),
)
# Within 50 years of NOW, so that an RFC 850 two-digit year reads back the same.
NEAR_NOW = st.datetimes(
    min_value=datetime(1976, 1, 1),  # noqa: DTZ001
    max_value=datetime(2075, 12, 31, 23, 59, 59),  # noqa: DTZ001
    timezones=st.just(UTC),
).map(lambda moment: moment.replace(microsecond=0))
FORMS = st.sampled_from([imf_fixdate, rfc850, asctime])

# The four non-ASCII letters Python's IGNORECASE matches for ASCII ones: a
# reader that trusts the match to be ASCII looks a month up that is not there.
LOOKALIKES = {"s": "\u017f", "k": "\u212a", "i": "\u0130\u0131"}


def spellings(char: str) -> list[str]:
    """`char`, in either case, and the look-alikes IGNORECASE would take for it."""
    return sorted({char, char.lower(), char.upper(), *LOOKALIKES.get(char.lower(), "")})


def scrambled(text: str, choices: int) -> str:
    """`text`, each letter in the case or look-alike `choices` picks, digit by digit.

    0 is `text` itself, which is where hypothesis shrinks to.
    """
    out: list[str] = []
    for char in text:
        variants = spellings(char)
        choices, pick = divmod(choices, len(variants))
        out.append(variants[pick])
    return "".join(out)


EDITS = st.lists(
    st.tuples(
        st.sampled_from(["replace", "insert", "delete"]),
        st.integers(min_value=0, max_value=40),
        st.one_of(
            st.sampled_from(
                [
                    *"\u017f\u212a\u0130\u0131\u0660\u0665\uff10\uff19",
                    *"\x00\x85\xa0\u2009\t ,-:+.e09",
                ]
            ),
            st.characters(),
        ),
    ),
    min_size=1,
    max_size=4,
)


def edited(text: str, edits: list[tuple[str, int, str]]) -> str:
    for kind, position, char in edits:
        at = position % (len(text) + 1)
        if kind == "insert":
            text = text[:at] + char + text[at:]
        elif kind == "delete":
            text = text[:at] + text[at + 1 :]
        else:
            text = text[:at] + char + text[at + 1 :]
    return text


NUMBER_SPELLINGS = [
    "NaN",
    "nan",
    "-nan",
    "Infinity",
    "-Infinity",
    "inf",
    "+inf",
    "1e400",
    "-1e400",
    "1e3",
    "0x1A",
    "1_000",
    "1.5",
    ".5",
    "5.",
    "-0",
    "+5",
    "\u0663",  # ARABIC-INDIC DIGIT THREE
    "\u0661\u0662\u0660",
    "\uff11\uff12\uff10",  # FULLWIDTH 120
    "9" * 10,
    "9" * 5000,
    "",
    " ",
]
OWS = st.sampled_from(["", " ", "\t", " \t "])
NUMBERS = st.one_of(
    st.integers().map(str),
    st.integers(min_value=-(10**40), max_value=10**40).map(str),
    st.floats().map(str),
    st.floats().map(repr),
    st.sampled_from(NUMBER_SPELLINGS),
    st.text(alphabet=string.digits, min_size=1, max_size=20),
)


def written(form: Callable[[datetime], str], moment: datetime) -> str:
    return form(moment)


def padded(before: str, text: str, after: str) -> str:
    return before + text + after


DATE_TEXT = st.builds(written, FORMS, MOMENTS)
CHOICES = st.integers(min_value=0, max_value=4**40)
SCRAMBLED_DATES = st.builds(scrambled, DATE_TEXT, CHOICES)
RETRY_AFTER_TEXT = st.one_of(
    st.builds(padded, OWS, NUMBERS, OWS),
    DATE_TEXT,
    SCRAMBLED_DATES,
    st.builds(edited, DATE_TEXT, EDITS),
    st.builds(edited, NUMBERS, EDITS),
    st.text(),
    st.text(alphabet=string.printable),
)
# Header values as bytes: httpx decodes them as ASCII, else UTF-8, else Latin-1.
HEADER_BYTES = st.one_of(
    # Lone surrogates pass as bytes no UTF-8 decoder takes: Latin-1 reads them.
    RETRY_AFTER_TEXT.map(lambda text: text.encode("utf-8", "surrogatepass")),
    st.binary(max_size=40),
    st.text(alphabet=" \t", max_size=4).map(str.encode),
)


def delta_seconds(text: str) -> float | None:
    """The wait a delta-seconds value spells, capped; None if it is not one."""
    stripped = text.strip(" \t")
    if re.fullmatch("[0-9]{1,9}", stripped, re.ASCII):
        return min(float(stripped), MAX_RETRY_AFTER)
    return None


def check_wait(wait: float | None) -> None:
    if wait is not None:
        assert math.isfinite(wait)
        assert 0.0 <= wait <= MAX_RETRY_AFTER


# --- Retry-After and Date, read directly ----------------------------------------------


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        (["120"], 120.0),
        (["0"], 0.0),
        ([" \t120\t "], 120.0),
        (["86400"], MAX_RETRY_AFTER),
        (["86401"], MAX_RETRY_AFTER),  # capped at a day
        (["999999999"], MAX_RETRY_AFTER),
        (["1000000000"], None),  # ten digits: malformed
        (["-5"], None),
        (["NaN"], None),
        (["inf"], None),
        (["1e3"], None),
        (["Sat, 01 Mar 2025 12:02:00 GMT"], 120.0),
        (["Saturday, 01-Mar-25 12:02:00 GMT"], 120.0),
        (["Sat Mar  1 12:02:00 2025"], 120.0),
        (["Mon, 01 Jan 0001 00:00:00 GMT"], 0.0),  # far past: no wait
        (["Fri, 31 Dec 9999 23:59:59 GMT"], MAX_RETRY_AFTER),  # far future: capped
        (["\u017fat, 01 \u017fep 2025 12:02:00 GMT"], None),  # long s for "s"
        (["Sat, 01 Mar 2025 12:02:00 GMT\u212a"], None),
        (["Sat, 01 Mar 2025 12:02:00 GMT", "120"], None),  # sent twice
        ([], None),
    ],
)
def test_well_formed_and_malformed_values_read_exactly(
    values: list[str], expected: float | None
) -> None:
    assert parse_retry_after(values, now=NOW) == expected


@FUZZ
@given(
    values=st.lists(RETRY_AFTER_TEXT, max_size=2),
    date=st.lists(st.one_of(RETRY_AFTER_TEXT, DATE_TEXT), max_size=2),
    now=NOWS,
)
def test_retry_after_never_raises_and_never_leaves_zero_to_a_day(
    values: list[str], date: list[str], now: datetime
) -> None:
    wait = parse_retry_after(values, now=now, date=date)
    check_wait(wait)
    if len(values) != 1:
        assert wait is None
    elif (spelled := delta_seconds(values[0])) is not None:
        assert wait == spelled


@FUZZ
@given(text=st.one_of(RETRY_AFTER_TEXT, SCRAMBLED_DATES), now=NOWS)
def test_http_dates_never_raise_and_are_aware_utc(text: str, now: datetime) -> None:
    found = parse_http_date(text, now=now)
    if found is not None:
        assert found.tzinfo is UTC
        assert text.isascii()


@AGAIN
@given(moment=MOMENTS, form=FORMS, now=NOWS, choices=CHOICES)
def test_a_date_in_any_case_reads_exactly_and_a_look_alike_not_at_all(
    moment: datetime, form: Callable[[datetime], str], now: datetime, choices: int
) -> None:
    text = scrambled(form(moment), choices)
    wait = parse_retry_after([text], now=now)
    check_wait(wait)
    if not text.isascii():
        assert wait is None
    elif form is not rfc850:
        assert wait == expected_wait(moment, now)
    elif now.year - 50 < moment.year <= now.year + 50:
        # Two digits of year name the year within 50 years of now.
        assert wait == expected_wait(moment, now)


@AGAIN
@given(moment=NEAR_NOW, sent=NEAR_NOW, form=FORMS, sent_form=FORMS)
def test_a_date_is_read_against_a_valid_date_header_exactly(
    moment: datetime,
    sent: datetime,
    form: Callable[[datetime], str],
    sent_form: Callable[[datetime], str],
) -> None:
    wait = parse_retry_after([form(moment)], now=NOW, date=[sent_form(sent)])
    assert wait == expected_wait(moment, sent)


# --- Retry-After through the retry's decision and the transports ----------------------


def decision(base_delay: float = 2.0) -> RetryDecision:
    return RetryDecision(
        max_retry_attempts=1,
        base_delay=base_delay,
        retry_unsafe_methods=False,
        random=lambda: 0.0,  # the backoff is exactly base_delay / 2
        wall_clock=lambda: NOW,
    )


@AGAIN
@given(
    status=st.sampled_from([429, 503, 500]),
    retry_after=st.lists(HEADER_BYTES, max_size=2),
    date=st.lists(HEADER_BYTES, max_size=2),
)
def test_the_decision_reads_any_header_bytes_into_a_wait_in_range(
    status: int, retry_after: list[bytes], date: list[bytes]
) -> None:
    headers = [(b"retry-after", value) for value in retry_after]
    headers += [(b"date", value) for value in date]
    response = httpx.Response(status, headers=headers)
    delay = decision().delay(1, response)
    assert math.isfinite(delay)
    assert 0.0 <= delay <= MAX_RETRY_AFTER
    if status == 500 or len(retry_after) != 1:
        assert delay == 1.0  # Retry-After is not honoured: the backoff
    elif (spelled := delta_seconds(response.headers["retry-after"])) is not None:
        assert delay == spelled
    later = decision().next_delay(1, response, now=100.0, deadline=130.0)
    assert later is None or 0.0 <= later < 30.0


TOTAL = 600.0  # seconds: the cap on any wait the transports may sleep


def options(**overrides: object) -> HttpResilienceOptions:
    return HttpResilienceOptions.model_validate(
        {
            "max_retry_attempts": 1,
            "total_request_timeout": TOTAL,
            "minimum_throughput": 10**6,  # the breaker stays out of the way
            **overrides,
        }
    )


OPTIONS = options()


def then_ok(
    first: httpx.Response,
) -> tuple[list[httpx.Request], Callable[[httpx.Request], httpx.Response]]:
    """A handler answering `first`, then 200; and the requests it saw."""
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return first if len(seen) == 1 else httpx.Response(200)

    return seen, handler


def check_slept(
    clock: FakeClock, status: int, attempts: int, asked: float | None, exact: bool
) -> None:
    """One wait in [0, TOTAL) then a second attempt; or no wait and the 503."""
    sleeps = clock.sleeps
    assert len(sleeps) <= 1
    for slept in sleeps:
        assert math.isfinite(slept)
        assert 0.0 <= slept < TOTAL
    if sleeps:
        assert (status, attempts) == (200, 2)
    else:
        assert (status, attempts) == (503, 1)
    if not exact:
        return
    if asked is None:
        assert sleeps == [1.0]  # malformed: the backoff, 2 s base, jitter 0.5
    else:
        # A valid Retry-After is slept exactly, or ends the call when it would
        # reach the total deadline: never shortened.
        assert sleeps == ([asked] if asked < TOTAL else [])


def fuzzed_503(
    raw: bytes, with_date: bool
) -> tuple[httpx.Response, float | None, bool]:
    """A 503 with `raw` as Retry-After; the wait it asks; whether that is exact.

    With the response's own Date, a date asks a wait that does not depend on
    our clock; without, it is checked for range only. The transports place an
    RFC 850 two-digit year against the real clock, and so does this.
    """
    headers = [(b"retry-after", raw)]
    if with_date:
        headers.append((b"date", imf_fixdate(NOW).encode()))
    response = httpx.Response(503, headers=headers)
    value = response.headers["retry-after"]
    if with_date:
        asked = parse_retry_after([value], now=utc_now(), date=[imf_fixdate(NOW)])
        return response, asked, True
    spelled = delta_seconds(value)
    if spelled is None and parse_http_date(value.strip(" \t"), now=utc_now()):
        return response, None, False
    return response, spelled, True


@FUZZ
@given(raw=HEADER_BYTES, with_date=st.booleans())
async def test_the_async_transport_sleeps_what_retry_after_asks_within_the_cap(
    raw: bytes, with_date: bool
) -> None:
    first, asked, exact = fuzzed_503(raw, with_date)
    seen, handler = then_ok(first)
    clock = FakeClock()
    transport = AsyncResilientTransport(
        httpx.MockTransport(handler), options=OPTIONS, clock=clock, random=lambda: 0.0
    )
    response = await transport.handle_async_request(httpx.Request("GET", URL))
    check_slept(clock, response.status_code, len(seen), asked, exact)


@AGAIN
@given(raw=HEADER_BYTES, with_date=st.booleans())
def test_the_sync_transport_sleeps_what_retry_after_asks_within_the_cap(
    raw: bytes, with_date: bool
) -> None:
    first, asked, exact = fuzzed_503(raw, with_date)
    seen, handler = then_ok(first)
    clock = FakeClock()
    transport = ResilientTransport(
        httpx.MockTransport(handler), options=OPTIONS, clock=clock, random=lambda: 0.0
    )
    response = transport.handle_request(httpx.Request("GET", URL))
    check_slept(clock, response.status_code, len(seen), asked, exact)


@pytest.mark.parametrize(
    ("value", "sleeps", "status"),
    [
        ("120", [120.0], 200),
        ("0", [0.0], 200),
        ("599", [599.0], 200),
        ("600", [], 503),  # would reach the deadline: the call ends at once
        ("86400", [], 503),
        ("-120", [1.0], 200),  # malformed: the backoff instead
        ("NaN", [1.0], 200),
        ("\u017fat, 01 \u017fep 2025 12:02:00 GMT", [1.0], 200),
    ],
)
async def test_well_formed_retry_after_through_the_transport(
    value: str, sleeps: list[float], status: int
) -> None:
    seen, handler = then_ok(
        httpx.Response(503, headers=[(b"retry-after", value.encode())])
    )
    clock = FakeClock()
    transport = AsyncResilientTransport(
        httpx.MockTransport(handler), options=OPTIONS, clock=clock, random=lambda: 0.0
    )
    response = await transport.handle_async_request(httpx.Request("GET", URL))
    assert (clock.sleeps, response.status_code) == (sleeps, status)
    assert len(seen) == (2 if sleeps else 1)


async def test_a_retry_after_date_is_slept_against_the_responses_date() -> None:
    asked = NOW + timedelta(seconds=120)
    first = httpx.Response(
        503,
        headers={"Retry-After": imf_fixdate(asked), "Date": imf_fixdate(NOW)},
    )
    seen, handler = then_ok(first)
    clock = FakeClock()
    transport = AsyncResilientTransport(
        httpx.MockTransport(handler), options=OPTIONS, clock=clock, random=lambda: 0.0
    )
    response = await transport.handle_async_request(httpx.Request("GET", URL))
    assert (clock.sleeps, response.status_code, len(seen)) == ([120.0], 200, 2)


# --- Idempotency-Key ------------------------------------------------------------------


VISIBLE = frozenset(range(0x21, 0x7F))


@FUZZ
@given(
    keys=st.lists(HEADER_BYTES, max_size=3),
    method=st.sampled_from(["POST", "PATCH", "CONNECT"]),
)
def test_any_idempotency_key_bytes_decide_the_retry_without_raising(
    keys: list[bytes], method: str
) -> None:
    request = httpx.Request(
        method, URL, headers=[(b"idempotency-key", key) for key in keys]
    )
    seen, handler = then_ok(httpx.Response(503))
    clock = FakeClock()
    transport = ResilientTransport(
        httpx.MockTransport(handler), options=OPTIONS, clock=clock, random=lambda: 0.0
    )
    retried = transport.will_retry(request)
    if any(VISIBLE.intersection(key) for key in keys):
        assert retried is True
    elif all(set(key) <= {0x20, 0x09} for key in keys):
        assert retried is False  # no key, or only blanks: an unsafe method
    response = transport.handle_request(request)
    assert len(seen) == (2 if retried else 1)
    assert response.status_code == (200 if retried else 503)


# --- the correlation header -----------------------------------------------------------


HEADER = "X-Correlation-ID"


@FUZZ
@given(existing=st.lists(HEADER_BYTES, max_size=2), chosen=st.uuids().map(str))
def test_a_correlation_header_the_caller_set_is_sent_byte_for_byte(
    existing: list[bytes], chosen: str
) -> None:
    sent: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        return httpx.Response(200)

    request = httpx.Request(
        "GET", URL, headers=[(HEADER.encode(), value) for value in existing]
    )
    request.extensions[CORRELATION_EXTENSION] = chosen
    send = SyncSend(httpx.MockTransport(handler), correlation_stamp(HEADER))
    send.handle_sync(request, Call("fuzz", "GET", "http://h:80"))
    raw = [
        value
        for name, value in sent[0].headers.raw
        if name.lower() == b"x-correlation-id"
    ]
    assert raw == (existing or [chosen.encode()])


CORRELATION_IDS = st.one_of(
    st.text(),
    st.text(alphabet=string.printable, max_size=210),
    st.text(
        alphabet=[chr(code) for code in range(0x21, 0x7F)], min_size=1, max_size=210
    ),
)


@FUZZ
@given(value=CORRELATION_IDS)
def test_a_correlation_id_is_visible_ascii_or_a_value_error(value: str) -> None:
    visible = 1 <= len(value) <= 200 and all(
        "!" <= char <= "~" and char != "," for char in value
    )
    if not visible:
        with (
            pytest.raises(ValueError, match="visible ASCII") as raised,
            correlation_id(value),
        ):
            pass  # pragma: no cover - never entered
        # A fixed message: it never repeats the value it refused.
        assert str(raised.value) == (
            "a correlation id is 1 to 200 visible ASCII characters without spaces "
            "or commas"
        )
        return
    with correlation_id(value) as made:
        assert made == value
    # What is accepted goes into a header as it is, and comes back the same.
    assert httpx.Headers({HEADER: value})[HEADER] == value


TOKEN_CHARS = "!#$%&'*+-.^_`|~" + string.ascii_letters + string.digits
HEADER_NAMES = st.one_of(
    st.text(max_size=20),
    st.text(alphabet=TOKEN_CHARS, max_size=20),
    st.text(alphabet=string.printable, max_size=20),
)


# Put on requests by httpx itself: a correlation header of one of these names
# would never be stamped.
SET_BY_HTTPX = {
    "host",
    "accept",
    "accept-encoding",
    "connection",
    "user-agent",
    "content-length",
    "transfer-encoding",
}


@FUZZ
@given(name=st.one_of(HEADER_NAMES, st.sampled_from(sorted(SET_BY_HTTPX))))
def test_a_correlation_header_name_is_a_token_or_a_value_error(name: str) -> None:
    is_token = name != "" and all(char in TOKEN_CHARS for char in name)
    if not is_token:
        with pytest.raises(ValueError, match="correlation_header must be an HTTP"):
            check_header_name(name)
        return
    if name.lower() in SET_BY_HTTPX:
        with pytest.raises(ValueError, match="httpx sets it on requests itself"):
            check_header_name(name)
        return
    assert check_header_name(name) == name
    # An independent HTTP implementation takes it as a header name. (HTTP/1.0
    # needs no Host, and "chunked" keeps Transfer-Encoding's value valid: only
    # the name is under test.)
    value = "chunked" if name.lower() == "transfer-encoding" else "1"
    h11.Request(method="GET", target="/", http_version="1.0", headers=[(name, value)])


# --- Content-Length, ETag, Last-Modified, Content-Range (resumable downloads) ---------


def spelled_length(value: str) -> int | None:
    if value.isascii() and value.isdigit() and len(value) <= 18:
        return int(value)
    return None


def range_of(start: str, end: str, total: str) -> str:
    return f"bytes {start}-{end}/{total}"


def whole_range(start: int, length: int) -> str:
    return f"bytes {start}-{length - 1}/{length}"


RANGE_TEXT = st.one_of(
    st.builds(
        range_of,
        NUMBERS,
        NUMBERS,
        st.one_of(NUMBERS, st.just("*")),
    ),
    st.builds(
        edited,
        st.builds(
            whole_range,
            st.integers(min_value=0, max_value=10**20),
            st.integers(min_value=1, max_value=10**20),
        ),
        EDITS,
    ),
    st.text(),
)
RESUMABLE_HEADER = st.one_of(
    HEADER_BYTES, RANGE_TEXT.map(lambda text: text.encode("utf-8", "surrogatepass"))
)


def header_list(**values: bytes | None) -> list[tuple[bytes, bytes]]:
    return [
        (name.replace("_", "-").encode(), value)
        for name, value in values.items()
        if value is not None
    ]


def answer(
    status: int, headers: list[tuple[bytes, bytes]] | dict[str, str]
) -> httpx.Response:
    """A response to a GET of `URL` (`raise_for_status` needs its request)."""
    return httpx.Response(status, headers=headers, request=httpx.Request("GET", URL))


def sendable(value: str | None) -> bool:
    """Whether `value` can go back out in a header httpx writes (ASCII)."""
    return bool(value) and all(" " <= char <= "~" for char in value or "")


@FUZZ
@given(
    etag=st.none() | RESUMABLE_HEADER,
    last_modified=st.none() | RESUMABLE_HEADER,
    length=st.none() | RESUMABLE_HEADER,
    content_range=st.none() | RESUMABLE_HEADER,
    partial_length=st.none() | RESUMABLE_HEADER,
    partial_etag=st.none() | RESUMABLE_HEADER,
    offset=st.integers(min_value=1, max_value=10**6),
)
def test_resume_headers_never_raise_and_a_length_is_what_the_digits_spell(
    etag: bytes | None,
    last_modified: bytes | None,
    length: bytes | None,
    content_range: bytes | None,
    partial_length: bytes | None,
    partial_etag: bytes | None,
    offset: int,
) -> None:
    # RESTART_FROM_START: a 206 that does not fit is answered by asking again,
    # never by raising, so any exception here is the parser's.
    download = Download(httpx.Request("GET", URL), restart=True)
    first = answer(
        200,
        header_list(ETag=etag, Last_Modified=last_modified, Content_Length=length),
    )
    assert download.accept(first, 0) is True
    learned = first.headers.get("Content-Length")
    assert download.length == (None if learned is None else spelled_length(learned))
    tag, modified = first.headers.get("ETag"), first.headers.get("Last-Modified")
    if tag is not None and tag.startswith('"') and sendable(tag):
        assert download.validator == tag
    elif sendable(modified):
        assert download.validator == modified
    else:
        assert download.validator is None
    if download.validator is not None:
        # The resume request carries it back: building it must not raise.
        resume = download.prepare(offset)
        if resume is not None:
            assert resume.headers["If-Range"] == download.validator

    partial = answer(
        206,
        header_list(
            Content_Range=content_range,
            Content_Length=partial_length,
            ETag=partial_etag,
        ),
    )
    stitched = download.accept(partial, offset)
    if stitched:
        spelled = re.fullmatch(
            r"bytes\s+([0-9]+)-([0-9]+)/([0-9]+|\*)",
            partial.headers["Content-Range"].strip(),
            re.ASCII | re.IGNORECASE,
        )
        assert spelled is not None
        assert int(spelled[1]) == offset
    else:
        assert download.base == offset  # starts over, as the policy says


@AGAIN
@given(
    total=st.integers(min_value=2, max_value=10**18 - 1),  # 18 digits at most
    data=st.data(),
    repeat_etag=st.booleans(),
    known_total=st.booleans(),
)
def test_a_well_formed_206_is_stitched(
    total: int, data: st.DataObject, repeat_etag: bool, known_total: bool
) -> None:
    offset = data.draw(st.integers(min_value=1, max_value=total - 1))
    download = Download(httpx.Request("GET", URL), restart=False)
    first = answer(200, {"ETag": '"v1"', "Content-Length": str(total)})
    assert download.accept(first, 0) is True
    assert download.length == total
    headers = {
        "Content-Range": f"bytes {offset}-{total - 1}/{total if known_total else '*'}",
        "Content-Length": str(total - offset),
    }
    if repeat_etag:
        headers["ETag"] = '"v1"'
    assert download.accept(answer(206, headers), offset) is True


BODY = bytes(range(256)) * 8  # 2,048 bytes
CUT = 700


class Broken(httpx.AsyncByteStream):
    """The first body: `CUT` bytes, then the connection drops."""

    async def __aiter__(self) -> AsyncIterator[bytes]:
        yield BODY[:CUT]
        raise httpx.RemoteProtocolError("peer closed connection")


class Rest(httpx.AsyncByteStream):
    def __init__(self, data: bytes) -> None:
        self.data = data

    async def __aiter__(self) -> AsyncIterator[bytes]:
        yield self.data


@AGAIN
@given(
    etag=st.sampled_from([b'"v1"', b'W/"v1"', None]),
    last_modified=st.none() | RESUMABLE_HEADER,
    content_range=st.none() | RESUMABLE_HEADER,
    partial_length=st.none() | RESUMABLE_HEADER,
    partial_etag=st.none() | RESUMABLE_HEADER,
)
async def test_resumable_bytes_gives_the_whole_body_or_the_break_never_a_parse_error(
    etag: bytes | None,
    last_modified: bytes | None,
    content_range: bytes | None,
    partial_length: bytes | None,
    partial_etag: bytes | None,
) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        if "Range" not in request.headers:
            headers = header_list(
                ETag=etag,
                Last_Modified=last_modified,
                Content_Length=str(len(BODY)).encode(),
            )
            return httpx.Response(200, headers=headers, stream=Broken())
        return httpx.Response(
            206,
            headers=header_list(
                Content_Range=content_range,
                Content_Length=partial_length,
                ETag=partial_etag,
            ),
            stream=Rest(BODY[CUT:]),
        )

    received = bytearray()
    retry = StreamRetryOptions(
        clock=FakeClock(), use_jitter=False, max_retry_attempts=1
    )
    async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
        try:
            async for chunk in resumable_bytes(client, URL, retry):
                received += chunk
        except httpx.RemoteProtocolError:
            assert bytes(received) == BODY[:CUT]  # the break, as it was
        else:
            assert bytes(received) == BODY


async def test_a_well_formed_resume_through_resumable_bytes_is_exact() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        if "Range" not in request.headers:
            return httpx.Response(200, headers={"ETag": '"v1"'}, stream=Broken())
        assert request.headers["Range"] == f"bytes={CUT}-"
        assert request.headers["If-Range"] == '"v1"'
        return httpx.Response(
            206,
            headers={
                "Content-Range": f"bytes {CUT}-{len(BODY) - 1}/{len(BODY)}",
                "Content-Length": str(len(BODY) - CUT),
            },
            stream=Rest(BODY[CUT:]),
        )

    received = bytearray()
    retry = StreamRetryOptions(clock=FakeClock(), use_jitter=False)
    async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
        async for chunk in resumable_bytes(client, URL, retry):
            received += chunk
    assert bytes(received) == BODY


# --- the Retry-After the ASGI middleware writes ---------------------------------------


async def problem_headers(error: Exception) -> dict[bytes, bytes]:
    async def app(scope: Any, receive: Any, send: Any) -> None:
        raise error

    messages: list[MutableMapping[str, Any]] = []

    async def send(message: MutableMapping[str, Any]) -> None:
        messages.append(message)

    async def receive() -> MutableMapping[str, Any]:
        return {
            "type": "http.request",
            "body": b"",
            "more_body": False,
        }  # pragma: no cover

    await ResilienceErrorMiddleware(app)({"type": "http"}, receive, send)
    return dict(messages[0]["headers"])


WAITS = st.one_of(
    st.none(),
    st.floats(),
    st.floats(min_value=-1e6, max_value=2 * MAX_RETRY_AFTER),
    st.integers(min_value=-(10**6), max_value=10**12).map(float),
)


@FUZZ
@given(wait=WAITS, limited=st.booleans())
async def test_the_retry_after_written_is_whole_seconds_our_reader_reads_back(
    wait: float | None, limited: bool
) -> None:
    error: Exception = (
        RateLimitedError("quota spent", retry_after=wait, reason="quota")
        if limited
        else BrokenCircuitError("open", retry_after=wait)
    )
    written = (await problem_headers(error)).get(b"retry-after")
    if wait is None or not math.isfinite(wait):
        assert written is None
        return
    assert written is not None
    assert written.isdigit()
    seconds = int(written)
    # Rounded up, never negative, at most a day: always what a reader heeds.
    assert seconds == min(max(0, math.ceil(wait)), int(MAX_RETRY_AFTER))
    assert parse_retry_after([written.decode()], now=NOW) == float(seconds)
