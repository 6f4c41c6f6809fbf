"""The web middlewares refuse to serve in any order but the one they take."""

from __future__ import annotations

import pathlib
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

import httpx
import pytest
import sqlalchemy
from sqlalchemy.ext.asyncio import create_async_engine
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.routing import Mount

from mediator import ConfigurationError, Principal
from mediator.asgi import (
    DomainErrorMiddleware,
    IdempotencyKeyMiddleware,
    MiddlewareOrderError,
    RequestContextMiddleware,
)
from mediator.sqlalchemy import (
    AsyncSqlAlchemyIdempotencyStore,
    acreate_idempotency_table,
)

pytestmark = pytest.mark.anyio

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]

# The convention both packages share: the scope key, and these names.
STACK_KEY = "resilience.middleware_stack"
ORDER_AND_FIX = (
    "The web middlewares go in this order, outermost first: "
    "RequestContextMiddleware, ResilienceContextMiddleware, "
    "IdempotencyKeyMiddleware, then DomainErrorMiddleware and "
    "ResilienceErrorMiddleware (these two in either order); leave out those you "
    "do not use. Starlette's and FastAPI's add_middleware make the middleware "
    "added last the outermost, so add them innermost first: "
    "app.add_middleware(ResilienceErrorMiddleware), "
    "app.add_middleware(DomainErrorMiddleware), "
    "app.add_middleware(IdempotencyKeyMiddleware), "
    "app.add_middleware(ResilienceContextMiddleware), "
    "app.add_middleware(RequestContextMiddleware), each with its options."
)


def refused(outer: str, inner: str) -> str:
    return f"{outer} runs outside {inner}, but belongs inside it. {ORDER_AND_FIX}"


class Orders:
    """The app: counts its runs and keeps the stack it was reached through."""

    def __init__(self) -> None:
        self.runs = 0
        self.stacks: list[list[str]] = []

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        self.runs += 1
        self.stacks.append(list(scope[STACK_KEY]))
        await send({"type": "http.response.start", "status": 201, "headers": []})
        await send({"type": "http.response.body", "body": b"placed"})


def recorded_as(name: str, app: App) -> App:
    """A stand-in for a middleware of another package: it only records `name`."""

    async def middleware(scope: Scope, receive: Receive, send: Send) -> None:
        scope.setdefault(STACK_KEY, []).append(name)
        await app(scope, receive, send)

    return middleware


async def post(app: App, headers: dict[str, str] | None = None) -> httpx.Response:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://shop") as client:
        return await client.post(
            "/orders",
            json={"sku": "A-1"},
            headers={"Idempotency-Key": "k-1"} | (headers or {}),
        )


def clerk(scope: Scope) -> Principal | None:
    for name, value in scope["headers"]:
        if name == b"x-user":
            return Principal(value.decode())
    return None


# --- the wrong pairs --------------------------------------------------------------

WRAPPERS: dict[str, Callable[[App], App]] = {
    "RequestContextMiddleware": lambda app: RequestContextMiddleware(
        app, principal=clerk
    ),
    "IdempotencyKeyMiddleware": lambda app: IdempotencyKeyMiddleware(
        app, required=["/orders"]
    ),
    "DomainErrorMiddleware": DomainErrorMiddleware,
}


@pytest.mark.parametrize(
    ("outer", "inner"),
    [
        # Every caller would share one idempotency scope: no principal yet.
        ("IdempotencyKeyMiddleware", "RequestContextMiddleware"),
        # A domain error's answer would not be kept for the key's replays.
        ("DomainErrorMiddleware", "IdempotencyKeyMiddleware"),
        # Its answers would not carry the correlation id back.
        ("DomainErrorMiddleware", "RequestContextMiddleware"),
    ],
)
async def test_a_wrong_pair_refuses_every_request_and_the_app_never_runs(
    outer: str, inner: str
) -> None:
    app = Orders()
    stack = WRAPPERS[outer](WRAPPERS[inner](app))
    for _ in range(2):
        with pytest.raises(MiddlewareOrderError) as raised:
            await post(stack, {"X-User": "u-1"})
        assert str(raised.value) == refused(outer, inner)
    assert app.runs == 0


async def test_the_error_is_a_configuration_error() -> None:
    assert issubclass(MiddlewareOrderError, ConfigurationError)


