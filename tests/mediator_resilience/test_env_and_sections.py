"""`RESILIENCE__MEDIATOR__*` wins over options in code; misspelt sections fail.

Issue 24: options given to `ResilienceMediatorModule` used to switch the
environment off, silently; a section such as ``resilience.mediatr`` was
ignored.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from datetime import timedelta

import pytest
from injector import Injector
from pydantic import ValidationError

from mediator import Mediator, MediatorModule, Query, QueryHandler
from mediator_resilience import (
    ResilienceMediatorModule,
    ResilienceMediatorOptions,
    retryable,
)
from mediator_resilience.testing import FakeClock

pytestmark = pytest.mark.anyio

ATTEMPTS = "RESILIENCE__MEDIATOR__MAX_RETRY_ATTEMPTS"


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.upper().startswith("RESILIENCE__"):
            monkeypatch.delenv(name)


@retryable
class Flaky(Query[int]):
    pass


class FlakyHandler(QueryHandler[Flaky, int]):
    calls = 0

    async def handle(self, request: Flaky) -> int:
        FlakyHandler.calls += 1
        raise ConnectionError("down")


IN_CODE = ResilienceMediatorOptions(max_retry_attempts=0, base_delay="10ms")


async def test_the_environment_wins_over_options_in_code(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(ATTEMPTS, "2")
    module = ResilienceMediatorModule(IN_CODE, clock=FakeClock())
    mediator = Injector(
        [MediatorModule(lambda m: m.add_handler(FlakyHandler).use_defaults()), module]
    ).get(Mediator)

    FlakyHandler.calls = 0
    with pytest.raises(ConnectionError):
        await mediator.send(Flaky())

    assert FlakyHandler.calls == 3
    assert module.options.max_retry_attempts == 2
    assert module.options.base_delay == timedelta(milliseconds=10)  # kept


def test_without_variables_the_options_in_code_are_used_as_given() -> None:
    assert ResilienceMediatorModule(IN_CODE).options is IN_CODE


def test_a_bad_variable_names_itself(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ATTEMPTS, "many")

    makers: list[Callable[[], object]] = [
        lambda: ResilienceMediatorModule(IN_CODE),
        lambda: ResilienceMediatorModule(),
    ]
    for make in makers:
        with pytest.raises(ValidationError) as raised:
            make()
        assert raised.value.title == (
            f"ResilienceMediatorOptions (from environment variable {ATTEMPTS})"
        )
        assert raised.value.errors()[0]["loc"] == ("max_retry_attempts",)


def test_an_unknown_variable_names_itself(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RESILIENCE__MEDIATOR__BASE_DELY", "1s")

    with pytest.raises(ValidationError) as raised:
        ResilienceMediatorModule(IN_CODE)

    assert "RESILIENCE__MEDIATOR__BASE_DELY" in raised.value.title


def test_a_misspelt_section_is_refused_with_the_nearest_name() -> None:
    config = {"resilience": {"mediatr": {"max_retry_attempts": 5}}}
    expected = (
        "unknown configuration section 'resilience.mediatr' (did you mean "
        "'resilience.mediator'?); the sections under 'resilience' are "
        "'resilience.http', 'resilience.mediator'"
    )

    makers: list[Callable[[], object]] = [
        lambda: ResilienceMediatorOptions.from_config(config, environ={}),
        lambda: ResilienceMediatorModule(config=config),
        lambda: ResilienceMediatorModule(IN_CODE, config=config),
    ]
    for make in makers:
        with pytest.raises(ValueError, match="unknown configuration section") as raised:
            make()
        assert str(raised.value) == expected


def test_the_known_sections_pass() -> None:
    config = {"resilience": {"mediator": {"max_retry_attempts": 5}, "http": {}}}

    assert ResilienceMediatorModule(config=config).options.max_retry_attempts == 5
