"""`HttpResilienceOptions`: every default, every rule and message, config binding."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import httpx
import pydantic
import pytest

from http_resilience import (
    AsyncResilientTransport,
    HttpResilienceOptions,
    ResilientTransport,
    create_async_client,
    create_client,
)
from http_resilience._core.classify import DEFAULT_FAILURE_STATUSES


def test_the_defaults_are_the_standard_pipeline() -> None:
    options = HttpResilienceOptions()
    assert options.model_dump() == {
        "max_retry_attempts": 3,
        "base_delay": timedelta(seconds=2),
        "attempt_timeout": timedelta(seconds=10),
        "total_request_timeout": timedelta(seconds=30),
        "failure_ratio": 0.1,
        "sampling_duration": timedelta(seconds=30),
        "minimum_throughput": 100,
        "break_duration": timedelta(seconds=5),
        "concurrency_limit": 1000,
        "queue_limit": 0,
        "retry_unsafe_methods": False,
        "breaker_per_host": True,
        "maximum_hosts": 1024,
        "own_transport_timeout": True,
        "retry_budget_ratio": 0.2,
        "retry_budget_min_per_second": 10,
        "retry_budget_window": timedelta(seconds=10),
        "budget_per_host": True,
        "quota_reserve": 0.1,
        "quota_legacy_headers": (
            "X-RateLimit-Limit",
            "X-RateLimit-Remaining",
            "X-RateLimit-Reset",
        ),
        "retry_on_status": DEFAULT_FAILURE_STATUSES,
        "breaker_on_status": DEFAULT_FAILURE_STATUSES,
        "should_retry": None,
        "should_break": None,
        "retry_methods": frozenset(
            {"GET", "HEAD", "OPTIONS", "TRACE", "PUT", "DELETE"}
        ),
        "backoff": "exponential",
        "max_delay": timedelta(seconds=30),
        "detect_nested_retries": True,
        "nested_retries": "suppress",
        "buffer_responses": False,
        "max_buffered_bytes": 16 * 1024 * 1024,
        "baseline_min_samples": 100,
        "baseline_half_life": timedelta(minutes=10),
        "adaptive_timeout_factor": 3.0,
        "breaker_baseline_factor": 5.0,
        "slow_call_factor": 3.0,
        "slow_call_ratio": 0.5,
        "adaptive_concurrency": False,
    }
    assert HttpResilienceOptions.SECTION == "resilience.http"


def test_the_options_are_frozen_and_forbid_unknown_fields() -> None:
    options = HttpResilienceOptions()
    with pytest.raises(pydantic.ValidationError, match="frozen"):
        options.max_retry_attempts = 5  # type: ignore[misc]
    with pytest.raises(pydantic.ValidationError) as raised:
        HttpResilienceOptions.model_validate({"max_retries": 5})
    assert raised.value.errors()[0]["loc"] == ("max_retries",)
    assert raised.value.errors()[0]["type"] == "extra_forbidden"


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (timedelta(milliseconds=200), timedelta(milliseconds=200)),
        (0.5, timedelta(milliseconds=500)),
        ("200ms", timedelta(milliseconds=200)),
        ("2s", timedelta(seconds=2)),
        ("PT0.2S", timedelta(milliseconds=200)),
        ("0.25", timedelta(milliseconds=250)),
    ],
)
def test_durations_read_every_form(value: object, expected: timedelta) -> None:
    options = HttpResilienceOptions.model_validate({"base_delay": value})
    assert options.base_delay == expected


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("max_retry_attempts", -1, "greater than or equal to 0"),
        ("base_delay", -1, "must be finite and not negative, got -1"),
        ("base_delay", "P25D", "base_delay may be at most 24 days (MAX_DURATION)"),
        ("attempt_timeout", 0, "greater than 0 seconds"),
        ("total_request_timeout", 0, "greater than 0 seconds"),
        ("failure_ratio", 0, "greater than 0"),
        ("failure_ratio", 1.5, "less than or equal to 1"),
        ("sampling_duration", 0, "greater than 0 seconds"),
        ("minimum_throughput", 0, "greater than or equal to 1"),
        ("break_duration", 0, "greater than 0 seconds"),
        ("concurrency_limit", 0, "greater than or equal to 1"),
        ("queue_limit", -1, "greater than or equal to 0"),
        ("maximum_hosts", 0, "greater than or equal to 1"),
        ("base_delay", "soon", "'soon' is not a duration"),
        ("retry_unsafe_methods", "maybe", "valid boolean"),
    ],
)
def test_each_bound_is_named_in_the_error(
    field: str, value: object, message: str
) -> None:
    with pytest.raises(pydantic.ValidationError) as raised:
        HttpResilienceOptions.model_validate({field: value})
    errors = raised.value.errors()
    assert [error["loc"] for error in errors] == [(field,)]
    assert message in errors[0]["msg"]


def test_the_attempt_timeout_must_be_less_than_the_total() -> None:
    with pytest.raises(pydantic.ValidationError) as raised:
        HttpResilienceOptions(
            attempt_timeout=timedelta(seconds=30),
            sampling_duration=timedelta(seconds=60),
        )
    assert raised.value.errors()[0]["msg"] == (
        "Value error, attempt_timeout (30 s) must be less than "
        "total_request_timeout (30 s)"
    )


def test_the_sampling_duration_must_cover_two_attempts() -> None:
    with pytest.raises(pydantic.ValidationError) as raised:
        HttpResilienceOptions.model_validate({"sampling_duration": "19.5s"})
    assert raised.value.errors()[0]["msg"] == (
        "Value error, sampling_duration (19.5 s) must be at least twice "
        "attempt_timeout (10 s)"
    )


def test_both_rules_are_reported_together_naming_the_client() -> None:
    with pytest.raises(pydantic.ValidationError) as raised:
        HttpResilienceOptions.model_validate(
            {"attempt_timeout": 40}, context={"client": "billing"}
        )
    assert raised.value.errors()[0]["msg"] == (
        "Value error, HTTP client 'billing': attempt_timeout (40 s) must be less "
        "than total_request_timeout (30 s); sampling_duration (30 s) must be at "
        "least twice attempt_timeout (40 s)"
    )


def test_the_edges_of_both_rules_are_allowed() -> None:
    options = HttpResilienceOptions(
        attempt_timeout=timedelta(seconds=5),
        total_request_timeout=timedelta(seconds=5.001),
        sampling_duration=timedelta(seconds=10),
    )
    assert options.sampling_duration == 2 * options.attempt_timeout


# --- configuration and environment --------------------------------------------


def config(http: dict[str, Any]) -> dict[str, Any]:
    return {"resilience": {"http": http}, "other": {"ignored": True}}


def test_missing_sections_mean_defaults() -> None:
    assert HttpResilienceOptions.from_config(None, environ={}) == (
        HttpResilienceOptions()
    )
    assert HttpResilienceOptions.from_config({"resilience": {}}, environ={}) == (
        HttpResilienceOptions()
    )


def test_the_shared_section_applies_to_every_client() -> None:
    read = HttpResilienceOptions.from_config(
        config({"max_retry_attempts": 1, "base_delay": "50ms"}),
        client="orders",
        environ={},
    )
    assert read.max_retry_attempts == 1
    assert read.base_delay == timedelta(milliseconds=50)


def test_a_client_section_wins_over_the_shared_one_for_that_client_only() -> None:
    sections = config(
        {
            "max_retry_attempts": 1,
            "clients": {"billing": {"max_retry_attempts": 0, "queue_limit": 5}},
        }
    )
    billing = HttpResilienceOptions.from_config(sections, client="billing", environ={})
    orders = HttpResilienceOptions.from_config(sections, client="orders", environ={})
    assert (billing.max_retry_attempts, billing.queue_limit) == (0, 5)
    assert (orders.max_retry_attempts, orders.queue_limit) == (1, 0)


def test_environment_variables_override_the_configuration() -> None:
    sections = config({"max_retry_attempts": 1, "clients": {"billing": {}}})
    environ = {
        "RESILIENCE__HTTP__MAX_RETRY_ATTEMPTS": "4",
        "resilience__http__retry_unsafe_methods": "true",
        "RESILIENCE__HTTP__CLIENTS__BILLING__MAX_RETRY_ATTEMPTS": "6",
        "RESILIENCE__HTTP__CLIENTS__OTHER__MAX_RETRY_ATTEMPTS": "not read",
        "RESILIENCE__MEDIATOR__MAX_RETRY_ATTEMPTS": "not ours",
        "UNRELATED": "x",
    }
    billing = HttpResilienceOptions.from_config(
        sections, client="billing", environ=environ
    )
    orders = HttpResilienceOptions.from_config(
        sections, client="orders", environ=environ
    )
    assert (billing.max_retry_attempts, billing.retry_unsafe_methods) == (6, True)
    assert (orders.max_retry_attempts, orders.retry_unsafe_methods) == (4, True)


def test_a_dashed_client_name_matches_underscores_in_the_environment() -> None:
    read = HttpResilienceOptions.from_config(
        None,
        client="orders-api",
        environ={"RESILIENCE__HTTP__CLIENTS__ORDERS_API__QUEUE_LIMIT": "3"},
    )
    assert read.queue_limit == 3


def test_the_process_environment_is_read_by_default(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("RESILIENCE__HTTP__BREAK_DURATION", "7s")
    assert HttpResilienceOptions.from_config().break_duration == timedelta(seconds=7)


def test_an_unknown_key_in_a_section_is_an_error_naming_it() -> None:
    with pytest.raises(pydantic.ValidationError) as raised:
        HttpResilienceOptions.from_config(
            config({"clients": {"billing": {"retries": 2}}}),
            client="billing",
            environ={},
        )
    assert raised.value.errors()[0]["loc"] == ("retries",)


def test_an_unknown_environment_variable_is_an_error_naming_it() -> None:
    with pytest.raises(pydantic.ValidationError) as raised:
        HttpResilienceOptions.from_config(
            None, environ={"RESILIENCE__HTTP__MAX_RETRIES": "2"}
        )
    assert raised.value.errors()[0]["loc"] == ("max_retries",)


def test_a_configuration_error_names_the_client_and_both_fields() -> None:
    with pytest.raises(pydantic.ValidationError) as raised:
        HttpResilienceOptions.from_config(
            config({"clients": {"billing": {"attempt_timeout": "45s"}}}),
            client="billing",
            environ={},
        )
    message = str(raised.value)
    assert "HTTP client 'billing'" in message
    assert "attempt_timeout (45 s)" in message
    assert "total_request_timeout (30 s)" in message


@pytest.mark.parametrize(
    ("sections", "where"),
    [
        ({"resilience": 3}, "'resilience'"),
        ({"resilience": {"http": [1]}}, "'resilience.http'"),
        ({"resilience": {"http": {"clients": 1}}}, "'resilience.http.clients'"),
        (
            {"resilience": {"http": {"clients": {"default": "x"}}}},
            "'resilience.http.clients'",
        ),
    ],
)
def test_a_section_that_is_not_a_mapping_is_a_type_error(
    sections: dict[str, Any], where: str
) -> None:
    with pytest.raises(TypeError, match=f"configuration section {where}"):
        HttpResilienceOptions.from_config(sections, environ={})


# --- where the options are given ------------------------------------------------


BAD = config({"clients": {"billing": {"attempt_timeout": "45s"}}})


def test_every_entry_point_checks_the_configuration_naming_the_client(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("RESILIENCE__HTTP__ATTEMPT_TIMEOUT", raising=False)
    mock = httpx.MockTransport(lambda request: httpx.Response(200))
    entry_points: list[Any] = [
        lambda: AsyncResilientTransport(mock, config=BAD, name="billing"),
        lambda: ResilientTransport(mock, config=BAD, name="billing"),
        lambda: create_async_client("billing", config=BAD, transport=mock),
        lambda: create_client("billing", config=BAD, transport=mock),
    ]
    for entry_point in entry_points:
        with pytest.raises(pydantic.ValidationError, match="HTTP client 'billing'"):
            entry_point()


def test_given_options_are_used_as_they_are_and_config_is_not_read() -> None:
    options = HttpResilienceOptions(max_retry_attempts=0)
    transport = AsyncResilientTransport(options=options, config=BAD, name="billing")
    assert transport.options is options
    assert transport.name == "billing"


def test_options_of_the_wrong_type_are_refused_naming_the_client() -> None:
    with pytest.raises(TypeError, match="HTTP client 'billing': options must be"):
        ResilientTransport(options={"max_retry_attempts": 1}, name="billing")  # type: ignore[arg-type]


def test_a_transport_without_options_reads_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("RESILIENCE__HTTP__CLIENTS__INVENTORY__MAX_RETRY_ATTEMPTS", "1")
    transport = ResilientTransport(name="inventory")
    assert transport.options is not None
    assert transport.options.max_retry_attempts == 1
