"""`mediator.wsgi.RequestContextMiddleware`: the ASGI rules, for WSGI."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from mediator import (
    Principal,
    current_correlation_id,
    current_principal,
)
from mediator.wsgi import RequestContextMiddleware
from tests.support.wsgi_calls import Answered, call, environ_of


def seeing(log: list[tuple[str, Any, Any]]) -> Any:
    """An app that streams, noting the context as it starts and as it is read."""

    def app(environ: dict[str, Any], start_response: Any) -> Iterator[bytes]:
        log.append(("call", current_correlation_id(), current_principal()))
        start_response("200 OK", [("Content-Type", "text/plain")])
        return body()

    def body() -> Iterator[bytes]:
        log.append(("body", current_correlation_id(), current_principal()))
        yield b"part"

    return app


def test_a_callers_id_is_set_while_the_app_runs_and_its_body_is_read() -> None:
    log: list[tuple[str, Any, Any]] = []
    wrapped = RequestContextMiddleware(
        seeing(log), principal=lambda environ: Principal(environ["REMOTE_USER"])
    )

    answered = call(
        wrapped, environ_of(HTTP_X_CORRELATION_ID="order-42", REMOTE_USER="u-1")
    )

    assert log == [
        ("call", "order-42", Principal("u-1")),
        ("body", "order-42", Principal("u-1")),
    ]
    assert answered.headers["x-correlation-id"] == "order-42"
    assert (current_correlation_id(), current_principal()) == (None, None)


def test_the_context_is_reset_when_the_body_is_closed_not_before() -> None:
    def app(environ: dict[str, Any], start_response: Any) -> Iterator[bytes]:
        start_response("200 OK", [])
        yield b"a"

    body: Any = RequestContextMiddleware(app)(
        environ_of(HTTP_X_CORRELATION_ID="order-42"), Answered().start_response
    )
    assert next(body) == b"a"
    assert current_correlation_id() is None  # not in the server's own context
    body.close()
    body.close()  # once is enough; a second close does nothing


def test_the_principal_is_left_in_the_environ() -> None:
    environ = environ_of()
    call(
        RequestContextMiddleware(seeing([]), principal=lambda environ: None),
        environ,
    )

    assert "mediator.principal" in environ
    assert environ["mediator.principal"] is None


@pytest.mark.parametrize(
    "sent",
    ["", "a b", "a, b", "x" * 201, "caf\u00e9"],
    ids=["empty", "space", "joined", "long", "latin-1"],
)
def test_a_malformed_or_joined_id_is_replaced_by_a_new_one(sent: str) -> None:
    log: list[tuple[str, Any, Any]] = []

    answered = call(
        RequestContextMiddleware(seeing(log)),
        environ_of(HTTP_X_CORRELATION_ID=sent),
    )

    made = answered.headers["x-correlation-id"]
    assert made != sent
    assert len(made) == 36
    assert log[0][1] == made


def test_an_untrusted_callers_id_is_ignored() -> None:
    log: list[tuple[str, Any, Any]] = []
    wrapped = RequestContextMiddleware(
        seeing(log), trusted=lambda environ: environ["REMOTE_ADDR"] == "10.0.0.1"
    )

    untrusted = call(
        wrapped, environ_of(HTTP_X_CORRELATION_ID="order-42", REMOTE_ADDR="10.0.0.2")
    )
    trusted = call(
        wrapped, environ_of(HTTP_X_CORRELATION_ID="order-42", REMOTE_ADDR="10.0.0.1")
    )

    assert untrusted.headers["x-correlation-id"] != "order-42"
    assert trusted.headers["x-correlation-id"] == "order-42"


def test_a_header_of_its_own_name_is_read_and_the_apps_own_is_kept() -> None:
    def app(environ: dict[str, Any], start_response: Any) -> list[bytes]:
        start_response("200 OK", [("request-id", "chosen-by-app")])
        return [str(current_correlation_id()).encode()]

    answered = call(
        RequestContextMiddleware(app, correlation_header="Request-Id"),
        environ_of(HTTP_REQUEST_ID="r-7"),
    )

    assert answered.body == b"r-7"
    assert answered.calls[-1][1] == [("request-id", "chosen-by-app")]


def test_an_app_that_raises_leaves_no_context_behind() -> None:
    def app(environ: dict[str, Any], start_response: Any) -> list[bytes]:
        raise LookupError("boom")

    answered = call(
        RequestContextMiddleware(app), environ_of(HTTP_X_CORRELATION_ID="a")
    )
    assert (answered.status, answered.headers["x-correlation-id"]) == (
        "500 Internal Server Error",
        "a",
    )
    assert current_correlation_id() is None


async def _async_principal(environ: Any) -> Principal:
    return Principal("u-1")


async def _async_trusted(environ: Any) -> bool:
    return True


@pytest.mark.parametrize(
    ("options", "error", "message"),
    [
        ({"principal": 3}, TypeError, "principal must be a callable that takes the "),
        ({"principal": _async_principal}, TypeError, "principal must be a plain"),
        ({"trusted": 3}, TypeError, "trusted must be a callable that takes the WSGI"),
        ({"trusted": _async_trusted}, TypeError, "trusted must be a plain function"),
        ({"correlation_header": 3}, TypeError, "correlation_header must be an HTTP"),
        ({"correlation_header": "a b"}, ValueError, "correlation_header must be"),
    ],
)
def test_options_are_checked_at_construction(
    options: dict[str, Any], error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        RequestContextMiddleware(seeing([]), **options)


def test_a_principal_or_verdict_of_the_wrong_type_fails_the_request() -> None:
    wrong_principal = RequestContextMiddleware(
        seeing([]),
        principal=lambda environ: "u-1",  # type: ignore[arg-type,return-value]
    )
    wrong_verdict = RequestContextMiddleware(
        seeing([]),
        trusted=lambda environ: "yes",  # type: ignore[arg-type,return-value]
    )

    with pytest.raises(TypeError, match="must return a Principal or None, got str"):
        call(wrong_principal)
    with pytest.raises(TypeError, match="trusted must return True or False, got str"):
        call(wrong_verdict)
