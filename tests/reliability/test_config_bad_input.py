"""Bad configuration, field by field: refused at construction, named, never ignored.

One table gives every field of every options model its kind (a count, a
duration, a ratio, ...), and each kind its invalid values: negative, NaN and
infinite numbers, durations past what `timedelta` holds, True and False where
a number belongs, wrong types, bad strings. Each is refused when the options
are built, with an error that names the field; read for an HTTP client from
the configuration or the environment, the error names the client as well.
Unknown keys are errors wherever they are: in a section, nested in one, in a
client's section, after an environment prefix.

A new field without a row in the table fails `test_the_table_covers_every_field`.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping
from datetime import timedelta
from typing import Any

import httpx
import pydantic
import pytest

from http_resilience import (
    AsyncResilientTransport,
    BreakerOptions,
    ConcurrencyLimiterOptions,
    HedgingOptions,
    HttpResilienceOptions,
    RateLimiterOptions,
    ResiliencePipeline,
    ResilientTransport,
    RetryBudgetOptions,
    RetryOptions,
    StreamRetryOptions,
    create_async_client,
    with_retry,
)
from http_resilience._strategies.timeout.options import TimeoutOptions
from mediator_resilience import ResilienceMediatorModule, ResilienceMediatorOptions

# --- the table ------------------------------------------------------------------------

COUNT = "count, at least 0"
POSITIVE_COUNT = "count, at least 1"
DURATION = "duration, at least 0"
POSITIVE_DURATION = "duration, more than 0"
RATIO = "ratio in (0, 1]"
SHARE = "number at least 0"
SHARE_OR_OFF = "number at least 0, or None"
RESERVE_OR_OFF = "number in [0, 1), or None"
HEADER_NAMES = "three distinct header names"
STATUSES = "HTTP statuses"
METHODS = "HTTP methods"
BACKOFF = "backoff shape"
RATE = "permits a second, more than 0"
NESTED = "what nested retries do"
OPTIONAL_DURATION = "duration, at least 0, or None"
FLAG = "boolean"
POLICY = "partial stream policy"
CALLABLE = "callable"
OPTIONAL_CALLABLE = "callable or None"
CLOCK = "clock"
FACTOR_OR_OFF = "factor at least 1, or None"
SLOW_FACTOR_OR_OFF = "factor above 1, or None"

FIELDS: dict[type[pydantic.BaseModel], dict[str, str]] = {
    HttpResilienceOptions: {
        "max_retry_attempts": COUNT,
        "base_delay": DURATION,
        "attempt_timeout": POSITIVE_DURATION,
        "total_request_timeout": POSITIVE_DURATION,
        "failure_ratio": RATIO,
        "sampling_duration": POSITIVE_DURATION,
        "minimum_throughput": POSITIVE_COUNT,
        "break_duration": POSITIVE_DURATION,
        "concurrency_limit": POSITIVE_COUNT,
        "queue_limit": COUNT,
        "retry_unsafe_methods": FLAG,
        "breaker_per_host": FLAG,
        "maximum_hosts": POSITIVE_COUNT,
        "own_transport_timeout": FLAG,
        "retry_budget_ratio": SHARE_OR_OFF,
        "retry_budget_min_per_second": COUNT,
        "retry_budget_window": POSITIVE_DURATION,
        "budget_per_host": FLAG,
        "quota_reserve": RESERVE_OR_OFF,
        "quota_legacy_headers": HEADER_NAMES,
        "retry_on_status": STATUSES,
        "breaker_on_status": STATUSES,
        "should_retry": OPTIONAL_CALLABLE,
        "should_break": OPTIONAL_CALLABLE,
        "retry_methods": METHODS,
        "backoff": BACKOFF,
        "max_delay": DURATION,
        "detect_nested_retries": FLAG,
        "nested_retries": NESTED,
        "buffer_responses": FLAG,
        "max_buffered_bytes": POSITIVE_COUNT,
        "baseline_min_samples": POSITIVE_COUNT,
        "baseline_half_life": POSITIVE_DURATION,
        "adaptive_timeout_factor": FACTOR_OR_OFF,
        "breaker_baseline_factor": FACTOR_OR_OFF,
        "slow_call_factor": SLOW_FACTOR_OR_OFF,
        "slow_call_ratio": RATIO,
        "adaptive_concurrency": FLAG,
    },
    RetryBudgetOptions: {
        "retry_budget_ratio": SHARE,
        "retry_budget_min_per_second": COUNT,
        "retry_budget_window": POSITIVE_DURATION,
        "budget_per_host": FLAG,
        "maximum_hosts": POSITIVE_COUNT,
    },
    RetryOptions: {
        "max_retry_attempts": COUNT,
        "base_delay": DURATION,
        "retry_unsafe_methods": FLAG,
        "retry_on_status": STATUSES,
        "should_retry": OPTIONAL_CALLABLE,
        "retry_methods": METHODS,
        "backoff": BACKOFF,
        "max_delay": DURATION,
        "detect_nested_retries": FLAG,
        "nested_retries": NESTED,
    },
    BreakerOptions: {
        "failure_ratio": RATIO,
        "sampling_duration": POSITIVE_DURATION,
        "minimum_throughput": POSITIVE_COUNT,
        "break_duration": POSITIVE_DURATION,
        "breaker_per_host": FLAG,
        "maximum_hosts": POSITIVE_COUNT,
        "breaker_on_status": STATUSES,
        "should_break": OPTIONAL_CALLABLE,
        "baseline_min_samples": POSITIVE_COUNT,
        "baseline_half_life": POSITIVE_DURATION,
        "adaptive_timeout_factor": FACTOR_OR_OFF,
        "breaker_baseline_factor": FACTOR_OR_OFF,
        "slow_call_factor": SLOW_FACTOR_OR_OFF,
        "slow_call_ratio": RATIO,
    },
    ConcurrencyLimiterOptions: {
        "concurrency_limit": POSITIVE_COUNT,
        "queue_limit": COUNT,
    },
    RateLimiterOptions: {
        "permits_per_second": RATE,
        "burst": POSITIVE_COUNT,
        "per_host": FLAG,
        "queue_limit": COUNT,
        "maximum_hosts": POSITIVE_COUNT,
    },
    HedgingOptions: {
        "delay": POSITIVE_DURATION,
        "max_hedged_attempts": POSITIVE_COUNT,
    },
    TimeoutOptions: {
        "timeout": POSITIVE_DURATION,
        "own_transport_timeout": FLAG,
    },
    StreamRetryOptions: {
        "max_retry_attempts": COUNT,
        "base_delay": DURATION,
        "max_delay": DURATION,
        "use_jitter": FLAG,
        "should_retry": CALLABLE,
        "partial_stream_policy": POLICY,
        "clock": CLOCK,
        "random": CALLABLE,
    },
    ResilienceMediatorOptions: {
        "max_retry_attempts": COUNT,
        "base_delay": DURATION,
        "max_delay": DURATION,
        "use_jitter": FLAG,
        "should_retry": CALLABLE,
        "should_retry_result": OPTIONAL_CALLABLE,
        "max_retry_duration": OPTIONAL_DURATION,
    },
}

# Invalid whatever the field's bound: not a duration at all, or not one that
# can be a wait.
_NO_DURATION: list[object] = [
    -1,
    -0.001,
    -(10**30),
    math.nan,
    math.inf,
    -math.inf,
    1e30,  # past what timedelta holds
    10**30,
    2_073_601,  # past MAX_DURATION, 24 days: a wait no runtime takes
    "P25D",
    True,
    False,
    None,
    [1],
    {"seconds": 1},
    b"\xff",
    timedelta(seconds=-1),
    "-1",
    "-1s",
    "-PT1S",
    "PT-1S",
    "soon",
    "",
    " ",
    "nan",
    "inf",
    "1e400",
    "9" * 400,  # a number of seconds no float holds
    "99999999999999h",  # a float, but past what timedelta holds
    "2 s 3",
    "1.5.5",
    "0x10",
    "\uff12s",  # FULLWIDTH DIGIT TWO
    "\u0661\u0662",  # ARABIC-INDIC 12
]
_NO_COUNT: list[object] = [
    -1,
    -(10**30),
    1.5,
    "1.5",
    "many",
    "",
    None,
    True,  # pydantic would read 1
    False,
    math.nan,
    math.inf,
    "1e3",
    [3],
    {"count": 3},
    "\u0663",  # ARABIC-INDIC DIGIT THREE
    "3 retries",
]
INVALID: dict[str, list[object]] = {
    COUNT: _NO_COUNT,
    POSITIVE_COUNT: [*_NO_COUNT, 0, "0", 0.0],
    DURATION: _NO_DURATION,
    POSITIVE_DURATION: [
        *_NO_DURATION,
        0,
        0.0,
        "0",
        "0s",
        "0ms",
        "PT0S",
        timedelta(0),
        1e-7,  # below a microsecond: zero
    ],
    RATIO: [
        0,
        0.0,
        -0.1,
        1.0000001,
        1.5,
        math.nan,
        math.inf,
        -math.inf,
        "nan",
        "half",
        "50%",
        "",
        None,
        True,  # pydantic would read 1.0
        False,
        [0.5],
    ],
    SHARE_OR_OFF: [
        -0.1,
        -(10**30),
        math.nan,
        math.inf,
        -math.inf,
        "nan",
        "inf",
        "half",
        "50%",
        "",
        "-1",
        True,  # pydantic would read 1.0
        False,
        [0.2],
        {"ratio": 0.2},
    ],
    FLAG: ["maybe", "yes please", 2, -1, 0.5, "2", None, [], {"on": True}],
    POLICY: ["sometimes", "RETHROW", 1, None, True],
    CALLABLE: [3, "yes", None, object()],
    OPTIONAL_CALLABLE: [3, "yes", object()],
    CLOCK: [object(), 3, "system", None],
}
INVALID[SHARE] = [*INVALID[SHARE_OR_OFF], None, "none"]
INVALID[RESERVE_OR_OFF] = [*INVALID[SHARE_OR_OFF], 1, 1.0, "1", 1.5]
INVALID[FACTOR_OR_OFF] = [*INVALID[SHARE_OR_OFF], 0, 0.5, "0.99"]
INVALID[SLOW_FACTOR_OR_OFF] = [*INVALID[SHARE_OR_OFF], 0, 1, 1.0, "1"]
INVALID[STATUSES] = [
    600,
    99,
    0,
    -1,
    "600",
    "5xx",
    "504-500",
    "500-600",
    "abc",
    True,
    [True],
    3.5,
    None,
    [503, "x"],
    range(500, 601),
    "\u0665\u0660\u0663",  # ARABIC-INDIC 503
]
INVALID[METHODS] = ["GET PUT", ["GET", ""], [3], None, 3, "G\u00e9T", ["GE T"]]
# Below one permit every 24 days a queued wait would pass what any runtime takes.
INVALID[RATE] = [
    0,
    0.0,
    -1,
    5e-324,
    1e-7,
    math.nan,
    math.inf,
    "fast",
    "",
    None,
    True,
    [5],
]
INVALID[OPTIONAL_DURATION] = [value for value in _NO_DURATION if value is not None]
INVALID[NESTED] = ["retry", "Suppress", "", None, True, 1]
INVALID[BACKOFF] = ["fibonacci", "Exponential", "", None, 2, True]
INVALID[HEADER_NAMES] = [
    ("X-Limit", "X-Left"),
    ("X-Limit", "X-Left", "X-Reset", "X-More"),
    ("X-Limit", "x-limit", "X-Reset"),
    ("X Limit", "X-Left", "X-Reset"),
    ("", "X-Left", "X-Reset"),
    ("X-Limit:", "X-Left", "X-Reset"),
    ("X-Lïmit", "X-Left", "X-Reset"),
    "X-Limit,X-Left",
    "",
    None,
    3,
    (1, 2, 3),
]
# Accepted at the edge of each bound: the bounds are not tighter than documented.
VALID: dict[str, list[object]] = {
    COUNT: [0, "0", " 7 ", 3.0, 10**9],
    POSITIVE_COUNT: [1, "1", 10**9],
    DURATION: [0, "0", "0s", timedelta(0), "200ms", "5m", "PT0.2S", " 2 s "],
    POSITIVE_DURATION: [0.001, "1ms", timedelta(microseconds=2), "PT1S", "1h"],
    RATIO: [1, 1.0, "1", 0.5, 5e-324],
    SHARE: [0, 0.0, "0", 0.2, 5e-324, 1, 3.5, 1000],
    SHARE_OR_OFF: [0, 0.2, 5, None, "none", "None", " OFF ", "null"],
    RESERVE_OR_OFF: [0, 0.0, 0.1, 0.999, None, "none", "off"],
    FACTOR_OR_OFF: [1, 1.0, "1", 3, 5.0, 1000, None, "none", " OFF "],
    SLOW_FACTOR_OR_OFF: [1.0000001, 3, "3.0", None, "none"],
    STATUSES: [[], 503, "503", "429, 500-504", [408, range(500, 600)], {599, 100}],
    METHODS: ["get", ["GET", "post"], "GET, PUT", [], "M-SEARCH"],
    BACKOFF: ["exponential", "linear", "constant"],
    NESTED: ["suppress", "report"],
    OPTIONAL_DURATION: [None, 0, "10s", "PT1M"],
    RATE: [1 / (24 * 86400), 0.5, 1, "20", 1e9],
    HEADER_NAMES: [
        ("X-Rate-Limit-Limit", "X-Rate-Limit-Remaining", "X-Rate-Limit-Reset"),
        ["RateLimit-Limit", "RateLimit-Remaining", "RateLimit-Reset"],
        "X-Limit, X-Left ,X-Reset",
    ],
    FLAG: [True, False, "true", "false", "1", "0", 1, 0],
    POLICY: ["rethrow_mid_stream", "restart_from_start"],
    CALLABLE: [bool, callable],
    OPTIONAL_CALLABLE: [None, bool],
    CLOCK: [],  # the default clock, and a FakeClock, are tested elsewhere
}
# What each model needs besides the field under test: for
# `HttpResilienceOptions`, timings that leave room for any valid value of one
# of them under the two cross-field rules (attempt < total, sampling >= 2 x
# attempt); for the two with a `max_delay`, room under base <= max;
# `TimeoutOptions` has no default.
BASE: dict[type[pydantic.BaseModel], dict[str, object]] = {
    HttpResilienceOptions: {
        "attempt_timeout": timedelta(microseconds=1),
        "total_request_timeout": "2h",
        "sampling_duration": "2h",
        "base_delay": 0,
        "max_delay": "2h",
    },
    RetryOptions: {"base_delay": 0, "max_delay": "2h"},
    RateLimiterOptions: {"permits_per_second": 1},
    StreamRetryOptions: {"base_delay": 0, "max_delay": "2h"},
    ResilienceMediatorOptions: {"base_delay": 0, "max_delay": "2h"},
    TimeoutOptions: {"timeout": 1},
}


def cases(table: Mapping[str, list[object]]) -> list[Any]:
    return [
        pytest.param(model, field, value, id=f"{model.__name__}.{field}-{index}")
        for model, fields in FIELDS.items()
        for field, kind in fields.items()
        for index, value in enumerate(table[kind])
    ]


def refused(model: type[pydantic.BaseModel], values: Mapping[str, object]) -> Any:
    with pytest.raises(pydantic.ValidationError) as raised:
        model.model_validate(values)
    return raised.value


@pytest.fixture(autouse=True)
def no_resilience_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Entry points read the process environment: none of ours may leak in."""
    for name in list(os.environ):
        if name.upper().startswith("RESILIENCE__"):
            monkeypatch.delenv(name)


