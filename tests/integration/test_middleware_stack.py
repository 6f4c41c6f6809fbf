"""The five web middlewares of both packages, together: one order, or no service.

Over a real uvicorn on 127.0.0.1, a FastAPI app whose ``add_middleware`` calls
are written outermost first (the easy slip: the last added is the outermost)
never starts (the stack is refused on the lifespan, which uvicorn logs), and
the same app written in reverse serves. In process, each wrong pair across
the two packages is refused with the same message by whichever middleware
finds it.
"""

from __future__ import annotations

import itertools
import logging
import threading
from collections.abc import AsyncGenerator, Awaitable, Callable, MutableMapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

import http_resilience._primitives.stack_order as http_stack
import mediator._primitives.stack_order as mediator_stack
from http_resilience import ResilienceContextMiddleware, ResilienceErrorMiddleware
from http_resilience.asgi import MiddlewareOrderError as HttpMiddlewareOrderError
from mediator import Principal
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
from tests.support.fault_server import serve_app

pytestmark = pytest.mark.anyio

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]

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
CANONICAL = (
    "RequestContextMiddleware",
    "ResilienceContextMiddleware",
    "IdempotencyKeyMiddleware",
    "DomainErrorMiddleware",
    "ResilienceErrorMiddleware",
)


def refused(outer: str, inner: str) -> str:
    return f"{outer} runs outside {inner}, but belongs inside it. {ORDER_AND_FIX}"


def user_of(scope: Scope) -> Principal | None:
    for name, value in scope["headers"]:
        if name == b"x-user":
            return Principal(value.decode())
    return None


# --- FastAPI over uvicorn ------------------------------------------------------------


class Shop:
    """A FastAPI orders app, its middlewares added in the order given."""

    def __init__(self, engine: AsyncEngine, added: list[str]) -> None:
        self.ready = threading.Event()
        self.placed: list[str] = []
        store = AsyncSqlAlchemyIdempotencyStore(engine)
        options: dict[str, dict[str, Any]] = {
            "RequestContextMiddleware": {"principal": user_of},
            "IdempotencyKeyMiddleware": {
                "store_factory": lambda: store,
                "required": ["/orders"],
            },
        }
        classes: dict[str, Any] = {
            "RequestContextMiddleware": RequestContextMiddleware,
            "ResilienceContextMiddleware": ResilienceContextMiddleware,
            "IdempotencyKeyMiddleware": IdempotencyKeyMiddleware,
            "DomainErrorMiddleware": DomainErrorMiddleware,
            "ResilienceErrorMiddleware": ResilienceErrorMiddleware,
        }

        @asynccontextmanager
        async def lifespan(app: FastAPI) -> AsyncGenerator[None]:
            self.ready.set()
            yield

        self.app = FastAPI(lifespan=lifespan)

        @self.app.post("/orders", status_code=201)
        async def place(sku: str) -> dict[str, int]:  # pyright: ignore[reportUnusedFunction]
            self.placed.append(sku)
            return {"order": len(self.placed)}

        for name in added:
            self.app.add_middleware(classes[name], **options.get(name, {}))

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        await self.app(scope, receive, send)


@pytest.fixture
async def engine(tmp_path: Path) -> AsyncGenerator[AsyncEngine]:
    engine = create_async_engine(f"sqlite+aiosqlite:///{tmp_path}/keys.db")
    await acreate_idempotency_table(engine)
    yield engine
    await engine.dispose()


async def place(url: str, key: str) -> httpx.Response:
    async with httpx.AsyncClient(base_url=url) as client:
        return await client.post(
            "/orders",
            params={"sku": "A-1"},
            headers={"Idempotency-Key": key, "X-User": "u-1"},
        )


async def test_add_middleware_written_outermost_first_never_starts(
    engine: AsyncEngine, caplog: pytest.LogCaptureFixture
) -> None:
    # Written in the order of the docs' list: FastAPI makes the last added,
    # the request context, the innermost. The stack is refused on the
    # lifespan, when the server starts: it never serves a request.
    shop = Shop(engine, list(CANONICAL))
    with (
        caplog.at_level(logging.ERROR, logger="uvicorn.error"),
        pytest.raises(RuntimeError, match="misordered shop: uvicorn did not start"),
        serve_app(shop, shop.ready, name="misordered shop"),
    ):
        pass  # pragma: no cover - the server does not start
    assert shop.placed == []
    logged = [record.getMessage() for record in caplog.records]
    # The outermost of those that belong inside it is named, with the fix.
    assert refused("ResilienceErrorMiddleware", "IdempotencyKeyMiddleware") in logged


