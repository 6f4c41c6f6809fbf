"""`RequestContextMiddleware`: the correlation id and the principal of a request."""

from __future__ import annotations

import functools
import uuid
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

import httpx
import pytest

from mediator import (
    NotFoundError,
    Principal,
    acting_as,
    current_correlation_id,
    current_principal,
)
from mediator.asgi import DomainErrorMiddleware, RequestContextMiddleware

pytestmark = pytest.mark.anyio

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]

HEADER = "X-Correlation-ID"
CLERK = Principal("u-1", roles=frozenset({"clerk"}))


class Seen:
    """An ASGI app that answers 200 and records the context it ran in."""

    def __init__(self, headers: list[tuple[bytes, bytes]] | None = None) -> None:
        self.ids: list[str | None] = []
        self.principals: list[Principal | None] = []
        self.headers = headers or []

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        self.ids.append(current_correlation_id())
        self.principals.append(current_principal())
        await send(
            {"type": "http.response.start", "status": 200, "headers": self.headers}
        )
        await send({"type": "http.response.body", "body": b"ok"})


async def get(app: App, headers: dict[str, str] | None = None) -> httpx.Response:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(
        transport=transport, base_url="http://shop.local"
    ) as client:
        return await client.get("/orders", headers=headers)


async def call_raw(app: App, headers: list[tuple[bytes, bytes]]) -> list[Message]:
    """Drive `app` with raw header bytes, which httpx would refuse to send."""
    sent: list[Message] = []

    async def receive() -> Message:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: Message) -> None:
        sent.append(message)

    scope: Scope = {"type": "http", "method": "GET", "path": "/", "headers": headers}
    await app(scope, receive, send)
    return sent


# --- the correlation id ------------------------------------------------------------


async def test_the_callers_id_is_used_and_echoed() -> None:
    app = Seen()
    response = await get(RequestContextMiddleware(app), {HEADER: "order-42"})
    assert app.ids == ["order-42"]
    assert response.headers[HEADER] == "order-42"


async def test_without_an_id_each_request_gets_a_new_one_echoed() -> None:
    app = Seen()
    middleware = RequestContextMiddleware(app)
    first, second = await get(middleware), await get(middleware)
    assert app.ids == [first.headers[HEADER], second.headers[HEADER]]
    assert first.headers[HEADER] != second.headers[HEADER]
    assert uuid.UUID(first.headers[HEADER]).version == 4


async def test_an_id_of_200_characters_is_taken() -> None:
    app = Seen()
    await get(RequestContextMiddleware(app), {HEADER: "a" * 200})
    assert app.ids == ["a" * 200]


async def test_outer_spaces_and_tabs_are_no_part_of_the_id() -> None:
    app = Seen()
    await call_raw(
        RequestContextMiddleware(app), [(b"x-correlation-id", b" \tid-7\t ")]
    )
    assert app.ids == ["id-7"]


@pytest.mark.parametrize(
    "bad",
    [
        b"",
        b"has space",
        b"a" * 201,
        b"caf\xc3\xa9",
        b"tab\there",
        b"\x00",
        b"line\r\nbreak",
        b"a,b",
        b"a, b",
    ],
    ids=[
        "empty",
        "space",
        "too-long",
        "non-ascii",
        "tab",
        "nul",
        "crlf",
        "comma",
        "comma-space",
    ],
)
async def test_an_invalid_id_is_replaced_by_a_new_one(bad: bytes) -> None:
    app = Seen()
    sent = await call_raw(RequestContextMiddleware(app), [(b"x-correlation-id", bad)])
    made = app.ids[0]
    assert made is not None
    assert uuid.UUID(made).version == 4
    assert (b"x-correlation-id", made.encode()) in sent[0]["headers"]


@pytest.mark.parametrize(
    "lines",
    [
        [(b"X-Correlation-ID", b"first"), (b"x-correlation-id", b"second")],
        [(b"x-correlation-id", b"same"), (b"x-correlation-id", b"same")],
        [(b"x-correlation-id", b"bad id"), (b"x-correlation-id", b"good")],
    ],
    ids=["different", "same", "first-malformed"],
)
async def test_an_id_sent_twice_is_refused_and_a_new_one_made(
    lines: list[tuple[bytes, bytes]],
) -> None:
    app = Seen()
    sent = await call_raw(RequestContextMiddleware(app), lines)
    made = app.ids[0]
    assert made is not None
    assert uuid.UUID(made).version == 4
    assert (b"x-correlation-id", made.encode()) in sent[0]["headers"]


# --- trust: whose id is taken ------------------------------------------------------


async def test_an_untrusted_callers_id_is_ignored_and_a_new_one_echoed() -> None:
    app, scopes = Seen(), list[Scope]()

    def trusted(scope: Scope) -> bool:
        scopes.append(scope)
        return False

    response = await get(
        RequestContextMiddleware(app, trusted=trusted), {HEADER: "order-42"}
    )
    made = app.ids[0]
    assert made is not None
    assert uuid.UUID(made).version == 4
    assert response.headers[HEADER] == made
    assert [scope["path"] for scope in scopes] == ["/orders"]