# --- the table itself -----------------------------------------------------------------


def test_the_table_covers_every_field() -> None:
    for model, fields in FIELDS.items():
        assert set(fields) == set(model.model_fields), model.__name__
    kinds = {kind for fields in FIELDS.values() for kind in fields.values()}
    for kind in kinds:
        assert INVALID[kind], kind


# --- every invalid value of every field -----------------------------------------------


@pytest.mark.parametrize(("model", "field", "value"), cases(INVALID))
def test_an_invalid_value_is_refused_naming_its_field(
    model: type[pydantic.BaseModel], field: str, value: object
) -> None:
    error = refused(model, {**BASE.get(model, {}), field: value})
    assert [entry["loc"] for entry in error.errors()] == [(field,)]
    assert f"\n{field}\n" in f"\n{error}\n"


@pytest.mark.parametrize(("model", "field", "value"), cases(VALID))
def test_a_value_at_the_edge_of_its_bound_is_accepted(
    model: type[pydantic.BaseModel], field: str, value: object
) -> None:
    built = model.model_validate({**BASE.get(model, {}), field: value})
    assert field in built.model_fields_set


@pytest.mark.parametrize(
    ("model", "field"),
    [
        (HttpResilienceOptions, "attempt_timeout"),
        (BreakerOptions, "break_duration"),
        (HedgingOptions, "delay"),
        (TimeoutOptions, "timeout"),
    ],
)
def test_one_microsecond_is_a_positive_duration(
    model: type[pydantic.BaseModel], field: str
) -> None:
    one = timedelta(microseconds=1)
    built = model.model_validate({**BASE.get(model, {}), field: one})
    assert getattr(built, field) == one


