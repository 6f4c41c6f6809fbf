"""`http_resilience.wsgi`: the ASGI middlewares' rules and answers, for WSGI."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest

import http_resilience
from http_resilience import (
    AttemptTimeoutError,
    BrokenCircuitError,
    RateLimitedError,
    current_correlation_id,
    remaining_time,
)
from http_resilience._core.nested import caller_attempt, note_exhausted
from http_resilience.wsgi import (
    MiddlewareOrderError,
    ResilienceContextMiddleware,
    ResilienceErrorMiddleware,
)
from tests.support.wsgi_calls import Answered, asgi_answer, call, environ_of

SECRET = "client 'payments' at https://secret.internal"


def seeing(log: list[tuple[str, Any, Any, Any]]) -> Any:
    """An app that streams, noting the context as it starts and as it is read."""

    def note(where: str) -> None:
        log.append(
            (where, remaining_time(), caller_attempt(), current_correlation_id())
        )

    def app(environ: dict[str, Any], start_response: Any) -> Iterator[bytes]:
        note("call")
        start_response("200 OK", [])
        return body()

    def body() -> Iterator[bytes]:
        note("body")
        yield b"part"

    return app


FROM_A_CALLER = {
    "HTTP_X_REQUEST_TIMEOUT_MS": "1500",
    "HTTP_X_RETRY_ATTEMPT": "2",
    "HTTP_X_CORRELATION_ID": "order-42",
}


def test_a_trusted_callers_context_holds_for_the_call_and_the_body() -> None:
    log: list[tuple[str, Any, Any, Any]] = []

    call(ResilienceContextMiddleware(seeing(log)), environ_of(**FROM_A_CALLER))

    assert [(where, attempt, id) for where, _, attempt, id in log] == [
        ("call", 2, "order-42"),
        ("body", 2, "order-42"),
    ]
    assert all(0 < left <= 1.45 for _, left, _, _ in log)
    assert (remaining_time(), caller_attempt(), current_correlation_id()) == (
        None,
        None,
        None,
    )


def test_an_untrusted_caller_gets_the_default_deadline_no_marker_and_a_new_id() -> None:
    log: list[tuple[str, Any, Any, Any]] = []
    wrapped = ResilienceContextMiddleware(
        seeing(log), trusted=lambda environ: False, default_deadline="5s"
    )

    call(wrapped, environ_of(**FROM_A_CALLER))

    (_, left, attempt, made), _ = log
    assert 1.5 < left <= 5
    assert attempt is None
    assert made not in (None, "order-42")


@pytest.mark.parametrize("value", ["9" * 12, "9" * 13, "9" * 100_000])
def test_a_deadline_of_any_number_of_digits_is_clamped_never_ignored(
    value: str,
) -> None:
    log: list[tuple[str, Any, Any, Any]] = []
    wrapped = ResilienceContextMiddleware(seeing(log), max_deadline=5, safety_margin=0)

    call(wrapped, environ_of(HTTP_X_REQUEST_TIMEOUT_MS=value))

    assert all(4 < left <= 5 for _, left, _, _ in log)
    assert len(log) == 2
    assert wrapped.ignored == {}


@pytest.mark.parametrize(
    ("name", "value", "kind"),
    [
        ("HTTP_X_REQUEST_TIMEOUT_MS", "soon", "deadline"),
        ("HTTP_X_REQUEST_TIMEOUT_MS", "1500, 900", "deadline"),
        ("HTTP_X_RETRY_ATTEMPT", "0", "attempt"),
        ("HTTP_X_CORRELATION_ID", "a, b", "correlation"),
        ("HTTP_X_CORRELATION_ID", "caf\u00e9", "correlation"),
    ],
)
def test_a_malformed_or_joined_value_is_ignored_and_counted(
    name: str, value: str, kind: str
) -> None:
    wrapped = ResilienceContextMiddleware(seeing([]))

    call(wrapped, environ_of(**{name: value}))

    assert wrapped.ignored == {kind: 1}


def test_a_failed_answer_after_a_call_that_gave_up_is_marked() -> None:
    def app(environ: dict[str, Any], start_response: Any) -> list[bytes]:
        note_exhausted()
        start_response("502 Bad Gateway", [])
        return [b""]

    answered = call(ResilienceContextMiddleware(app))

    assert answered.headers["x-retry-exhausted"] == "1"


def test_a_good_answer_is_not_marked_nor_one_after_calls_that_did_not_give_up() -> None:
    def gave_up(environ: dict[str, Any], start_response: Any) -> list[bytes]:
        note_exhausted()
        start_response("200 OK", [])
        return [b""]

    def failed(environ: dict[str, Any], start_response: Any) -> list[bytes]:
        start_response("500 Internal Server Error", [])
        return [b""]

    for app in (gave_up, failed):
        assert "x-retry-exhausted" not in call(ResilienceContextMiddleware(app)).headers


def test_an_outage_after_a_call_that_gave_up_is_answered_marked_not_raised() -> None:
    def app(environ: dict[str, Any], start_response: Any) -> list[bytes]:
        note_exhausted()
        raise AttemptTimeoutError(SECRET)

    answered = call(ResilienceContextMiddleware(app))

    assert answered.status == "504 Gateway Timeout"
    assert answered.headers["x-retry-exhausted"] == "1"
    assert SECRET.encode() not in answered.body


def test_a_bug_after_a_call_that_gave_up_is_answered_503_then_raised() -> None:
    def app(environ: dict[str, Any], start_response: Any) -> list[bytes]:
        note_exhausted()
        start_response("200 OK", [])
        raise KeyError(SECRET)

    answered = Answered()
    body: Any = ResilienceContextMiddleware(app)(environ_of(), answered.start_response)
    assert next(body).startswith(b'{"type": "about:blank"')
    with pytest.raises(KeyError):
        next(body)
    body.close()
    (status, headers, exc_info) = answered.calls[-1]
    assert status == "503 Service Unavailable"
    assert ("X-Retry-Exhausted", "1") in headers
    assert isinstance(exc_info[1], KeyError)  # replaces the answer begun


def test_a_bug_without_a_call_that_gave_up_is_raised_as_it_is() -> None:
    def app(environ: dict[str, Any], start_response: Any) -> list[bytes]:
        raise KeyError(SECRET)

    with pytest.raises(KeyError):
        call(ResilienceContextMiddleware(app))


def raising(error: BaseException) -> Any:
    def app(environ: dict[str, Any], start_response: Any) -> Any:
        raise error

    return app


def asgi_raising(error: BaseException) -> Any:
    async def app(scope: Any, receive: Any, send: Any) -> None:
        raise error

    return app


@pytest.mark.parametrize(
    "error",
    [
        BrokenCircuitError(SECRET, retry_after=2.5),
        AttemptTimeoutError(SECRET),
        RateLimitedError(SECRET, retry_after=1.2, reason="quota"),
        RateLimitedError(SECRET),
    ],
    ids=["circuit", "timeout", "quota", "limiter"],
)
def test_the_error_answers_are_the_asgi_middlewares_to_the_byte(
    error: BaseException,
) -> None:
    wsgi = call(ResilienceErrorMiddleware(raising(error)))
    asgi = asgi_answer(http_resilience.ResilienceErrorMiddleware(asgi_raising(error)))

    assert wsgi.status == f"{asgi.status_code} {asgi.reason_phrase}"
    assert wsgi.headers == dict(asgi.headers)
    assert wsgi.body == asgi.content
    assert SECRET.encode() not in wsgi.body


def test_an_error_that_does_not_map_is_raised() -> None:
    with pytest.raises(LookupError):
        call(ResilienceErrorMiddleware(raising(LookupError(SECRET))))


def test_an_answer_the_app_began_is_replaced_through_exc_info() -> None:
    def app(environ: dict[str, Any], start_response: Any) -> Any:
        start_response("200 OK", [])
        raise AttemptTimeoutError(SECRET)

    answered = call(ResilienceErrorMiddleware(app))

    assert answered.status == "504 Gateway Timeout"
    assert isinstance(answered.calls[-1][2][1], AttemptTimeoutError)


def test_the_order_is_recorded_in_the_environ_and_enforced() -> None:
    environ = environ_of()
    inner = ResilienceErrorMiddleware(seeing([]))

    call(ResilienceContextMiddleware(inner), environ)

    assert environ["resilience.middleware_stack"] == [
        "ResilienceContextMiddleware",
        "ResilienceErrorMiddleware",
    ]
    with pytest.raises(
        MiddlewareOrderError, match="ResilienceErrorMiddleware runs outside"
    ):
        call(ResilienceErrorMiddleware(ResilienceContextMiddleware(seeing([]))))


async def _async_trusted(environ: Any) -> bool:
    return True


@pytest.mark.parametrize(
    ("options", "error"),
    [
        ({"safety_margin": -1}, ValueError),
        ({"max_deadline": float("nan")}, ValueError),
        ({"default_deadline": 0}, ValueError),
        ({"default_deadline": "400s"}, ValueError),
        ({"default_deadline": "soon"}, ValueError),
        ({"default_deadline": True}, TypeError),
        ({"deadline_header": "a b"}, ValueError),
        ({"attempt_header": 3}, TypeError),
        ({"trusted": 3}, TypeError),
        ({"trusted": _async_trusted}, TypeError),
    ],
)
def test_options_are_refused_with_the_asgi_middlewares_messages(
    options: dict[str, Any], error: type[Exception]
) -> None:
    with pytest.raises(error) as wsgi:
        ResilienceContextMiddleware(seeing([]), **options)
    with pytest.raises(error) as asgi:
        http_resilience.ResilienceContextMiddleware(seeing([]), **options)

    assert str(wsgi.value) == str(asgi.value).replace("ASGI scope", "WSGI environ")


def test_the_options_read_as_the_asgi_middlewares_do() -> None:
    wrapped = ResilienceContextMiddleware(seeing([]), default_deadline="10s")

    assert wrapped.default_deadline == timedelta(seconds=10)
    with pytest.raises(TypeError, match="app must be a WSGI application, got int"):
        ResilienceErrorMiddleware(3)  # type: ignore[arg-type]
