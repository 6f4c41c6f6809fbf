"""ResilienceMediatorOptions: defaults, validation, configuration, backoff math."""

from __future__ import annotations

import math
from datetime import timedelta
from typing import Any, ClassVar

import pydantic
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mediator_resilience import ResilienceMediatorOptions, is_transient_failure


def test_defaults_are_pinned() -> None:
    options = ResilienceMediatorOptions()

    assert options.max_retry_attempts == 3
    assert options.base_delay == timedelta(milliseconds=200)
    assert options.max_delay == timedelta(seconds=30)
    assert options.use_jitter is True
    assert options.should_retry is is_transient_failure
    assert options.should_retry_result is None
    assert ResilienceMediatorOptions.SECTION == "resilience.mediator"


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (0.25, timedelta(milliseconds=250)),
        (2, timedelta(seconds=2)),
        ("200ms", timedelta(milliseconds=200)),
        ("2s", timedelta(seconds=2)),
        ("1.5 s", timedelta(seconds=1.5)),
        ("3m", timedelta(minutes=3)),
        ("1h", timedelta(hours=1)),
        ("0.5", timedelta(milliseconds=500)),
        ("PT0.2S", timedelta(milliseconds=200)),
        (timedelta(seconds=7), timedelta(seconds=7)),
    ],
)
def test_durations_accept_seconds_units_and_iso_8601(
    value: object, expected: timedelta
) -> None:
    options = ResilienceMediatorOptions.model_validate(
        {"base_delay": value, "max_delay": "1h"}
    )
    assert options.base_delay == expected


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("max_retry_attempts", -1),
        ("max_retry_attempts", "many"),
        ("base_delay", -0.1),
        ("base_delay", math.nan),
        ("base_delay", math.inf),
        ("base_delay", "-PT1S"),
        ("base_delay", timedelta(seconds=-1)),
        ("max_delay", "soon"),
        ("max_delay", True),
        ("use_jitter", "perhaps"),
        ("should_retry", "yes"),
    ],
)
def test_invalid_values_fail_naming_the_field(field: str, value: object) -> None:
    with pytest.raises(pydantic.ValidationError) as caught:
        ResilienceMediatorOptions.model_validate({field: value})

    assert [error["loc"][0] for error in caught.value.errors()] == [field]


def test_unknown_fields_are_errors() -> None:
    with pytest.raises(pydantic.ValidationError, match="max_attempts"):
        ResilienceMediatorOptions.model_validate({"max_attempts": 5})


def test_options_are_frozen() -> None:
    options = ResilienceMediatorOptions()

    with pytest.raises(pydantic.ValidationError):
        options.max_retry_attempts = 9  # type: ignore[misc]  # pyright: ignore[reportAttributeAccessIssue]


def test_from_config_reads_its_section_and_the_environment_overrides_it() -> None:
    config = {
        "resilience": {
            "mediator": {"max_retry_attempts": 2, "base_delay": "50ms"},
            "http": {"ignored": "another section"},
        },
        "app": {"name": "shop"},
    }
    environ = {
        "RESILIENCE__MEDIATOR__MAX_RETRY_ATTEMPTS": "5",
        "resilience__mediator__use_jitter": "false",
        "RESILIENCE__HTTP__MAX_RETRY_ATTEMPTS": "9",
        "PATH": "/bin",
    }

    options = ResilienceMediatorOptions.from_config(config, environ=environ)

    assert options.max_retry_attempts == 5
    assert options.base_delay == timedelta(milliseconds=50)
    assert options.use_jitter is False


def test_from_config_without_the_section_gives_the_defaults() -> None:
    assert (
        ResilienceMediatorOptions.from_config({}, environ={})
        == ResilienceMediatorOptions()
    )
    assert (
        ResilienceMediatorOptions.from_config(None, environ={})
        == ResilienceMediatorOptions()
    )


def test_from_config_rejects_unknown_keys_and_bad_sections() -> None:
    with pytest.raises(pydantic.ValidationError, match="retries"):
        ResilienceMediatorOptions.from_config(
            {"resilience": {"mediator": {"retries": 3}}}, environ={}
        )
    with pytest.raises(pydantic.ValidationError, match="max_retry_attempt"):
        ResilienceMediatorOptions.from_config(
            {}, environ={"RESILIENCE__MEDIATOR__MAX_RETRY_ATTEMPT": "3"}
        )
    with pytest.raises(TypeError, match=r"'resilience\.mediator' is not a mapping"):
        ResilienceMediatorOptions.from_config(
            {"resilience": {"mediator": 3}}, environ={}
        )
    with pytest.raises(TypeError, match="'resilience' is not a mapping"):
        ResilienceMediatorOptions.from_config({"resilience": "x"}, environ={})