@pytest.mark.parametrize("model", list(FIELDS))
def test_every_invalid_field_is_reported_at_once(
    model: type[pydantic.BaseModel],
) -> None:
    fields = FIELDS[model]
    error = refused(model, {field: INVALID[kind][0] for field, kind in fields.items()})
    assert {entry["loc"] for entry in error.errors()} == {(field,) for field in fields}


@pytest.mark.parametrize("model", list(FIELDS))
def test_an_unknown_field_is_an_error_naming_it(
    model: type[pydantic.BaseModel],
) -> None:
    error = refused(
        model,
        {
            **BASE.get(model, {}),
            "max_retries": 2,
            "nested": {"max_retry_attempts": 1},
        },
    )
    assert {(entry["loc"], entry["type"]) for entry in error.errors()} == {
        (("max_retries",), "extra_forbidden"),
        (("nested",), "extra_forbidden"),
    }


def test_a_count_or_ratio_refuses_a_boolean_with_a_clear_message() -> None:
    error = refused(HttpResilienceOptions, {"max_retry_attempts": True})
    assert error.errors()[0]["msg"] == "Value error, give a number, not true or false"
    error = refused(ResilienceMediatorOptions, {"max_retry_attempts": True})
    assert error.errors()[0]["msg"] == "Value error, give a number, not true or false"


