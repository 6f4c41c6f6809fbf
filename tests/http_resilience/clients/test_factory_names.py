"""A factory refuses configuration for a client it does not have, naming it."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from http_resilience import HttpClientFactory
from http_resilience._clients.names import check_client_names
from http_resilience.injector import HttpClientsModule
from http_resilience.testing import FakeClock

VARIABLE = "RESILIENCE__HTTP__CLIENTS__PAYMNETS__MAX_RETRY_ATTEMPTS"


def sections(**clients: dict[str, Any]) -> dict[str, Any]:
    return {"resilience": {"http": {"clients": clients}}}


def with_payments(factory: HttpClientFactory) -> HttpClientFactory:
    return factory.add("payments", transport=httpx.MockTransport(answer))


def answer(request: httpx.Request) -> httpx.Response:
    return httpx.Response(503)


def test_a_misspelt_section_is_refused_when_the_module_is_built() -> None:
    config = sections(paymnets={"max_retry_attempts": 0})
    with pytest.raises(ValueError, match="paymnets") as raised:
        HttpClientsModule(with_payments, config=config)
    assert str(raised.value) == (
        "configuration section 'resilience.http.clients.paymnets' is for HTTP "
        "client 'paymnets', which this factory does not have (did you mean "
        "'payments'?); it has 'default', 'payments'"
    )


def test_a_section_far_from_every_name_is_refused_too() -> None:
    config = sections(ledger={}, paymnets={})
    with pytest.raises(ValueError, match="ledger") as raised:
        HttpClientsModule(with_payments, config=config)
    assert str(raised.value) == (
        "configuration section 'resilience.http.clients.ledger' is for HTTP client "
        "'ledger', which this factory does not have; configuration section "
        "'resilience.http.clients.paymnets' is for HTTP client 'paymnets', which "
        "this factory does not have (did you mean 'payments'?); it has 'default', "
        "'payments'"
    )


def test_a_section_alone_declares_no_client() -> None:
    with pytest.raises(ValueError, match=r"'resilience\.http\.clients\.stock'"):
        HttpClientsModule(config=sections(stock={}))


@pytest.mark.parametrize("variable", [VARIABLE, VARIABLE.lower()])
def test_a_misspelt_environment_variable_is_refused_when_the_module_is_built(
    monkeypatch: pytest.MonkeyPatch, variable: str
) -> None:
    monkeypatch.setenv(variable, "0")
    with pytest.raises(ValueError, match="PAYMNETS") as raised:
        HttpClientsModule(with_payments)
    assert str(raised.value) == (
        f"environment variable {variable} is for HTTP client 'PAYMNETS', which "
        "this factory does not have (did you mean 'payments'?); it has 'default', "
        "'payments'"
    )


def test_a_variable_far_from_every_name_is_left_to_another_factory(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A program may build a second factory that has a `ledger` client: the
    # environment is shared, so only a near miss is taken for a misspelling.
    monkeypatch.setenv("RESILIENCE__HTTP__CLIENTS__LEDGER__MAX_RETRY_ATTEMPTS", "0")
    module = HttpClientsModule(with_payments)
    assert module.factory.names == ("default", "payments")


def test_the_right_names_pass_and_configure_their_clients(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("RESILIENCE__HTTP__CLIENTS__PAYMENTS__BASE_DELAY", "0")
    monkeypatch.setenv("resilience__http__clients__my_stock__base_delay", "0")
    monkeypatch.setenv("RESILIENCE__HTTP__CLIENTS__DEFAULT__MAX_RETRY_ATTEMPTS", "0")
    config = sections(payments={"max_retry_attempts": 1}, default={})
    sent: list[httpx.Request] = []

    def failing(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        return httpx.Response(503)

    factory = HttpClientsModule(
        lambda clients: clients.add(
            "payments", transport=httpx.MockTransport(failing)
        ).add("my-stock"),
        config=config,
        clock=FakeClock(),
    ).factory
    with factory:
        response = factory.client("payments").get("http://payments.local/")
    assert response.status_code == 503
    assert len(sent) == 2  # one retry, from the section, with no delay
    assert factory.names == ("default", "my-stock", "payments")


def test_a_factory_given_configure_checks_its_names_when_built() -> None:
    with pytest.raises(ValueError, match="did you mean 'payments'"):
        HttpClientFactory(with_payments, config=sections(paymnets={}))


def test_without_configure_the_names_are_fixed_by_the_first_client() -> None:
    factory = with_payments(HttpClientFactory(config=sections(paymnets={})))
    with pytest.raises(ValueError, match="did you mean 'payments'"):
        factory.client("payments")

    fine = with_payments(HttpClientFactory(config=sections(payments={})))
    with fine:
        fine.client("payments")
        with pytest.raises(RuntimeError) as raised:
            fine.add("stock")
    assert str(raised.value) == (
        "HTTP client 'stock': the factory's clients are fixed once it has handed "
        "out a client (or its configure has returned); add every client before"
    )


def test_after_configure_no_client_can_be_added() -> None:
    factory = HttpClientsModule(with_payments).factory
    with pytest.raises(RuntimeError, match="the factory's clients are fixed"):
        factory.add("stock")


@pytest.mark.parametrize(
    "config",
    [{"resilience": 3}, {"resilience": {"http": {"clients": ["payments"]}}}],
)
def test_a_section_that_is_not_a_mapping_holds_no_names(config: Any) -> None:
    # Reading the options names that mistake; the check adds nothing to it.
    check_client_names({"default"}, config, {})