def test_the_delay_doubles_from_the_base_and_is_capped() -> None:
    options = ResilienceMediatorOptions.model_validate(
        {"base_delay": 0.2, "max_delay": 1, "use_jitter": False}
    )

    delays = [options.delay_before(n) for n in range(1, 6)]

    assert delays == pytest.approx([0.2, 0.4, 0.8, 1.0, 1.0])


@settings(max_examples=300, deadline=None)
@given(
    base=st.floats(min_value=0, max_value=60, allow_nan=False),
    above=st.floats(min_value=0, max_value=600, allow_nan=False),
    retry=st.integers(min_value=1, max_value=64),
    jitter=st.floats(min_value=0.5, max_value=1, exclude_max=True),
)
def test_backoff_properties(
    base: float, above: float, retry: int, jitter: float
) -> None:
    cap = base + above  # the options refuse a base above the cap
    plain = ResilienceMediatorOptions.model_validate(
        {"base_delay": base, "max_delay": cap, "use_jitter": False}
    )
    jittered = plain.model_validate({**plain.model_dump(), "use_jitter": True})
    base_s = plain.base_delay.total_seconds()
    cap_s = plain.max_delay.total_seconds()

    delay = plain.delay_before(retry)
    spread = jittered.delay_before(retry, jitter)

    assert 0 <= delay <= cap_s  # never negative, never past the cap
    assert delay == pytest.approx(min(base_s * 2 ** (retry - 1), cap_s))
    assert 0.5 * delay <= spread < delay or delay == spread == 0  # jitter in [0.5, 1)
    assert plain.delay_before(retry + 1) >= delay  # never shrinks


# --- delay_before, exactly: doubling, cap, jitter only when on -----------------------


def options(*, use_jitter: bool) -> ResilienceMediatorOptions:
    # Powers of two, so that every delay is exact in binary floating point.
    return ResilienceMediatorOptions.model_validate(
        {"base_delay": 0.25, "max_delay": 2, "use_jitter": use_jitter}
    )


def test_the_delay_doubles_exactly_up_to_the_cap() -> None:
    plain = options(use_jitter=False)
    assert [plain.delay_before(n) for n in range(1, 7)] == [
        0.25,
        0.5,
        1.0,
        2.0,
        2.0,
        2.0,
    ]
    assert plain.delay_before(10**6) == 2.0


@pytest.mark.parametrize("jitter", [0.5, 0.75, 0.99])
def test_without_jitter_the_factor_is_ignored(jitter: float) -> None:
    plain = options(use_jitter=False)
    assert [plain.delay_before(n, jitter) for n in (1, 2, 5)] == [0.25, 0.5, 2.0]


@pytest.mark.parametrize("jitter", [0.5, 0.75])
def test_with_jitter_the_capped_delay_is_scaled_by_the_factor(jitter: float) -> None:
    spread = options(use_jitter=True)
    assert [spread.delay_before(n, jitter) for n in (1, 2, 5)] == [
        0.25 * jitter,
        0.5 * jitter,
        2.0 * jitter,
    ]
    assert spread.delay_before(1) == 0.25  # the factor defaults to 1


# --- option errors, word for word ----------------------------------------------------


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
        (
            1e20,
            "Value error, base_delay may be at most 24 days (MAX_DURATION), the "
            "longest wait that sleeps, thread waits and socket timeouts take on "
            "every platform; got 1e+20 s",
        ),
        (
            "99999999999999h",
            "Value error, base_delay may be at most 24 days (MAX_DURATION), the "
            "longest wait that sleeps, thread waits and socket timeouts take on "
            "every platform; got '99999999999999h'",
        ),
        (
            "-PT1S",
            "Value error, a duration must not be negative, got '-PT1S'",
        ),
        (
            "soon",
            "Value error, 'soon' is not a duration: give seconds, '200ms', '2s', "
            "'5m', '1h' or ISO 8601 such as 'PT0.2S'",
        ),
    ],
)
def test_an_invalid_duration_says_what_a_duration_is(
    value: object, expected: str
) -> None:
    assert message(value) == expected


def test_a_base_delay_above_the_max_delay_is_refused_naming_both() -> None:
    with pytest.raises(pydantic.ValidationError) as caught:
        ResilienceMediatorOptions(base_delay="45s")
    [error] = caught.value.errors()
    assert error["loc"] == ()
    assert error["msg"] == (
        "Value error, base_delay (45 s) must not exceed max_delay (30 s)"
    )
    same = ResilienceMediatorOptions(base_delay="30s")
    assert same.base_delay == same.max_delay == timedelta(seconds=30)


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