@pytest.mark.parametrize(
    "model", [HttpResilienceOptions, StreamRetryOptions, ResilienceMediatorOptions]
)
@pytest.mark.parametrize("value", ["99999999999999h", 1e30, "9" * 400])
def test_a_duration_too_long_for_timedelta_is_a_named_error_not_a_crash(
    model: type[pydantic.BaseModel], value: object
) -> None:
    # Before: OverflowError escaped pydantic (and named no field).
    error = refused(model, {"base_delay": value})
    assert [entry["loc"] for entry in error.errors()] == [("base_delay",)]
    assert "base_delay may be at most 24 days" in error.errors()[0]["msg"]


# --- HttpResilienceOptions read for a client: the client is named ---------------------

HTTP_INVALID = [
    pytest.param(field, value, id=f"{field}-{index}")
    for field, kind in FIELDS[HttpResilienceOptions].items()
    for index, value in enumerate(INVALID[kind])
]
# What an environment variable can carry: strings.
HTTP_INVALID_TEXT = [
    pytest.param(field, value, id=f"{field}-{index}")
    for field, kind in FIELDS[HttpResilienceOptions].items()
    for index, value in enumerate(INVALID[kind])
    if isinstance(value, str)
]


def http(section: dict[str, Any]) -> dict[str, Any]:
    return {"resilience": {"http": section}}