async def test_the_whole_mediator_stack_in_order_serves() -> None:
    app = Orders()
    stack = RequestContextMiddleware(
        IdempotencyKeyMiddleware(DomainErrorMiddleware(app), required=["/orders"]),
        principal=clerk,
    )
    for _ in range(2):
        assert (await post(stack, {"X-User": "u-1"})).status_code == 201
    assert (
        app.stacks
        == [
            [
                "RequestContextMiddleware",
                "IdempotencyKeyMiddleware",
                "DomainErrorMiddleware",
            ]
        ]
        * 2
    )


@pytest.mark.parametrize(
    ("outer", "inner"),
    [
        ("RequestContextMiddleware", "IdempotencyKeyMiddleware"),
        ("RequestContextMiddleware", "DomainErrorMiddleware"),
        ("IdempotencyKeyMiddleware", "DomainErrorMiddleware"),
    ],
)
async def test_any_two_in_order_serve(outer: str, inner: str) -> None:
    app = Orders()
    stack = WRAPPERS[outer](WRAPPERS[inner](app))
    assert (await post(stack)).status_code == 201
    assert app.stacks == [[outer, inner]]


# --- the other package's middlewares, by the shared convention --------------------


@pytest.mark.parametrize(
    ("outer", "inner"),
    [
        ("ResilienceContextMiddleware", "RequestContextMiddleware"),
        ("ResilienceErrorMiddleware", "RequestContextMiddleware"),
        ("ResilienceErrorMiddleware", "IdempotencyKeyMiddleware"),
        ("ResilienceErrorMiddleware", "DomainErrorMiddleware"),
    ],
)
async def test_http_resilience_names_in_the_scope_are_ranked_too(
    outer: str, inner: str
) -> None:
    app = Orders()
    stack = recorded_as(outer, WRAPPERS[inner](app))
    if inner == "DomainErrorMiddleware":
        # The two error mappers answer different errors: either may be outer.
        assert (await post(stack)).status_code == 201
        assert app.stacks == [[outer, inner]]
        return
    with pytest.raises(MiddlewareOrderError) as raised:
        await post(stack)
    assert str(raised.value) == refused(outer, inner)
    assert app.runs == 0


async def test_http_resilience_names_in_their_place_serve() -> None:
    app = Orders()
    stack = RequestContextMiddleware(
        recorded_as(
            "ResilienceContextMiddleware",
            IdempotencyKeyMiddleware(
                DomainErrorMiddleware(recorded_as("ResilienceErrorMiddleware", app))
            ),
        )
    )
    assert (await post(stack)).status_code == 201
    assert app.stacks == [
        [
            "RequestContextMiddleware",
            "ResilienceContextMiddleware",
            "IdempotencyKeyMiddleware",
            "DomainErrorMiddleware",
            "ResilienceErrorMiddleware",
        ]
    ]


async def test_names_of_no_known_middleware_are_passed_over() -> None:
    app = Orders()
    stack = recorded_as("TimingMiddleware", RequestContextMiddleware(app))
    assert (await post(stack)).status_code == 201
    assert app.stacks == [["TimingMiddleware", "RequestContextMiddleware"]]


# --- a mounted sub-app with its own middlewares -------------------------------------


def mounted(sub_middleware: list[Middleware], app: Orders) -> Starlette:
    sub = Starlette(routes=[Mount("/", app=app)], middleware=sub_middleware)
    return Starlette(
        routes=[Mount("/shop", app=sub)],
        middleware=[
            Middleware(RequestContextMiddleware),
            Middleware(IdempotencyKeyMiddleware),
            Middleware(DomainErrorMiddleware),
        ],
    )


async def post_to_shop(app: Starlette) -> httpx.Response:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://shop") as client:
        return await client.post("/shop/orders", headers={"Idempotency-Key": "k-1"})


async def test_a_mounted_app_may_run_the_same_middlewares_again_in_order() -> None:
    app = Orders()
    shop = mounted(
        [
            Middleware(RequestContextMiddleware, principal=clerk),
            Middleware(DomainErrorMiddleware),
        ],
        app,
    )
    assert (await post_to_shop(shop)).status_code == 201
    assert app.stacks == [
        [
            "RequestContextMiddleware",
            "IdempotencyKeyMiddleware",
            "DomainErrorMiddleware",
            "RequestContextMiddleware",
            "DomainErrorMiddleware",
        ]
    ]


