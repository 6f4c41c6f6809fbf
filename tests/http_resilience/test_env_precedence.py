"""The operator's environment wins over options in code; misspelt sections fail.

Issue 24: explicit options given to a factory's client used to switch the
``RESILIENCE__HTTP__...`` overrides off, silently. Now the environment applies
on top of them, once, when the client is added; a client whose pipeline is
given in code refuses its own variables; a key under ``resilience`` that is
not a known section is refused wherever a configuration mapping is read.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any

import httpx
import pytest
from pydantic import ValidationError

from http_resilience import (
    HttpResilienceOptions,
    ResiliencePipeline,
    ResilientTransport,
    create_client,
)
from http_resilience._pipelines.standard import apply_environment
from http_resilience._primitives import config as http_sections
from http_resilience.injector import HttpClientFactory, HttpClientsModule
from http_resilience.testing import FakeClock
from mediator_resilience._primitives import config as mediator_sections

pytestmark = pytest.mark.anyio

OWN = "RESILIENCE__HTTP__CLIENTS__PAYMENTS__MAX_RETRY_ATTEMPTS"
SHARED = "RESILIENCE__HTTP__MAX_RETRY_ATTEMPTS"


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.upper().startswith("RESILIENCE__"):
            monkeypatch.delenv(name)


class Failing:
    """A payments service that always answers 503, counting the attempts."""

    def __init__(self) -> None:
        self.attempts = 0

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.attempts += 1
        return httpx.Response(503)


async def attempts_of(options: HttpResilienceOptions | None) -> int:
    service = Failing()
    factory = HttpClientFactory(
        lambda clients: clients.add(
            "payments",
            options,
            base_url="http://payments.local",
            transport=httpx.MockTransport(service),
        ),
        clock=FakeClock(),
    )
    async with factory:
        response = await factory.async_client("payments").get("/charges")
    assert response.status_code == 503
    return service.attempts


IN_CODE = HttpResilienceOptions(max_retry_attempts=0, base_delay="10ms")


async def test_options_in_code_alone_are_used_as_given() -> None:
    assert await attempts_of(IN_CODE) == 1


async def test_a_clients_variable_wins_over_its_options_in_code(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(OWN, "2")

    assert await attempts_of(IN_CODE) == 3


async def test_a_shared_variable_wins_over_code_and_the_clients_own_over_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(SHARED, "1")
    assert await attempts_of(IN_CODE) == 2

    monkeypatch.setenv(OWN.lower(), "3")  # any case
    assert await attempts_of(IN_CODE) == 4


async def test_the_variables_also_apply_to_options_read_from_configuration(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(OWN, "1")

    assert await attempts_of(None) == 2


def test_the_other_fields_given_in_code_are_kept() -> None:
    options = HttpResilienceOptions(
        max_retry_attempts=0, base_delay="10ms", retry_unsafe_methods=True
    )

    applied = apply_environment(
        options, client="payments", environ={OWN: "5", "UNRELATED": "x"}
    )

    assert applied.max_retry_attempts == 5
    assert applied.base_delay == options.base_delay
    assert applied.retry_unsafe_methods is True
    assert apply_environment(options, client="payments", environ={}) is options


def test_a_bad_variable_over_code_names_the_client_and_the_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(OWN, "-1")

    with pytest.raises(ValidationError) as raised:
        HttpClientsModule(lambda clients: clients.add("payments", IN_CODE))

    assert raised.value.title == (
        f"HttpResilienceOptions of HTTP client 'payments' (from environment "
        f"variable {OWN})"
    )
    assert raised.value.errors()[0]["loc"] == ("max_retry_attempts",)


def test_an_unknown_field_in_a_variable_names_the_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("RESILIENCE__HTTP__CLIENTS__PAYMENTS__MAX_RETRYS", "2")

    with pytest.raises(ValidationError) as raised:
        HttpClientFactory(lambda clients: clients.add("payments", IN_CODE))

    assert "RESILIENCE__HTTP__CLIENTS__PAYMENTS__MAX_RETRYS" in raised.value.title


def test_a_pipeline_in_code_refuses_its_clients_variables(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pipeline = ResiliencePipeline().add_retry(max_retry_attempts=1)
    monkeypatch.setenv(SHARED, "4")  # every client's: not this one's to refuse
    HttpClientFactory(lambda clients: clients.add("payments", pipeline=pipeline))

    monkeypatch.setenv(OWN, "4")
    with pytest.raises(ValueError, match="runs a pipeline given in code") as raised:
        HttpClientFactory(lambda clients: clients.add("payments", pipeline=pipeline))

    assert str(raised.value) == (
        "HTTP client 'payments' runs a pipeline given in code, which the "
        f"environment cannot change, but {OWN} is set for it: unset it, or give "
        "the client options instead of a pipeline"
    )


# --- sections under `resilience` ----------------------------------------------------


def test_a_misspelt_section_is_refused_with_the_nearest_name() -> None:
    config = {"resilience": {"htpp": {"max_retry_attempts": 1}}}

    with pytest.raises(ValueError, match="unknown configuration section") as raised:
        HttpResilienceOptions.from_config(config, environ={})

    assert str(raised.value) == (
        "unknown configuration section 'resilience.htpp' (did you mean "
        "'resilience.http'?); the sections under 'resilience' are "
        "'resilience.http', 'resilience.mediator'"
    )


Config = Mapping[str, Any]

BAD: Config = {"resilience": {"http": {}, "mediatr": {}, "zzz": 1}}
BAD_MESSAGE = (
    "unknown configuration section 'resilience.mediatr' (did you mean "
    "'resilience.mediator'?); unknown configuration section 'resilience.zzz'; "
    "the sections under 'resilience' are 'resilience.http', "
    "'resilience.mediator'"
)


def build_factory(config: Config) -> None:
    HttpClientFactory(config=config)


def build_module(config: Config) -> None:
    HttpClientsModule(config=config)


def open_client(config: Config) -> None:
    create_client("payments", config=config).close()


def build_transport(config: Config) -> None:
    ResilientTransport(config=config)


@pytest.mark.parametrize(
    "entry", [build_factory, build_module, open_client, build_transport]
)
def test_every_entry_point_reading_a_mapping_refuses_it(
    entry: Callable[[Config], None],
) -> None:
    # The known sections, and other keys at the root, pass.
    entry({"resilience": {"http": {}, "mediator": {}}, "app": {"x": 1}})

    with pytest.raises(ValueError, match="unknown configuration section") as raised:
        entry(BAD)

    assert str(raised.value) == BAD_MESSAGE


def test_both_packages_know_the_same_sections() -> None:
    assert http_sections.SECTIONS == mediator_sections.SECTIONS == {"http", "mediator"}
    assert f"{http_sections.ROOT}.http" == HttpResilienceOptions.SECTION
