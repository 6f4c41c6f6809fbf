"""`StreamRetryOptions`: every default and every error message pinned."""

from __future__ import annotations

import math
import random
from datetime import timedelta
from typing import Any

import pydantic
import pytest

from http_resilience import PartialStreamPolicy, StreamRetryOptions, SystemClock
from http_resilience._core.clock import SYSTEM_CLOCK
from http_resilience._streams.options import retry_all_but_cancellation
from http_resilience.testing import FakeClock


def test_the_defaults() -> None:
    options = StreamRetryOptions()
    assert options.max_retry_attempts == 3
    assert options.base_delay == timedelta(milliseconds=200)
    assert options.max_delay == timedelta(seconds=30)
    assert options.use_jitter is True
    assert options.should_retry is retry_all_but_cancellation
    assert options.partial_stream_policy is PartialStreamPolicy.RETHROW_MID_STREAM
    assert options.clock is SYSTEM_CLOCK
    assert isinstance(options.clock, SystemClock)
    assert options.random is random.random


def test_the_policy_values() -> None:
    assert [policy.value for policy in PartialStreamPolicy] == [
        "rethrow_mid_stream",
        "restart_from_start",
    ]
    assert (
        StreamRetryOptions(
            partial_stream_policy="restart_from_start"  # type: ignore[arg-type]
        ).partial_stream_policy
        is PartialStreamPolicy.RESTART_FROM_START
    )


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        (timedelta(seconds=2), timedelta(seconds=2)),
        (2, timedelta(seconds=2)),
        (0.25, timedelta(milliseconds=250)),
        ("200ms", timedelta(milliseconds=200)),
        ("2s", timedelta(seconds=2)),
        ("1.5s", timedelta(milliseconds=1500)),
        (" 5 m ", timedelta(minutes=5)),
        ("1h", timedelta(hours=1)),
        ("250MS", timedelta(milliseconds=250)),
        ("PT0.2S", timedelta(milliseconds=200)),
        ("P1DT2H", timedelta(days=1, hours=2)),
        ("0", timedelta(0)),
        ("0.5", timedelta(milliseconds=500)),
    ],
)
def test_durations_read_seconds_short_forms_and_iso_8601(
    given: Any, expected: timedelta
) -> None:
    options = StreamRetryOptions(base_delay=given, max_delay=given)
    assert options.base_delay == expected
    assert options.max_delay == expected


def errors(**fields: Any) -> list[tuple[str, str]]:
    with pytest.raises(pydantic.ValidationError) as raised:
        StreamRetryOptions(**fields)
    return [
        (".".join(str(part) for part in error["loc"]), error["msg"])
        for error in raised.value.errors()
    ]


def test_a_negative_budget_names_the_field() -> None:
    assert errors(max_retry_attempts=-1) == [
        ("max_retry_attempts", "Input should be greater than or equal to 0")
    ]


def test_only_the_lower_bound_of_the_budget_is_enforced() -> None:
    assert StreamRetryOptions(max_retry_attempts=0).max_retry_attempts == 0
    assert StreamRetryOptions(max_retry_attempts=10_000).max_retry_attempts == 10_000


def test_negative_and_unreadable_delays_name_their_fields() -> None:
    found = errors(base_delay=-1, max_delay="soon")
    assert [loc for loc, _ in found] == ["base_delay", "max_delay"]
    assert found[0][1] == (
        "Value error, a duration must be finite and not negative, got -1"
    )
    assert found[1][1] == (
        "Value error, 'soon' is not a duration: give seconds, '200ms', '2s', '5m', "
        "'1h' or ISO 8601 such as 'PT0.2S'"
    )


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (
            math.nan,
            "Value error, a duration must be finite and not negative, got nan",
        ),
        (
            math.inf,
            "Value error, a duration must be finite and not negative, got inf",
        ),
        (
            True,
            "Value error, a duration is a number of seconds or a string like '200ms'",
        ),
        ("-PT1S", "Value error, a duration must not be negative, got '-PT1S'"),
        (
            timedelta(seconds=-1),
            "Value error, a duration must not be negative, got -1 day, 23:59:59",
        ),
        (
            "P25D",
            "Value error, max_delay may be at most 24 days (MAX_DURATION), the "
            "longest wait that sleeps, thread waits and socket timeouts take on "
            "every platform; got 'P25D'",
        ),
    ],
)
def test_durations_that_are_no_delay_are_refused(value: object, message: str) -> None:
    assert errors(max_delay=value) == [("max_delay", message)]


def test_a_base_delay_above_the_max_delay_is_refused_naming_both() -> None:
    assert errors(base_delay="45s") == [
        ("", "Value error, base_delay (45 s) must not exceed max_delay (30 s)")
    ]
    assert errors(base_delay="200ms", max_delay=0.1) == [
        ("", "Value error, base_delay (0.2 s) must not exceed max_delay (0.1 s)")
    ]
    same = StreamRetryOptions(base_delay="30s")
    assert same.base_delay == same.max_delay == timedelta(seconds=30)


def test_every_invalid_field_is_reported_at_once() -> None:
    found = errors(
        max_retry_attempts="many",
        use_jitter="perhaps",
        should_retry=3,
        partial_stream_policy="sometimes",
        clock=object(),
        random="dice",
    )
    assert [loc for loc, _ in found] == [
        "max_retry_attempts",
        "use_jitter",
        "should_retry",
        "partial_stream_policy",
        "clock",
        "random",
    ]
    assert dict(found)["clock"] == "Input should be an instance of Clock"
    assert dict(found)["partial_stream_policy"] == (
        "Input should be 'rethrow_mid_stream' or 'restart_from_start'"
    )


def test_unknown_fields_are_refused() -> None:
    assert errors(max_attempts=3) == [
        ("max_attempts", "Extra inputs are not permitted")
    ]


def test_options_are_frozen_and_variants_are_validated() -> None:
    options = StreamRetryOptions()
    with pytest.raises(pydantic.ValidationError, match="Instance is frozen"):
        options.max_retry_attempts = 5  # type: ignore[misc]
    variant = StreamRetryOptions.model_validate(
        {**dict(options), "max_retry_attempts": 5, "clock": FakeClock()}
    )
    assert variant.max_retry_attempts == 5
    with pytest.raises(pydantic.ValidationError):
        StreamRetryOptions.model_validate({**dict(options), "max_retry_attempts": -5})