async def test_a_mounted_app_in_the_wrong_order_is_refused() -> None:
    app = Orders()
    # Starlette's list is outermost first: the mounted key runs outside the
    # mounted context.
    shop = mounted(
        [
            Middleware(IdempotencyKeyMiddleware),
            Middleware(RequestContextMiddleware, principal=clerk),
        ],
        app,
    )
    with pytest.raises(MiddlewareOrderError) as raised:
        await post_to_shop(shop)
    assert str(raised.value) == refused(
        "IdempotencyKeyMiddleware", "RequestContextMiddleware"
    )
    assert app.runs == 0


# --- other scopes ---------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["websocket", "other"])
async def test_other_scopes_are_not_recorded(kind: str) -> None:
    seen: list[Scope] = []

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        seen.append(dict(scope))

    async def never(*args: Any) -> Any:
        raise AssertionError("not called")

    scope: Scope = {"type": kind, STACK_KEY: ["DomainErrorMiddleware"]}
    # In the wrong order, and yet passed through: only http requests are checked.
    await IdempotencyKeyMiddleware(RequestContextMiddleware(app))(scope, never, never)
    assert seen == [{"type": kind, STACK_KEY: ["DomainErrorMiddleware"]}]


# --- on a real store: nothing is kept under a scope no caller owns -----------------


async def test_a_key_outside_the_context_keeps_nothing_on_sqlite(
    tmp_path: pathlib.Path,
) -> None:
    engine = create_async_engine(f"sqlite+aiosqlite:///{tmp_path}/keys.db")
    await acreate_idempotency_table(engine)
    app = Orders()

    def store() -> AsyncSqlAlchemyIdempotencyStore:
        return AsyncSqlAlchemyIdempotencyStore(engine)

    wrong = IdempotencyKeyMiddleware(
        RequestContextMiddleware(DomainErrorMiddleware(app), principal=clerk),
        store_factory=store,
    )
    right = RequestContextMiddleware(
        IdempotencyKeyMiddleware(DomainErrorMiddleware(app), store_factory=store),
        principal=clerk,
    )
    try:
        transport = httpx.ASGITransport(app=wrong)
        async with httpx.AsyncClient(
            transport=transport, base_url="http://shop"
        ) as client:
            # A request the key does not stop reaches the context: refused.
            with pytest.raises(MiddlewareOrderError):
                await client.get("/orders/1", headers={"X-User": "u-1"})
        for user in ("u-1", "u-2"):
            # A keyed one finds no principal yet: refused as anonymous (401)
            # or, where anonymous keys are taken, by the context middleware.
            try:
                answer = await post(wrong, {"X-User": user})
            except MiddlewareOrderError:
                continue
            assert answer.status_code == 401
        async with engine.connect() as connection:
            left = await connection.execute(
                sqlalchemy.text("SELECT count(*) FROM mediator_idempotency")
            )
            assert left.scalar_one() == 0
        assert (await post(right, {"X-User": "u-1"})).status_code == 201
    finally:
        await engine.dispose()
    assert app.runs == 1


async def test_a_misordered_stack_fails_the_servers_startup() -> None:
    calls: list[Scope] = []

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        calls.append(scope)

    sent: list[Message] = []

    async def receive() -> Message:
        return {"type": "lifespan.startup"}

    async def send(message: Message) -> None:
        sent.append(message)

    # The outer one belongs inside the inner one: refused on the lifespan,
    # before the server takes a request, and the app is not called.
    await IdempotencyKeyMiddleware(RequestContextMiddleware(app))(
        {"type": "lifespan"}, receive, send
    )
    assert calls == []
    assert [message["type"] for message in sent] == ["lifespan.startup.failed"]
    assert "belongs inside it" in sent[0]["message"]


async def test_an_ordered_stack_passes_the_lifespan_through() -> None:
    calls: list[Scope] = []

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        calls.append(scope)

    async def never(*args: Any) -> Any:
        raise AssertionError("not called")

    scope: Scope = {"type": "lifespan"}
    await RequestContextMiddleware(DomainErrorMiddleware(app))(scope, never, never)
    # Recorded, and passed on: the app runs the lifespan itself.
    assert calls == [scope]
