"""`DomainErrorMiddleware`: domain errors answered as problem+json, the rest raised."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

import httpx
import pytest

from mediator import (
    BusinessRuleError,
    Command,
    CommandHandler,
    ConflictError,
    DomainError,
    FieldError,
    ForbiddenError,
    HandlerNotFoundError,
    NotFoundError,
    Notification,
    NotificationHandler,
    Principal,
    TransientDatabaseError,
    ValidationError,
    Validator,
    acting_as,
)
from mediator.asgi import DomainErrorMiddleware, RequestContextMiddleware
from tests.mediator._support.support import build

pytestmark = pytest.mark.anyio

SECRET = "s3cr3t-Pa55word-do-not-leak"
Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]

DETAILS = {
    401: "This request needs an authenticated caller.",
    403: "The caller is not allowed to make this request.",
    404: "Something this request names does not exist.",
    409: "This request conflicts with the current state of the data.",
    503: "The service is busy. Try again later.",
}
TITLES = {
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not Found",
    409: "Conflict",
    422: "Unprocessable Content",
    503: "Service Unavailable",
}
INVALID = "The request has invalid fields: see errors."
RULE = "The request breaks a business rule."


def raising(error: BaseException) -> App:
    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        raise error

    return app


async def get(app: App, path: str = "/orders/42") -> httpx.Response:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(
        transport=transport, base_url="http://shop.local"
    ) as client:
        return await client.post(path, json={"card": SECRET})


async def answer(error: BaseException, **options: Any) -> httpx.Response:
    return await get(DomainErrorMiddleware(raising(error), **options))


# --- the mapping -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("error", "status"),
    [
        (NotFoundError(f"no order 42 of {SECRET}"), 404),
        (ConflictError(f"duplicate key {SECRET}"), 409),
        (TransientDatabaseError(f"deadlock on {SECRET}"), 503),
    ],
    ids=["not-found", "conflict", "transient"],
)
async def test_each_error_has_its_status_and_a_fixed_detail(
    error: Exception, status: int
) -> None:
    response = await answer(error)
    assert response.status_code == status
    assert response.headers["content-type"] == "application/problem+json"
    assert response.json() == {
        "type": "about:blank",
        "title": TITLES[status],
        "status": status,
        "detail": DETAILS[status],
    }
    assert int(response.headers["content-length"]) == len(response.content)


async def test_a_business_rule_is_422_without_field_errors() -> None:
    response = await answer(BusinessRuleError(f"stock of {SECRET} is 0"))
    assert response.status_code == 422
    assert response.json() == {
        "type": "about:blank",
        "title": "Unprocessable Content",
        "status": 422,
        "detail": RULE,
    }


async def test_a_validation_error_is_422_with_every_field_error() -> None:
    error = ValidationError(
        f"PlaceOrder is invalid, card {SECRET}",
        [
            FieldError(("lines", 0, "sku"), "String should have at least 3 characters"),
            FieldError(("quantity",), "Input should be greater than 0"),
            FieldError((), "Value error, ship_by is before order_date"),
        ],
    )
    response = await answer(error)
    assert response.status_code == 422
    assert response.json() == {
        "type": "about:blank",
        "title": "Unprocessable Content",
        "status": 422,
        "detail": INVALID,
        "errors": [
            {
                "field": "lines.0.sku",
                "message": "String should have at least 3 characters",
            },
            {"field": "quantity", "message": "Input should be greater than 0"},
            {"field": None, "message": "Value error, ship_by is before order_date"},
        ],
    }


async def test_a_subclass_of_a_mapped_error_maps_as_its_base() -> None:
    class OrderNotFound(NotFoundError):
        pass

    assert (await answer(OrderNotFound("order 42"))).status_code == 404


async def test_a_transient_error_asks_to_retry_after_one_second_by_default() -> None:
    response = await answer(TransientDatabaseError("serialization failure"))
    assert response.headers["retry-after"] == "1"


@pytest.mark.parametrize(("given", "sent"), [(2.5, "3"), (0, "0"), (30, "30")])
async def test_retry_after_is_sent_in_whole_seconds_rounded_up(
    given: float, sent: str
) -> None:
    response = await answer(TransientDatabaseError("locked"), retry_after=given)
    assert response.headers["retry-after"] == sent


async def test_only_a_503_carries_retry_after() -> None:
    response = await answer(ConflictError("taken"))
    assert "retry-after" not in response.headers


# --- 401 or 403 --------------------------------------------------------------------


async def test_forbidden_without_any_principal_is_401() -> None:
    response = await answer(ForbiddenError("no principal"))
    assert response.status_code == 401
    assert response.json()["detail"] == DETAILS[401]
    assert "www-authenticate" not in response.headers


async def test_a_401_carries_the_challenge_when_one_is_given() -> None:
    response = await answer(
        ForbiddenError("no principal"), www_authenticate='Bearer realm="shop"'
    )
    assert response.status_code == 401
    assert response.headers["www-authenticate"] == 'Bearer realm="shop"'


async def test_forbidden_with_a_principal_set_outside_is_403() -> None:
    with acting_as(Principal("u-1")):
        response = await answer(
            ForbiddenError(f"u-1 lacks admin for {SECRET}"),
            www_authenticate="Bearer",
        )
    assert response.status_code == 403
    assert response.json()["detail"] == DETAILS[403]
    assert "www-authenticate" not in response.headers


@pytest.mark.parametrize(
    ("principal", "status"),
    [(Principal("u-1"), 403), (None, 401)],
    ids=["principal", "anonymous"],
)
async def test_the_context_middleware_inside_still_tells_401_from_403(
    principal: Principal | None, status: int
) -> None:
    # A mounted sub-app sets the principal with a context middleware of its
    # own, inside the outer stack's error middleware, and resets it before the
    # error reaches that one: the scope says who it was.
    mounted = RequestContextMiddleware(
        raising(ForbiddenError("denied")), principal=lambda scope: principal
    )
    app = RequestContextMiddleware(DomainErrorMiddleware(mounted))
    assert (await get(app)).status_code == status


@pytest.mark.parametrize(
    ("principal", "status"),
    [(Principal("u-1"), 403), (None, 401)],
    ids=["principal", "anonymous"],
)
async def test_the_context_middleware_outside_tells_401_from_403(
    principal: Principal | None, status: int
) -> None:
    app = RequestContextMiddleware(
        DomainErrorMiddleware(raising(ForbiddenError("denied"))),
        principal=lambda scope: principal,
    )
    response = await get(app)
    assert response.status_code == status
    assert response.headers["x-correlation-id"]


# --- nothing internal in a body ----------------------------------------------------


@pytest.mark.parametrize(
    "error",
    [
        NotFoundError(SECRET),
        ConflictError(SECRET),
        BusinessRuleError(SECRET),
        ForbiddenError(SECRET),
        TransientDatabaseError(SECRET),
        ValidationError(SECRET, [FieldError(("card",), "Field required")]),
        ExceptionGroup(SECRET, [NotFoundError(SECRET), ConflictError(SECRET)]),
    ],
    ids=lambda error: type(error).__name__,
)
async def test_a_secret_in_an_errors_message_never_reaches_the_answer(
    error: Exception,
) -> None:
    error.__cause__ = RuntimeError(f"driver said {SECRET}")
    error.add_note(SECRET)
    response = await answer(error)
    assert SECRET not in response.text
    assert all(SECRET not in value for value in response.headers.values())


class PlaceOrder(Command[None]):
    card: str
    quantity: int


class CardIsKnown(Validator[PlaceOrder]):
    def validate(self, request: PlaceOrder) -> list[FieldError]:
        return [FieldError(("card",), "This card is not accepted")]


class PlaceOrderHandler(CommandHandler[PlaceOrder, None]):
    async def handle(self, request: PlaceOrder) -> None:
        raise AssertionError("validation must stop the request first")


async def test_a_secret_in_an_input_value_never_reaches_the_answer() -> None:
    mediator = build(
        lambda m: (
            m.add_handler(PlaceOrderHandler).add_validator(CardIsKnown).use_defaults()
        )
    )

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        # Built without validation, as from a trusted source, so the
        # mediator's ValidationBehavior finds the bad values.
        unchecked: dict[str, Any] = {"card": SECRET, "quantity": SECRET}
        await mediator.send(PlaceOrder.model_construct(**unchecked))

    response = await get(DomainErrorMiddleware(app))
    assert response.status_code == 422
    assert response.json()["errors"] == [
        {
            "field": "quantity",
            "message": "Input should be a valid integer, unable to parse string "
            "as an integer",
        },
        {"field": "card", "message": "This card is not accepted"},
    ]
    assert SECRET not in response.text


# --- exception groups --------------------------------------------------------------


async def test_a_group_is_answered_with_its_most_conservative_member() -> None:
    group = ExceptionGroup(
        "handlers failed",
        [
            TransientDatabaseError("locked"),
            BusinessRuleError("rule"),
            ExceptionGroup("nested", [NotFoundError("gone"), ConflictError("taken")]),
        ],
    )
    response = await answer(group)
    assert response.status_code == 404
    assert "retry-after" not in response.headers


async def test_a_group_of_transient_errors_is_503_with_retry_after() -> None:
    group = ExceptionGroup(
        "handlers failed", [TransientDatabaseError("a"), TransientDatabaseError("b")]
    )
    response = await answer(group)
    assert response.status_code == 503
    assert response.headers["retry-after"] == "1"


async def test_a_group_with_field_errors_lists_all_of_them_before_rules() -> None:
    group = ExceptionGroup(
        "handlers failed",
        [
            BusinessRuleError("rule"),
            ValidationError("one", [FieldError(("a",), "bad a")]),
            ExceptionGroup(
                "nested", [ValidationError("two", [FieldError(("b",), "bad b")])]
            ),
        ],
    )
    response = await answer(group)
    assert response.status_code == 422
    assert response.json()["detail"] == INVALID
    assert response.json()["errors"] == [
        {"field": "a", "message": "bad a"},
        {"field": "b", "message": "bad b"},
    ]


async def test_in_a_group_401_comes_first() -> None:
    group = ExceptionGroup("failed", [NotFoundError("x"), ForbiddenError("y")])
    assert (await answer(group)).status_code == 401


async def test_a_group_with_an_unmapped_member_is_raised_whole() -> None:
    group = ExceptionGroup("failed", [NotFoundError("x"), RuntimeError("bug")])
    with pytest.raises(ExceptionGroup) as raised:
        await answer(group)
    assert raised.value is group


class OrderPlaced(Notification):
    order: str


class Reserve(NotificationHandler[OrderPlaced]):
    async def handle(self, notification: OrderPlaced) -> None:
        raise NotFoundError(f"no stock item for {notification.order}")


class Bill(NotificationHandler[OrderPlaced]):
    async def handle(self, notification: OrderPlaced) -> None:
        raise ConflictError(f"already billed {notification.order}")


async def test_a_failed_publish_is_answered() -> None:
    mediator = build(lambda m: m.add_handler(Reserve, Bill))

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        await mediator.publish(OrderPlaced(order=SECRET))

    response = await get(DomainErrorMiddleware(app))
    assert response.status_code == 404
    assert SECRET not in response.text


# --- what is raised on -------------------------------------------------------------


@pytest.mark.parametrize(
    "error",
    [
        RuntimeError("bug"),
        HandlerNotFoundError("no handler for PlaceOrder"),
        DomainError("a domain error of no known kind"),
    ],
    ids=["bug", "configuration", "bare-domain-error"],
)
async def test_an_error_that_does_not_map_is_raised(error: Exception) -> None:
    with pytest.raises(type(error)) as raised:
        await answer(error)
    assert raised.value is error


async def test_an_error_after_the_response_started_is_raised() -> None:
    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        raise NotFoundError("too late")

    with pytest.raises(NotFoundError, match="too late"):
        await get(DomainErrorMiddleware(app))


async def test_a_successful_answer_passes_through() -> None:
    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        await send(
            {"type": "http.response.start", "status": 201, "headers": [(b"a", b"b")]}
        )
        await send({"type": "http.response.body", "body": b"made"})

    response = await get(DomainErrorMiddleware(app))
    assert (response.status_code, response.text) == (201, "made")
    assert response.headers["a"] == "b"


@pytest.mark.parametrize("kind", ["websocket", "lifespan"])
async def test_other_scopes_pass_through_untouched(kind: str) -> None:
    seen: list[tuple[Scope, Receive, Send]] = []

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        seen.append((scope, receive, send))
        raise NotFoundError("not answered here")

    async def receive() -> Message:
        raise AssertionError("not called")

    async def send(message: Message) -> None:
        raise AssertionError("not called")

    scope: Scope = {"type": kind}
    with pytest.raises(NotFoundError):
        await DomainErrorMiddleware(app)(scope, receive, send)
    assert seen == [(scope, receive, send)]


# --- construction ------------------------------------------------------------------


async def noop(scope: Scope, receive: Receive, send: Send) -> None:
    return None


def test_the_defaults() -> None:
    middleware = DomainErrorMiddleware(noop)
    assert middleware.app is noop
    assert middleware.retry_after == 1.0
    assert middleware.www_authenticate is None


def test_an_app_that_is_not_callable_is_refused() -> None:
    with pytest.raises(TypeError, match=r"^app must be an ASGI application, got str$"):
        DomainErrorMiddleware("app")  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", [-1, float("nan"), float("inf"), 86_401])
def test_a_retry_after_out_of_range_is_refused(bad: float) -> None:
    with pytest.raises(
        ValueError, match=r"^retry_after must be 0 to 86400 seconds, got "
    ):
        DomainErrorMiddleware(noop, retry_after=bad)


@pytest.mark.parametrize("bad", ["1", True, None])
def test_a_retry_after_that_is_no_number_is_refused(bad: object) -> None:
    with pytest.raises(TypeError, match=r"^retry_after must be a number of seconds"):
        DomainErrorMiddleware(noop, retry_after=bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", ["", "Bearer\r\nSet-Cookie: a=b", "Bearer caf\u00e9"])
def test_a_challenge_that_is_no_header_value_is_refused(bad: str) -> None:
    with pytest.raises(
        ValueError,
        match=r"^www_authenticate must be a non-empty header value of visible ASCII",
    ):
        DomainErrorMiddleware(noop, www_authenticate=bad)


def test_a_challenge_that_is_no_string_is_refused() -> None:
    with pytest.raises(
        TypeError, match=r"^www_authenticate must be a string or None, got bytes$"
    ):
        DomainErrorMiddleware(noop, www_authenticate=b"Bearer")  # type: ignore[arg-type]
