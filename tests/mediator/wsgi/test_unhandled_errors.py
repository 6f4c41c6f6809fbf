"""A bug's 500 carries the correlation id: the WSGI twin answers it too."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from typing import Any

import pytest

from mediator.wsgi import DomainErrorMiddleware, RequestContextMiddleware
from tests.support.wsgi_calls import Answered, call, environ_of

SECRET = "card 4111 1111 1111 1111"
PROBLEM = {
    "type": "about:blank",
    "title": "Internal Server Error",
    "status": 500,
    "detail": "The service failed to answer this request.",
}


def buggy(environ: dict[str, Any], start_response: Any) -> list[bytes]:
    raise KeyError(SECRET)


def bugs_logged(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [
        record
        for record in caplog.records
        if record.exc_info is not None and record.exc_info[0] is KeyError
    ]


def test_a_bug_is_answered_500_with_the_id_and_logged_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    app = RequestContextMiddleware(DomainErrorMiddleware(buggy))

    with caplog.at_level(logging.ERROR):
        answered = call(app, environ_of(HTTP_X_CORRELATION_ID="order-42"))

    assert answered.status == "500 Internal Server Error"
    assert answered.headers["x-correlation-id"] == "order-42"
    assert answered.headers["content-type"] == "application/problem+json"
    assert json.loads(answered.body) == PROBLEM
    assert SECRET.encode() not in answered.body
    (record,) = bugs_logged(caplog)
    assert record.name == "mediator.wsgi"
    assert record.getMessage() == (
        "unhandled error in GET / (correlation id order-42), answered 500"
    )


def test_an_answer_begun_is_replaced_through_exc_info() -> None:
    def began(environ: dict[str, Any], start_response: Any) -> list[bytes]:
        start_response("200 OK", [("Content-Type", "text/plain")])
        raise KeyError(SECRET)

    answered = call(RequestContextMiddleware(began))

    (first, _, none), (status, _, exc_info) = answered.calls
    assert (first, none) == ("200 OK", None)
    assert status == "500 Internal Server Error"
    assert isinstance(exc_info[1], KeyError)


def test_an_error_while_the_body_is_read_is_the_servers() -> None:
    def streams(environ: dict[str, Any], start_response: Any) -> Iterator[bytes]:
        start_response("200 OK", [])
        yield b"part"
        raise KeyError(SECRET)

    answered = Answered()
    body: Any = RequestContextMiddleware(streams)(environ_of(), answered.start_response)
    assert next(body) == b"part"
    with pytest.raises(KeyError):
        next(body)
    body.close()


def test_a_mounted_apps_own_stack_leaves_the_bug_to_the_outer_one(
    caplog: pytest.LogCaptureFixture,
) -> None:
    app = RequestContextMiddleware(RequestContextMiddleware(buggy))

    with caplog.at_level(logging.ERROR):
        answered = call(app, environ_of(HTTP_X_CORRELATION_ID="order-42"))

    assert answered.headers["x-correlation-id"] == "order-42"
    assert len(bugs_logged(caplog)) == 1
