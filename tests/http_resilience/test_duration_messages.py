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
            "Value error, too long a duration: it may not exceed 999,999,999 days",
        ),
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