async def test_add_middleware_written_innermost_first_serves(
    engine: AsyncEngine,
) -> None:
    shop = Shop(engine, list(reversed(CANONICAL)))
    with serve_app(shop, shop.ready, name="ordered shop") as url:
        first = await place(url, "k-1")
        again = await place(url, "k-1")
    assert (first.status_code, first.json()) == (201, {"order": 1})
    assert first.headers["x-correlation-id"]
    assert (again.status_code, again.json()) == (201, {"order": 1})
    assert again.headers["idempotent-replayed"] == "true"
    assert shop.placed == ["A-1"]


# --- every wrong pair across the packages, in process -------------------------------


class Orders:
    def __init__(self) -> None:
        self.runs = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        self.runs += 1
        await send({"type": "http.response.start", "status": 201, "headers": []})
        await send({"type": "http.response.body", "body": b"placed"})


WRAPPERS: dict[str, Callable[[App], App]] = {
    "RequestContextMiddleware": lambda app: RequestContextMiddleware(
        app, principal=user_of
    ),
    "ResilienceContextMiddleware": ResilienceContextMiddleware,
    "IdempotencyKeyMiddleware": IdempotencyKeyMiddleware,
    "DomainErrorMiddleware": DomainErrorMiddleware,
    "ResilienceErrorMiddleware": ResilienceErrorMiddleware,
}
MEDIATOR = {
    "RequestContextMiddleware",
    "IdempotencyKeyMiddleware",
    "DomainErrorMiddleware",
}
WRONG = [
    (outer, inner)
    for inner, outer in itertools.combinations(CANONICAL, 2)
    if {outer, inner} != {"DomainErrorMiddleware", "ResilienceErrorMiddleware"}
]


async def post(app: App) -> httpx.Response:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://shop") as client:
        return await client.post(
            "/orders", headers={"Idempotency-Key": "k-1", "X-User": "u-1"}
        )


def test_every_wrong_pair_is_listed() -> None:
    assert len(WRONG) == 9
    assert ("IdempotencyKeyMiddleware", "RequestContextMiddleware") in WRONG
    assert ("ResilienceContextMiddleware", "RequestContextMiddleware") in WRONG
    assert ("ResilienceErrorMiddleware", "IdempotencyKeyMiddleware") in WRONG


@pytest.mark.parametrize(("outer", "inner"), WRONG)
async def test_a_wrong_pair_is_refused_by_the_inner_one(outer: str, inner: str) -> None:
    app = Orders()
    stack = WRAPPERS[outer](WRAPPERS[inner](app))
    # The inner middleware finds the outer one, and raises its own package's error.
    error = MiddlewareOrderError if inner in MEDIATOR else HttpMiddlewareOrderError
    for _ in range(2):
        with pytest.raises(error) as raised:
            await post(stack)
        assert str(raised.value) == refused(outer, inner)
    assert app.runs == 0


@pytest.mark.parametrize(
    "names",
    [
        CANONICAL,
        (*CANONICAL[:3], "ResilienceErrorMiddleware", "DomainErrorMiddleware"),
        ("RequestContextMiddleware", "ResilienceErrorMiddleware"),
        ("ResilienceContextMiddleware", "IdempotencyKeyMiddleware"),
        ("ResilienceContextMiddleware", "DomainErrorMiddleware"),
    ],
    ids=["all five", "mappers swapped", "ctx-error", "rctx-key", "rctx-domain"],
)
async def test_a_stack_in_order_serves(names: tuple[str, ...]) -> None:
    app = Orders()
    stack: App = app
    for name in reversed(names):
        stack = WRAPPERS[name](stack)
    assert (await post(stack)).status_code == 201
    assert app.runs == 1


# --- the two copies of the convention -----------------------------------------------


def test_both_packages_hold_the_same_table_and_message() -> None:
    # Copies of tools/primitives/stack_order.py (tests/tools checks they are
    # current): the same key, the same order, the same message.
    assert mediator_stack.STACK_SCOPE_KEY == http_stack.STACK_SCOPE_KEY
    assert mediator_stack.STACK_SCOPE_KEY == "resilience.middleware_stack"
    assert mediator_stack.CANONICAL_ORDER == http_stack.CANONICAL_ORDER == CANONICAL
    for outer, inner in itertools.permutations(CANONICAL, 2):
        message = mediator_stack.order_message(outer, inner)
        assert message == http_stack.order_message(outer, inner)
        assert message == refused(outer, inner)