def refused_for(
    client: str,
    config: Mapping[str, Any] | None = None,
    environ: Mapping[str, str] | None = None,
) -> pydantic.ValidationError:
    with pytest.raises(pydantic.ValidationError) as raised:
        HttpResilienceOptions.from_config(config, client=client, environ=environ or {})
    return raised.value


def check_named(error: pydantic.ValidationError, client: str, *fields: str) -> None:
    message = str(error)
    assert f"HTTP client {client!r}" in message
    for field in fields:
        assert f"\n{field}\n" in f"\n{message}\n"
    assert {entry["loc"][0] for entry in error.errors()} == set(fields)


@pytest.mark.parametrize(("field", "value"), HTTP_INVALID)
def test_a_clients_invalid_value_names_the_field_and_the_client(
    field: str, value: object
) -> None:
    error = refused_for("billing", http({"clients": {"billing": {field: value}}}))
    check_named(error, "billing", field)
    assert error.title == "HttpResilienceOptions of HTTP client 'billing'"


@pytest.mark.parametrize(("field", "value"), HTTP_INVALID)
def test_a_shared_invalid_value_names_the_client_being_read(
    field: str, value: object
) -> None:
    check_named(refused_for("orders", http({field: value})), "orders", field)


@pytest.mark.parametrize(("field", "value"), HTTP_INVALID_TEXT)
def test_an_invalid_environment_value_names_the_field_and_the_client(
    field: str, value: str
) -> None:
    shared = {f"RESILIENCE__HTTP__{field.upper()}": value}
    check_named(refused_for("orders", environ=shared), "orders", field)
    own = {f"resilience__http__clients__orders_api__{field}": value}
    check_named(refused_for("orders-api", environ=own), "orders-api", field)


