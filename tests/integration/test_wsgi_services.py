"""Flask and Django services under waitress, behind the WSGI middlewares.

Each service runs on 127.0.0.1 under a real WSGI server, its views sending
through the mediator (`send_sync`) and its handlers calling a second local
server with an `http_resilience` sync client. A caller from the service's
network (127.0.0.1) has its correlation id, deadline and retry marker carried
to the outbound call; one from 127.0.0.2 has them ignored. Domain and
pipeline errors come back as problem+json; a misordered stack is refused.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from mediator.wsgi import MiddlewareOrderError
from tests.support.wsgi_django import django_app
from tests.support.wsgi_flask import flask_app
from tests.support.wsgi_server import serve_wsgi
from tests.support.wsgi_service import (
    DEFAULT_DEADLINE,
    SECRET,
    UNTRUSTED_PEER,
    Downstream,
    Service,
    build_service,
    misordered,
    wrapped,
)

FROM_A_CALLER = {
    "X-Request-Timeout-Ms": "1500",
    "X-Retry-Attempt": "2",
    "X-Correlation-ID": "order-42",
}
LOG_TIMEOUT = 30.0  # seconds; generous on a busy 2-core machine
FRAMEWORKS: dict[str, Callable[[Service], Any]] = {
    "flask": flask_app,
    "django": django_app,
}


class ServerErrors(logging.Handler):
    """The exceptions the WSGI server logs, told as they come (from its threads)."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.errors: list[BaseException] = []
        self.logged = threading.Event()

    def emit(self, record: logging.LogRecord) -> None:
        if record.exc_info is not None and record.exc_info[1] is not None:
            self.errors.append(record.exc_info[1])
            self.logged.set()


@pytest.fixture
def server_errors() -> Iterator[ServerErrors]:
    handler = ServerErrors()
    logger = logging.getLogger("waitress")
    logger.addHandler(handler)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)


@dataclass
class Running:
    url: str
    downstream: Downstream

    def get(
        self, path: str, *, local_address: str | None = None, **headers: str
    ) -> httpx.Response:
        transport = httpx.HTTPTransport(local_address=local_address)
        with httpx.Client(transport=transport, timeout=30) as client:
            return client.get(self.url + path, headers=headers)


@pytest.fixture(scope="module")
def downstream() -> Iterator[tuple[str, Downstream]]:
    recorder = Downstream()
    with serve_wsgi(recorder, name="downstream") as url:
        yield url, recorder


@pytest.fixture(scope="module", params=sorted(FRAMEWORKS))
def service(
    request: pytest.FixtureRequest, downstream: tuple[str, Downstream]
) -> Iterator[Running]:
    url, recorder = downstream
    built = build_service(url)
    app = FRAMEWORKS[request.param](built)
    if request.param == "flask":
        app.wsgi_app = wrapped(app.wsgi_app)
    else:
        app = wrapped(app)
    try:
        with serve_wsgi(app, name=f"{request.param} service") as served:
            yield Running(served, recorder)
    finally:
        built.close()


@pytest.fixture
def running(service: Running) -> Running:
    service.downstream.clear()
    return service


def test_a_trusted_callers_context_reaches_the_handler_and_the_outbound_call(
    running: Running,
) -> None:
    answer = running.get("/quote", **FROM_A_CALLER, **{"X-User": "u-1"})

    assert answer.status_code == 200
    assert answer.headers["X-Correlation-ID"] == "order-42"
    seen = answer.json()
    assert seen["principal"] == "u-1"
    assert seen["correlation"] == "order-42"
    sent = seen["downstream"]
    assert sent["x-correlation-id"] == "order-42"
    # The caller's 1.5 s, less the margin and the time spent: never more.
    assert 0 < int(sent["x-request-timeout-ms"]) <= 1450


def test_an_untrusted_callers_context_is_ignored(running: Running) -> None:
    answer = running.get("/quote", local_address=UNTRUSTED_PEER, **FROM_A_CALLER)

    assert answer.status_code == 200
    made = answer.headers["X-Correlation-ID"]
    assert made != "order-42"
    seen = answer.json()
    assert seen["principal"] is None
    assert seen["correlation"] == made
    sent = seen["downstream"]
    assert sent["x-correlation-id"] == made
    # The service's own 5 s, not the caller's 1.5 s.
    assert 1500 < int(sent["x-request-timeout-ms"]) <= DEFAULT_DEADLINE * 1000


def test_a_callers_retry_marker_keeps_the_handlers_call_to_one_attempt(
    running: Running,
) -> None:
    answer = running.get("/down/answer", **FROM_A_CALLER)

    assert answer.status_code == 502
    assert answer.headers["X-Retry-Exhausted"] == "1"
    assert len(running.downstream.calls_to("/down")) == 1


