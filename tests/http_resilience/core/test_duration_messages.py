"""What a duration option says when it refuses a value, word for word.

Written to close what mutation testing (`make mutation`) found the other option
tests let through: they name the field, these pin what the user reads.
"""

from __future__ import annotations

import pydantic
import pytest

from http_resilience import RetryOptions


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (
            True,
            "Value error, a duration is a number of seconds or a string like '200ms'",
        ),
        (
            "99999999999999h",
            "Value error, base_delay may be at most 24 days (MAX_DURATION), the "
            "longest wait that sleeps, thread waits and socket timeouts take on "
            "every platform; got '99999999999999h'",
        ),
        (
            2_073_601,
            "Value error, base_delay may be at most 24 days (MAX_DURATION), the "
            "longest wait that sleeps, thread waits and socket timeouts take on "
            "every platform; got 2073601 s",
        ),
        (-1, "Value error, a duration must be finite and not negative, got -1"),
        ("-1s", "Value error, a duration must not be negative, got '-1s'"),
        (
            "soon",
            "Value error, 'soon' is not a duration: give seconds, '200ms', '2s', "
            "'5m', '1h' or ISO 8601 such as 'PT0.2S'",
        ),
    ],
)
def test_a_refused_duration_says_what_a_duration_is(
    value: object, expected: str
) -> None:
    with pytest.raises(pydantic.ValidationError) as caught:
        RetryOptions.model_validate({"base_delay": value})
    [error] = caught.value.errors()
    assert error["loc"] == ("base_delay",)
    assert error["msg"] == expected
