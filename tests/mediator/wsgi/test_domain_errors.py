"""`mediator.wsgi.DomainErrorMiddleware`: the ASGI mapping, written for WSGI."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from mediator import (
    BusinessRuleError,
    ConflictError,
    DeadlineExceededError,
    FieldError,
    ForbiddenError,
    NotFoundError,
    Principal,
    TransientDatabaseError,
    ValidationError,
    acting_as,
)
from mediator import asgi as mediator_asgi
from mediator.wsgi import (
    DomainErrorMiddleware,
    MiddlewareOrderError,
    RequestContextMiddleware,
)
from tests.support.wsgi_calls import asgi_answer, call, environ_of

SECRET = "order 42 of secret@example.com"

ERRORS: dict[str, Callable[[], BaseException]] = {
    "invalid": lambda: ValidationError(
        SECRET, [FieldError(("sku",), "Field required")]
    ),
    "missing": lambda: NotFoundError(SECRET),
    "forbidden": lambda: ForbiddenError(SECRET),
    "conflict": lambda: ConflictError(SECRET),
    "rule": lambda: BusinessRuleError(SECRET),
    "busy": lambda: TransientDatabaseError(SECRET),
    "deadline": lambda: DeadlineExceededError(SECRET),
    "group": lambda: ExceptionGroup(
        "publish", [TransientDatabaseError(SECRET), NotFoundError(SECRET)]
    ),
}


def raising(error: Callable[[], BaseException]) -> Any:
    def app(environ: dict[str, Any], start_response: Any) -> Any:
        raise error()

    return app


def asgi_raising(error: Callable[[], BaseException]) -> Any:
    async def app(scope: Any, receive: Any, send: Any) -> None:
        raise error()

    return app


@pytest.mark.parametrize("kind", sorted(ERRORS))
@pytest.mark.parametrize("principal", [None, Principal("u-1")])
def test_each_answer_is_the_asgi_middlewares_to_the_byte(
    kind: str, principal: Principal | None
) -> None:
    options: dict[str, Any] = {"retry_after": 2.5, "www_authenticate": "Bearer"}
    with acting_as(principal):
        wsgi = call(DomainErrorMiddleware(raising(ERRORS[kind]), **options))
        asgi = asgi_answer(
            mediator_asgi.DomainErrorMiddleware(asgi_raising(ERRORS[kind]), **options)
        )

    # The reason phrase is the problem's title (RFC 9110's wording).
    assert wsgi.status == f"{asgi.status_code} {asgi.json()['title']}"
    assert wsgi.headers == dict(asgi.headers)
    assert wsgi.body == asgi.content
    assert SECRET.encode() not in wsgi.body


def test_the_principal_left_in_the_environ_tells_403_from_401() -> None:
    environ = environ_of(**{"mediator.principal": Principal("u-1")})

    answered = call(DomainErrorMiddleware(raising(ERRORS["forbidden"])), environ)

    assert answered.status == "403 Forbidden"


def test_an_answer_the_app_began_is_replaced_through_exc_info() -> None:
    def app(environ: dict[str, Any], start_response: Any) -> Any:
        start_response("200 OK", [("Content-Type", "text/plain")])
        raise NotFoundError(SECRET)

    answered = call(DomainErrorMiddleware(app))

    (first, _, none), (status, _, exc_info) = answered.calls
    assert (first, none, status) == ("200 OK", None, "404 Not Found")
    assert isinstance(exc_info[1], NotFoundError)


def test_an_answer_not_begun_is_given_without_exc_info() -> None:
    answered = call(DomainErrorMiddleware(raising(ERRORS["missing"])))

    assert [exc_info for _, _, exc_info in answered.calls] == [None]


def test_an_error_while_the_body_is_read_is_raised_and_the_body_closed() -> None:
    closed: list[bool] = []

    def body() -> Iterator[bytes]:
        try:
            yield b"part"
            raise NotFoundError(SECRET)
        finally:
            closed.append(True)

    def app(environ: dict[str, Any], start_response: Any) -> Any:
        start_response("200 OK", [])
        return body()

    with pytest.raises(NotFoundError):
        call(DomainErrorMiddleware(app))
    assert closed == [True]


def test_an_error_that_does_not_map_is_raised() -> None:
    with pytest.raises(RuntimeError):
        call(DomainErrorMiddleware(raising(lambda: RuntimeError(SECRET))))


def test_a_group_with_an_error_that_does_not_map_is_raised_whole() -> None:
    group = ExceptionGroup("publish", [NotFoundError(SECRET), KeyError("x")])

    with pytest.raises(ExceptionGroup):
        call(DomainErrorMiddleware(raising(lambda: group)))


def test_the_body_of_a_good_answer_passes_untouched() -> None:
    def app(environ: dict[str, Any], start_response: Any) -> Any:
        start_response("201 Created", [("X-Own", "1")])
        return [b"made"]

    answered = call(DomainErrorMiddleware(app))

    assert (answered.status, answered.body, answered.headers) == (
        "201 Created",
        b"made",
        {"x-own": "1"},
    )


@pytest.mark.parametrize(
    ("options", "error", "message"),
    [
        ({"retry_after": "1"}, TypeError, "retry_after must be a number of seconds"),
        ({"retry_after": -1}, ValueError, "retry_after must be 0 to 86400 seconds"),
        ({"www_authenticate": 3}, TypeError, "www_authenticate must be a string"),
        ({"www_authenticate": "a\nb"}, ValueError, "www_authenticate must be"),
    ],
)
def test_options_are_checked_as_the_asgi_middleware_checks_them(
    options: dict[str, Any], error: type[Exception], message: str
) -> None:
    app: Any = raising(ERRORS["missing"])

    with pytest.raises(error, match=message):
        DomainErrorMiddleware(app, **options)
    with pytest.raises(error, match=message):
        mediator_asgi.DomainErrorMiddleware(app, **options)


def test_an_app_that_is_not_callable_is_refused() -> None:
    with pytest.raises(TypeError, match="app must be a WSGI application, got int"):
        DomainErrorMiddleware(3)  # type: ignore[arg-type]


def test_the_order_is_recorded_in_the_environ_and_enforced() -> None:
    environ = environ_of()
    inner = DomainErrorMiddleware(raising(ERRORS["missing"]))

    call(RequestContextMiddleware(inner), environ)

    assert environ["resilience.middleware_stack"] == [
        "RequestContextMiddleware",
        "DomainErrorMiddleware",
    ]
    with pytest.raises(
        MiddlewareOrderError, match="DomainErrorMiddleware runs outside"
    ):
        call(DomainErrorMiddleware(RequestContextMiddleware(inner)))


def test_a_failure_keeps_its_traceback_for_the_server() -> None:
    def app(environ: dict[str, Any], start_response: Any) -> Any:
        start_response("200 OK", [])
        raise ConflictError(SECRET)

    answered = call(DomainErrorMiddleware(app))

    assert answered.calls[-1][2][2] is not None
    assert sys.exc_info() == (None, None, None)