def test_an_untrusted_callers_retry_marker_is_ignored(running: Running) -> None:
    answer = running.get("/down/answer", local_address=UNTRUSTED_PEER, **FROM_A_CALLER)

    assert answer.status_code == 502
    assert len(running.downstream.calls_to("/down")) == 4  # 1 + 3 retries


def test_the_context_holds_while_a_streamed_body_is_read(running: Running) -> None:
    answer = running.get("/stream", **FROM_A_CALLER)

    assert answer.status_code == 200
    first, sent = answer.text.split("\n", 1)
    assert first == "order-42"
    seen = json.loads(sent)
    assert seen["x-correlation-id"] == "order-42"
    assert 0 < int(seen["x-request-timeout-ms"]) <= 1450


@pytest.mark.parametrize(
    ("kind", "status"),
    [
        ("invalid", 422),
        ("missing", 404),
        ("conflict", 409),
        ("rule", 422),
        ("busy", 503),
        ("circuit", 503),
        ("timeout", 504),
    ],
)
def test_errors_are_answered_with_problem_json(
    running: Running, kind: str, status: int
) -> None:
    answer = running.get(f"/fail/{kind}", **{"X-User": "u-1"})

    assert answer.status_code == status
    assert answer.headers["content-type"] == "application/problem+json"
    problem = answer.json()
    assert problem["status"] == status
    assert SECRET not in answer.text
    assert answer.headers["X-Correlation-ID"]


def test_a_422_lists_the_field_errors(running: Running) -> None:
    answer = running.get("/fail/invalid")

    assert answer.json()["errors"] == [
        {"field": "lines.0.sku", "message": "Field required"}
    ]


def test_forbidden_is_401_with_the_challenge_without_a_principal_and_403_with_one(
    running: Running,
) -> None:
    anonymous = running.get("/fail/forbidden")
    known = running.get("/fail/forbidden", **{"X-User": "u-1"})

    assert anonymous.status_code == 401
    assert anonymous.headers["WWW-Authenticate"] == 'Bearer realm="shop"'
    assert known.status_code == 403
    assert "WWW-Authenticate" not in known.headers


def test_a_busy_database_and_an_open_circuit_say_when_to_come_back(
    running: Running,
) -> None:
    assert running.get("/fail/busy").headers["Retry-After"] == "1"
    assert running.get("/fail/circuit").headers["Retry-After"] == "3"


def test_an_outage_after_exhausted_retries_is_answered_and_marked(
    running: Running,
) -> None:
    answer = running.get("/down/timeout")

    assert answer.status_code == 504
    assert answer.headers["X-Retry-Exhausted"] == "1"


def test_a_bug_after_exhausted_retries_is_answered_503_and_raised_for_the_server(
    running: Running, server_errors: ServerErrors
) -> None:
    answer = running.get("/down/bug")

    assert answer.status_code == 503
    assert answer.headers["X-Retry-Exhausted"] == "1"
    assert SECRET not in answer.text
    # Raised after the answer's body: the server logs it once it has sent it.
    assert server_errors.logged.wait(LOG_TIMEOUT)
    assert [type(error) for error in server_errors.errors] == [RuntimeError]


def test_an_error_that_does_not_map_is_a_500_with_the_id_logged_once(
    running: Running, server_errors: ServerErrors, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.ERROR, logger="mediator.wsgi"):
        answer = running.get("/fail/bug", **{"X-Correlation-ID": "order-42"})

    # Answered by the outermost middleware, not the server: with the id.
    assert answer.status_code == 500
    assert answer.headers["Content-Type"] == "application/problem+json"
    assert answer.headers["X-Correlation-ID"] == "order-42"
    assert SECRET not in answer.text
    logged = [r for r in caplog.records if r.exc_info and r.name == "mediator.wsgi"]
    assert [type(record.exc_info[1]) for record in logged] == [RuntimeError]  # type: ignore[index]
    assert server_errors.errors == []


def test_a_misordered_stack_is_refused_before_the_app_runs(
    downstream: tuple[str, Downstream], server_errors: ServerErrors
) -> None:
    url, recorder = downstream
    built = build_service(url)
    app = flask_app(built)
    app.wsgi_app = misordered(app.wsgi_app)  # type: ignore[method-assign]
    recorder.clear()
    try:
        with serve_wsgi(app, name="misordered service") as served:
            answer = Running(served, recorder).get("/quote")
    finally:
        built.close()

    assert answer.status_code == 500
    assert recorder.calls_to("/ok") == []
    (error,) = server_errors.errors
    assert isinstance(error, MiddlewareOrderError)
    assert str(error).startswith(
        "DomainErrorMiddleware runs outside RequestContextMiddleware"
    )