def test_every_invalid_field_of_a_client_is_reported_at_once() -> None:
    fields = FIELDS[HttpResilienceOptions]
    section = {field: INVALID[kind][0] for field, kind in fields.items()}
    error = refused_for("billing", http({"clients": {"billing": section}}))
    check_named(error, "billing", *fields)


def test_a_cross_field_rule_names_the_client_in_the_message_and_the_title() -> None:
    error = refused_for(
        "billing", http({"clients": {"billing": {"attempt_timeout": 45}}})
    )
    assert error.title == "HttpResilienceOptions of HTTP client 'billing'"
    assert error.errors()[0]["msg"].startswith(
        "Value error, HTTP client 'billing': attempt_timeout (45 s) must be less"
    )


def test_an_error_pydantic_cannot_rebuild_keeps_its_title_and_notes_the_client(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def cannot(*args: object, **kwargs: object) -> pydantic.ValidationError:
        raise TypeError("not rebuildable")

    monkeypatch.setattr(pydantic.ValidationError, "from_exception_data", cannot)
    error = refused_for("billing", http({"clients": {"billing": {"queue_limit": -1}}}))
    assert error.title == "HttpResilienceOptions"
    assert error.__notes__ == ["in the options of HTTP client 'billing'"]
    assert [entry["loc"] for entry in error.errors()] == [("queue_limit",)]


BAD_CLIENT = http({"clients": {"billing": {"max_retry_attempts": -1}}})
ENTRY_POINTS: list[Any] = [
    pytest.param(
        lambda: AsyncResilientTransport(
            httpx.MockTransport(lambda request: httpx.Response(200)),
            config=BAD_CLIENT,
            name="billing",
        ),
        id="AsyncResilientTransport",
    ),
    pytest.param(
        lambda: ResilientTransport(
            httpx.MockTransport(lambda request: httpx.Response(200)),
            config=BAD_CLIENT,
            name="billing",
        ),
        id="ResilientTransport",
    ),
    pytest.param(
        lambda: create_async_client("billing", config=BAD_CLIENT),
        id="create_async_client",
    ),
]


@pytest.mark.parametrize("build", ENTRY_POINTS)
def test_every_entry_point_names_the_field_and_the_client(
    build: Callable[[], object],
) -> None:
    # Before: only the two cross-field rules named the client here.
    with pytest.raises(pydantic.ValidationError) as raised:
        build()
    check_named(raised.value, "billing", "max_retry_attempts")


# --- unknown keys, wherever they are --------------------------------------------------


@pytest.mark.parametrize(
    ("config", "key"),
    [
        pytest.param(http({"max_retries": 1}), "max_retries", id="top level"),
        pytest.param(
            http({"retry": {"max_retry_attempts": 1}}), "retry", id="nested section"
        ),
        pytest.param(
            http({"clients": {"billing": {"max_retries": 1}}}),
            "max_retries",
            id="client",
        ),
        pytest.param(
            http({"clients": {"billing": {"retry": {"base_delay": 1}}}}),
            "retry",
            id="nested in a client",
        ),
        pytest.param(
            http({"clients": {"billing": {"clients": {"billing": {}}}}}),
            "clients",
            id="clients inside a client",
        ),
    ],
)
def test_an_unknown_key_in_any_section_is_an_error_naming_it_and_the_client(
    config: dict[str, Any], key: str
) -> None:
    error = refused_for("billing", config)
    check_named(error, "billing", key)
    assert error.errors()[0]["type"] == "extra_forbidden"


@pytest.mark.parametrize(
    ("variable", "key"),
    [
        ("RESILIENCE__HTTP__MAX_RETRIES", "max_retries"),
        ("RESILIENCE__HTTP__RETRY__MAX_RETRY_ATTEMPTS", "retry__max_retry_attempts"),
        ("RESILIENCE__HTTP__CLIENTS__BILLING__MAX_RETRIES", "max_retries"),
        # A client's name and no field: before, silently ignored.
        ("RESILIENCE__HTTP__CLIENTS__BILLING", "clients__billing"),
        ("RESILIENCE__HTTP__CLIENTS", "clients"),
        ("RESILIENCE__HTTP__", ""),
    ],
)
def test_an_unknown_environment_variable_is_an_error_naming_it_and_the_client(
    variable: str, key: str
) -> None:
    error = refused_for("billing", environ={variable: "1"})
    check_named(error, "billing", key)


def test_a_variable_of_another_client_is_left_to_that_client() -> None:
    environ = {"RESILIENCE__HTTP__CLIENTS__ORDERS__MAX_RETRIES": "1"}
    read = HttpResilienceOptions.from_config(None, client="billing", environ=environ)
    assert read == HttpResilienceOptions()
    check_named(refused_for("orders", environ=environ), "orders", "max_retries")


@pytest.mark.parametrize(
    ("config", "where"),
    [
        ({"resilience": []}, "configuration section 'resilience' is not a mapping"),
        (http([]), "configuration section 'resilience.http' is not a mapping"),  # type: ignore[arg-type]
        (
            http({"clients": "billing"}),
            "configuration section 'resilience.http.clients' is not a mapping",
        ),
        (
            http({"clients": {"billing": 3}}),
            "configuration section 'resilience.http.clients' holds a value of type "
            "int for it, not a mapping",
        ),
    ],
)
def test_a_section_that_is_not_a_mapping_names_it_and_the_client(
    config: dict[str, Any], where: str
) -> None:
    with pytest.raises(TypeError) as raised:
        HttpResilienceOptions.from_config(config, client="billing", environ={})
    assert str(raised.value) == f"HTTP client 'billing': {where}"


# --- the mediator's section -----------------------------------------------------------

MEDIATOR_INVALID = [
    pytest.param(field, value, id=f"{field}-{index}")
    for field, kind in FIELDS[ResilienceMediatorOptions].items()
    for index, value in enumerate(INVALID[kind])
]


def mediator_refused(
    config: Mapping[str, Any] | None, environ: Mapping[str, str] | None = None
) -> pydantic.ValidationError:
    with pytest.raises(pydantic.ValidationError) as raised:
        ResilienceMediatorOptions.from_config(config, environ=environ or {})
    return raised.value


@pytest.mark.parametrize(("field", "value"), MEDIATOR_INVALID)
def test_an_invalid_mediator_value_in_the_section_names_the_field(
    field: str, value: object
) -> None:
    error = mediator_refused({"resilience": {"mediator": {field: value}}})
    assert [entry["loc"] for entry in error.errors()] == [(field,)]


@pytest.mark.parametrize(
    ("field", "value"),
    [
        pytest.param(field, value, id=f"{field}-{index}")
        for field, kind in FIELDS[ResilienceMediatorOptions].items()
        for index, value in enumerate(INVALID[kind])
        if isinstance(value, str)
    ],
)
def test_an_invalid_mediator_environment_value_names_the_field(
    field: str, value: str
) -> None:
    error = mediator_refused(None, {f"RESILIENCE__MEDIATOR__{field.upper()}": value})
    assert [entry["loc"] for entry in error.errors()] == [(field,)]


@pytest.mark.parametrize(
    ("config", "environ", "key"),
    [
        ({"resilience": {"mediator": {"retries": 1}}}, {}, "retries"),
        ({"resilience": {"mediator": {"retry": {"base_delay": 1}}}}, {}, "retry"),
        (None, {"RESILIENCE__MEDIATOR__RETRIES": "1"}, "retries"),
        (None, {"RESILIENCE__MEDIATOR__RETRY__BASE_DELAY": "1"}, "retry__base_delay"),
    ],
)
def test_an_unknown_mediator_key_is_an_error_naming_it(
    config: Mapping[str, Any] | None, environ: dict[str, str], key: str
) -> None:
    error = mediator_refused(config, environ)
    assert [(entry["loc"], entry["type"]) for entry in error.errors()] == [
        ((key,), "extra_forbidden")
    ]


def test_the_mediator_module_refuses_bad_configuration_on_registration() -> None:
    with pytest.raises(pydantic.ValidationError) as raised:
        ResilienceMediatorModule(
            config={"resilience": {"mediator": {"max_retry_attempts": True}}}
        )
    assert [entry["loc"] for entry in raised.value.errors()] == [
        ("max_retry_attempts",)
    ]


# --- the custom pipeline and stream retry refuse at the call --------------------------

ADD: dict[type[pydantic.BaseModel], Callable[..., object]] = {
    RetryOptions: ResiliencePipeline().add_retry,
    BreakerOptions: ResiliencePipeline().add_breaker,
    ConcurrencyLimiterOptions: ResiliencePipeline().add_limiter,
    HedgingOptions: ResiliencePipeline().add_hedging,
    RetryBudgetOptions: ResiliencePipeline().add_retry_budget,
    RateLimiterOptions: ResiliencePipeline().add_rate_limiter,
}


@pytest.mark.parametrize(
    ("model", "field", "value"),
    [
        pytest.param(model, field, INVALID[kind][0], id=f"{model.__name__}.{field}")
        for model in ADD
        for field, kind in FIELDS[model].items()
    ],
)
def test_a_pipeline_step_refuses_an_invalid_field_when_added(
    model: type[pydantic.BaseModel], field: str, value: object
) -> None:
    with pytest.raises(pydantic.ValidationError) as raised:
        ADD[model](**{**BASE.get(model, {}), field: value})
    assert [entry["loc"] for entry in raised.value.errors()] == [(field,)]


@pytest.mark.parametrize("value", INVALID[POSITIVE_DURATION][:5])
def test_a_pipeline_timeout_refuses_an_invalid_duration_when_added(
    value: Any,  # wrong types on purpose: the checker would refuse them
) -> None:
    with pytest.raises(pydantic.ValidationError) as raised:
        ResiliencePipeline().add_timeout(value)
    assert [entry["loc"] for entry in raised.value.errors()] == [("timeout",)]


def test_stream_retry_takes_built_options_only() -> None:
    async def source() -> Any:
        yield 1  # pragma: no cover - never iterated

    with pytest.raises(TypeError):
        with_retry(lambda context: source(), {"max_retry_attempts": -1})  # type: ignore[arg-type]