async def test_a_trusted_callers_id_is_taken_and_the_principal_read_either_way() -> (
    None
):
    app = Seen()
    middleware = RequestContextMiddleware(
        app,
        principal=from_header,
        trusted=lambda scope: scope["path"] == "/orders",
    )
    await get(middleware, {HEADER: "order-42", "X-User": "u-7"})
    assert (app.ids, app.principals) == (["order-42"], [Principal("u-7")])
    # Trust is about the context headers only: authentication is the reader's.
    untrusting = RequestContextMiddleware(
        app, principal=from_header, trusted=lambda scope: False
    )
    await get(untrusting, {HEADER: "order-42", "X-User": "u-7"})
    assert app.ids[1] != "order-42"
    assert app.principals[1] == Principal("u-7")


async def test_a_trust_verdict_that_is_no_bool_fails_the_request() -> None:
    truthy = RequestContextMiddleware(Seen(), trusted=lambda scope: 1)  # type: ignore[arg-type,return-value]
    with pytest.raises(
        TypeError, match=r"^trusted must return True or False, got int$"
    ):
        await get(truthy, {HEADER: "order-42"})

    async def check(scope: Scope) -> bool:
        return True  # pragma: no cover - never awaited

    hidden = RequestContextMiddleware(Seen(), trusted=lambda scope: check(scope))  # type: ignore[arg-type,return-value]
    with pytest.raises(
        TypeError, match=r"^trusted must return True or False, got coroutine$"
    ):
        await get(hidden, {HEADER: "order-42"})


async def async_check(scope: Scope) -> bool:
    return True  # pragma: no cover - refused before any call


class AsyncCheck:
    async def __call__(self, scope: Scope) -> bool:
        return True  # pragma: no cover - refused before any call


@pytest.mark.parametrize(
    ("trusted", "message"),
    [
        (
            True,
            r"^trusted must be a callable that takes the ASGI scope and returns "
            r"True or False, or None, got bool$",
        ),
        (
            async_check,
            r"^trusted must be a plain function, not async def: it decides from "
            r"the ASGI scope alone$",
        ),
        (AsyncCheck(), r"^trusted must be a plain function, not async def"),
        (functools.partial(async_check), r"^trusted must be a plain function"),
    ],
    ids=["not-callable", "async", "async-call", "async-partial"],
)
def test_a_trusted_that_is_no_plain_callable_is_refused(
    trusted: Any, message: str
) -> None:
    with pytest.raises(TypeError, match=message):
        RequestContextMiddleware(Seen(), trusted=trusted)


async def test_a_header_the_app_set_itself_is_left_alone() -> None:
    app = Seen(headers=[(b"X-Correlation-ID", b"the-apps-own")])
    response = await get(RequestContextMiddleware(app), {HEADER: "order-42"})
    assert response.headers.get_list(HEADER) == ["the-apps-own"]


async def test_the_header_may_be_named() -> None:
    app = Seen()
    response = await get(
        RequestContextMiddleware(app, correlation_header="X-Request-ID"),
        {"X-Request-ID": "req-1", HEADER: "ignored"},
    )
    assert app.ids == ["req-1"]
    assert response.headers["x-request-id"] == "req-1"


async def test_a_problem_answer_inside_carries_the_id_too() -> None:
    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        raise NotFoundError("gone")

    response = await get(
        RequestContextMiddleware(DomainErrorMiddleware(app)), {HEADER: "order-42"}
    )
    assert response.status_code == 404
    assert response.headers[HEADER] == "order-42"


# --- the principal -----------------------------------------------------------------


def from_header(scope: Scope) -> Principal | None:
    for name, value in scope["headers"]:
        if name == b"x-user":
            return Principal(value.decode())
    return None


async def from_header_async(scope: Scope) -> Principal | None:
    return from_header(scope)


class AsyncReader:
    async def __call__(self, scope: Scope) -> Principal | None:
        return from_header(scope)


async def read_with_prefix(prefix: str, scope: Scope) -> Principal | None:
    found = from_header(scope)
    return None if found is None else Principal(prefix + found.id)


def coroutine_from_a_plain_function(scope: Scope) -> Any:
    return from_header_async(scope)


@pytest.mark.parametrize(
    "reader",
    [
        from_header,
        from_header_async,
        AsyncReader(),
        functools.partial(read_with_prefix, ""),
        coroutine_from_a_plain_function,
    ],
    ids=["sync", "async", "async-call", "partial", "lambda-to-coroutine"],
)
async def test_the_principal_is_read_from_the_scope(reader: Any) -> None:
    app = Seen()
    middleware = RequestContextMiddleware(app, principal=reader)
    await get(middleware, {"X-User": "u-7"})
    await get(middleware)
    assert app.principals == [Principal("u-7"), None]


