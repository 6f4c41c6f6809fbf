"""One table of duration rules, run against the parser of both resilience packages.

`http_resilience` and `mediator_resilience` may not import each other, so each
holds its own copy of the parser; these tests hold both to the same rules: the
same table, the same files, and a maximum every runtime wait accepts.
"""

from __future__ import annotations

import math
import selectors
import socket
import threading
from collections.abc import Callable
from datetime import timedelta
from decimal import Decimal
from pathlib import Path

import pytest

from http_resilience._primitives import durations as http_duration
from mediator_resilience._primitives import durations as mediator_duration

Parser = Callable[[object, str], timedelta]

PARSERS = [
    pytest.param(http_duration.read_duration, id="http_resilience"),
    pytest.param(mediator_duration.read_duration, id="mediator_resilience"),
]

TOO_LONG = (
    "base_delay may be at most 24 days (MAX_DURATION), the longest wait that "
    "sleeps, thread waits and socket timeouts take on every platform; got "
)
NOT_A_DURATION = (
    " is not a duration: give seconds, '200ms', '2s', '5m', '1h' or ISO 8601 "
    "such as 'PT0.2S'"
)

ms = timedelta(milliseconds=1)
s = timedelta(seconds=1)

# value -> the duration read, or the exact message of the refusal.
RULES: list[tuple[object, timedelta | str]] = [
    # A timedelta, as it is.
    (timedelta(0), timedelta(0)),
    (timedelta(seconds=7), 7 * s),
    (timedelta(days=24), timedelta(days=24)),
    # Numbers are seconds.
    (0, timedelta(0)),
    (2, 2 * s),
    (0.25, 250 * ms),
    (-0.0, timedelta(0)),
    (1e-7, timedelta(0)),  # below a microsecond
    (2_073_600, timedelta(days=24)),
    # Short forms: a number, a unit or none, in any letter case, spaces around.
    ("200ms", 200 * ms),
    ("2s", 2 * s),
    ("1.5 s", 1500 * ms),
    (" 5 m ", timedelta(minutes=5)),
    ("1h", timedelta(hours=1)),
    ("250MS", 250 * ms),
    ("2S", 2 * s),
    ("3M", timedelta(minutes=3)),
    ("1H", timedelta(hours=1)),
    ("1Ms", ms),
    ("0", timedelta(0)),
    ("0.5", 500 * ms),
    (".5", 500 * ms),
    (".5s", 500 * ms),
    ("5.", 5 * s),
    ("+2s", 2 * s),
    ("-0s", timedelta(0)),
    ("\t2s\n", 2 * s),
    ("576h", timedelta(days=24)),
    # Everything else pydantic reads as a timedelta, ISO 8601 above all.
    ("PT0.2S", 200 * ms),
    (" PT1S ", s),
    ("P1DT2H", timedelta(days=1, hours=2)),
    ("P24D", timedelta(days=24)),
    ("1:30:00", timedelta(minutes=90)),
    (Decimal("1.5"), 1500 * ms),
    # Refused: what is no duration.
    (True, "a duration is a number of seconds or a string like '200ms'"),
    (False, "a duration is a number of seconds or a string like '200ms'"),
    ("soon", "'soon'" + NOT_A_DURATION),
    ("", "''" + NOT_A_DURATION),
    ("2 s 3", "'2 s 3'" + NOT_A_DURATION),
    ("1.5.5", "'1.5.5'" + NOT_A_DURATION),
    ("2d s", "'2d s'" + NOT_A_DURATION),
    ("1e3", "'1e3'" + NOT_A_DURATION),
    ("nan", "'nan'" + NOT_A_DURATION),
    ("pt0.2s", "'pt0.2s'" + NOT_A_DURATION),  # ISO 8601 is upper case
    ("\uff12s", "'\uff12s'" + NOT_A_DURATION),  # FULLWIDTH DIGIT TWO
    (None, "None" + NOT_A_DURATION),
    ([1], "[1]" + NOT_A_DURATION),
    ("x" * 50, "'" + "x" * 36 + "..." + NOT_A_DURATION),
    # Refused: negative, not a number.
    (-1, "a duration must be finite and not negative, got -1"),
    (-0.5, "a duration must be finite and not negative, got -0.5"),
    (math.nan, "a duration must be finite and not negative, got nan"),
    (math.inf, "a duration must be finite and not negative, got inf"),
    (-math.inf, "a duration must be finite and not negative, got -inf"),
    (
        -(10**5000),
        "a duration must be finite and not negative, got about -10**5000",
    ),
    ("-1", "a duration must not be negative, got '-1'"),
    ("-200ms", "a duration must not be negative, got '-200ms'"),
    ("-PT1S", "a duration must not be negative, got '-PT1S'"),
    (
        timedelta(seconds=-1),
        "a duration must not be negative, got -1 day, 23:59:59",
    ),
    # Refused: longer than any wait can be.
    (2_073_601, TOO_LONG + "2073601 s"),
    (2_073_600.5, TOO_LONG + "2073600.5 s"),
    (1e30, TOO_LONG + "1e+30 s"),
    (10**5000, TOO_LONG + "about 10**5000 s"),
    ("577h", TOO_LONG + "'577h'"),
    ("99999999999999h", TOO_LONG + "'99999999999999h'"),
    ("9" * 400, TOO_LONG + "'" + "9" * 36 + "..."),
    ("P25D", TOO_LONG + "'P25D'"),
    ("P999999999D", TOO_LONG + "'P999999999D'"),
    (timedelta(days=24, microseconds=1), TOO_LONG + "24 days, 0:00:00.000001"),
    (timedelta.max, TOO_LONG + "999999999 days, 23:59:59.999999"),
]


