"""The options' error messages, word for word: durations and configuration sections.

Written to close what mutation testing (`make mutation`) found the other option
tests let through: they name the field, these pin what the user reads.
"""

from __future__ import annotations

import math
from datetime import timedelta
from typing import Any, ClassVar

import pydantic
import pytest

from mediator_resilience import ResilienceMediatorOptions


def message(value: object) -> str:
    with pytest.raises(pydantic.ValidationError) as caught:
        ResilienceMediatorOptions.model_validate({"base_delay": value})
    [error] = caught.value.errors()
    assert error["loc"] == ("base_delay",)
    return error["msg"]


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (
            True,
            "Value error, a duration is a number of seconds or a string like '200ms'",
        ),
        (-0.5, "Value error, a duration must be finite and not negative, got -0.5"),
        (-2, "Value error, a duration must be finite and not negative, got -2"),
        (math.inf, "Value error, a duration must be finite and not negative, got inf"),
        (
            timedelta(seconds=-1),
            "Value error, a duration must not be negative, got -1 day, 23:59:59",
        ),
        (1e20, "Value error, too long a duration: it may not exceed 999,999,999 days"),
        (
            "99999999999999h",
            "Value error, too long a duration: it may not exceed 999,999,999 days",
        ),
    ],
)
def test_an_invalid_duration_says_what_a_duration_is(
    value: object, expected: str
) -> None:
    assert message(value) == expected


class NestedOptions(ResilienceMediatorOptions):
    """The same options read from a section one level deeper."""

    SECTION: ClassVar[str] = "app.resilience.mediator"


@pytest.mark.parametrize(
    ("config", "named"),
    [
        ({"app": 5}, "app"),
        ({"app": {"resilience": 5}}, "app.resilience"),
        ({"app": {"resilience": {"mediator": 5}}}, "app.resilience.mediator"),
    ],
)
def test_a_section_that_is_no_mapping_is_named_by_its_whole_path(
    config: dict[str, Any], named: str
) -> None:
    with pytest.raises(TypeError) as caught:
        NestedOptions.from_config(config, environ={})
    assert str(caught.value) == f"configuration section {named!r} is not a mapping"


def test_a_deeper_section_is_read_like_the_default_one() -> None:
    config = {"app": {"resilience": {"mediator": {"base_delay": "1s"}}}}
    options = NestedOptions.from_config(config, environ={})
    assert options.base_delay == timedelta(seconds=1)
    assert options.max_retry_attempts == 3