async def test_the_principal_reader_sees_the_requests_correlation_id() -> None:
    ids: list[str | None] = []

    def reader(scope: Scope) -> Principal:
        ids.append(current_correlation_id())
        return CLERK

    await get(RequestContextMiddleware(Seen(), principal=reader), {HEADER: "c-1"})
    assert ids == ["c-1"]


async def test_the_principal_is_left_in_the_scope() -> None:
    scopes: list[Scope] = []

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        scopes.append(scope)
        await Seen()(scope, receive, send)

    await get(RequestContextMiddleware(app, principal=lambda scope: CLERK))
    assert scopes[0]["mediator.principal"] == CLERK


async def test_an_anonymous_request_runs_without_a_principal_set_outside() -> None:
    app = Seen()
    with acting_as(CLERK):
        await get(RequestContextMiddleware(app, principal=lambda scope: None))
    assert app.principals == [None]


async def test_without_a_reader_the_principal_is_left_as_it_is() -> None:
    app = Seen()
    with acting_as(CLERK):
        await get(RequestContextMiddleware(app))
    assert app.principals == [CLERK]


def returns_str(scope: Scope) -> Any:
    return "u-1"


def returns_dict(scope: Scope) -> Any:
    return {"id": "u-1"}


@pytest.mark.parametrize(
    "reader",
    [returns_str, returns_dict],
    ids=["str", "dict"],
)
async def test_a_reader_that_returns_no_principal_is_a_type_error(
    reader: Any,
) -> None:
    with pytest.raises(
        TypeError, match=r"^the principal callable must return a Principal or None"
    ):
        await get(RequestContextMiddleware(Seen(), principal=reader))


async def test_an_async_reader_that_returns_no_principal_is_a_type_error() -> None:
    async def reader(scope: Scope) -> object:
        return {"id": "u-1"}

    with pytest.raises(TypeError, match=r"got dict$"):
        await get(RequestContextMiddleware(Seen(), principal=reader))  # type: ignore[arg-type]


# --- the context ends with the request ---------------------------------------------


async def test_the_context_is_reset_after_the_request() -> None:
    await get(
        RequestContextMiddleware(Seen(), principal=lambda scope: CLERK),
        {HEADER: "order-42"},
    )
    assert current_correlation_id() is None
    assert current_principal() is None


async def test_the_context_is_reset_when_the_app_raises() -> None:
    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        raise RuntimeError("bug")

    # Answered 500 here (tests/mediator/asgi/test_unhandled_errors.py).
    answered = await get(
        RequestContextMiddleware(app, principal=lambda scope: CLERK),
        {HEADER: "order-42"},
    )
    assert (answered.status_code, answered.headers[HEADER]) == (500, "order-42")
    assert current_correlation_id() is None
    assert current_principal() is None


@pytest.mark.parametrize("kind", ["websocket", "lifespan"])
async def test_other_scopes_pass_through_untouched(kind: str) -> None:
    seen: list[tuple[Scope, Receive, Send, str | None]] = []

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        seen.append((scope, receive, send, current_correlation_id()))

    async def receive() -> Message:
        raise AssertionError("not called")

    async def send(message: Message) -> None:
        raise AssertionError("not called")

    def reader(scope: Scope) -> Principal:
        raise AssertionError("not called")

    scope: Scope = {"type": kind}
    await RequestContextMiddleware(app, principal=reader)(scope, receive, send)
    assert seen == [(scope, receive, send, None)]
    # The lifespan carries the middleware order, checked when the server starts.
    recorded = {"resilience.middleware_stack": ["RequestContextMiddleware"]}
    assert scope == {"type": kind, **(recorded if kind == "lifespan" else {})}


# --- construction ------------------------------------------------------------------


def test_the_defaults() -> None:
    app = Seen()
    middleware = RequestContextMiddleware(app)
    assert middleware.app is app
    assert middleware.principal is None
    assert middleware.correlation_header == "X-Correlation-ID"
    assert middleware.trusted is None


def test_a_principal_that_is_not_callable_is_refused() -> None:
    with pytest.raises(
        TypeError,
        match=r"^principal must be a callable that takes the ASGI scope and returns "
        r"a Principal or None, got Principal$",
    ):
        RequestContextMiddleware(Seen(), principal=CLERK)  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", ["", "X Correlation", "X-Correlation:", "caf\u00e9"])
def test_a_header_that_is_no_header_name_is_refused(bad: str) -> None:
    with pytest.raises(
        ValueError, match=r"^correlation_header must be an HTTP header name, got "
    ):
        RequestContextMiddleware(Seen(), correlation_header=bad)


@pytest.mark.parametrize("bad", [None, b"X-Correlation-ID"])
def test_a_header_that_is_no_string_is_refused(bad: object) -> None:
    with pytest.raises(
        TypeError, match=r"^correlation_header must be an HTTP header name, got "
    ):
        RequestContextMiddleware(Seen(), correlation_header=bad)  # type: ignore[arg-type]


def test_an_app_that_is_not_callable_is_refused() -> None:
    with pytest.raises(TypeError, match=r"^app must be an ASGI application, got int$"):
        RequestContextMiddleware(42)  # type: ignore[arg-type]