def rule_id(value: object) -> str:
    text = repr(value) if not isinstance(value, int) or abs(value) < 10**40 else "huge"
    return text[:30]


@pytest.mark.parametrize("parse", PARSERS)
@pytest.mark.parametrize(
    ("value", "expected"), [pytest.param(*rule, id=rule_id(rule[0])) for rule in RULES]
)
def test_both_packages_read_a_duration_by_the_same_rules(
    parse: Parser, value: object, expected: timedelta | str
) -> None:
    if isinstance(expected, timedelta):
        assert parse(value, "base_delay") == expected
    else:
        with pytest.raises(ValueError, match=r"\w") as raised:
            parse(value, "base_delay")
        assert str(raised.value) == expected


def test_the_two_copies_of_the_parser_are_the_same_file() -> None:
    http_file = Path(http_duration.__file__)
    mediator_file = Path(mediator_duration.__file__)
    assert http_file.read_text(encoding="utf-8") == mediator_file.read_text(
        encoding="utf-8"
    )


def test_the_maximum_is_24_days_in_both_packages() -> None:
    for module in (http_duration, mediator_duration):
        assert module.MAX_DURATION.total_seconds() == 24 * 86_400


# --- the maximum is a wait every runtime takes ---------------------------------------
# Each wait below returns at once (the lock is free, the socket is readable), so
# the test measures what the call accepts without waiting.

MAX_SECONDS = http_duration.MAX_DURATION.total_seconds()


def test_the_maximum_is_below_every_limit_of_the_runtime() -> None:
    assert MAX_SECONDS < threading.TIMEOUT_MAX
    assert MAX_SECONDS < 2**32 - 2  # Windows: threading.TIMEOUT_MAX in ms
    assert MAX_SECONDS * 1000 < 2**31 - 1  # epoll and poll: int milliseconds


def test_a_thread_wait_takes_the_maximum() -> None:
    lock = threading.Lock()
    assert lock.acquire(timeout=MAX_SECONDS)
    lock.release()
    event = threading.Event()
    event.set()
    assert event.wait(MAX_SECONDS)


def test_a_selector_and_a_socket_take_the_maximum() -> None:
    left, right = socket.socketpair()
    with left, right, selectors.DefaultSelector() as selector:
        right.sendall(b"x")
        selector.register(left, selectors.EVENT_READ)
        assert len(selector.select(MAX_SECONDS)) == 1
        left.settimeout(MAX_SECONDS)
        assert left.recv(1) == b"x"


def test_past_the_poll_limit_a_selector_overflows() -> None:
    # Why the maximum is not higher: 2**31 milliseconds is past what epoll
    # and poll take; the maximum stays clear of it.
    epoll = getattr(selectors, "EpollSelector", None)
    if epoll is None:
        pytest.skip("no epoll on this platform")
    left, right = socket.socketpair()
    with left, right, epoll() as selector:
        right.sendall(b"x")
        selector.register(left, selectors.EVENT_READ)
        with pytest.raises(OverflowError):
            selector.select(2**31 / 1000)
