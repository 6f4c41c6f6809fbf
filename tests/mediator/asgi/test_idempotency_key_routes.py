"""`IdempotencyKeyMiddleware` lets a Starlette or FastAPI app answer its 404 and 405.

A POST to a path no route takes gets the app's 404 (or its 405, when a route
takes the path with other methods), never the middleware's 400 for a missing
key, and no key of it reaches the store. Any other app keeps the key check.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Mount, Route

from mediator import Principal
from mediator._asgi.routing import router_inside, routes_request
from mediator.asgi import IdempotencyKeyMiddleware, RequestContextMiddleware
from tests.mediator.asgi.test_idempotency_key import FakeStore

pytestmark = pytest.mark.anyio

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

KEY = {"Idempotency-Key": "order-7"}


class Counted:
    """A store factory that notes each call: a keyed request it checked."""

    def __init__(self) -> None:
        self.store = FakeStore()
        self.calls = 0

    def __call__(self) -> FakeStore:
        self.calls += 1
        return self.store


def fastapi_shop(counted: Counted | None = None) -> FastAPI:
    app = FastAPI()

    @app.post("/orders", status_code=201)
    async def place() -> dict[str, str]:  # pyright: ignore[reportUnusedFunction]
        return {"placed": "yes"}

    @app.get("/orders/{order_id}")
    async def read(order_id: str) -> dict[str, str]:  # pyright: ignore[reportUnusedFunction]
        return {"order": order_id}

    async def refund(request: Request) -> PlainTextResponse:
        return PlainTextResponse("refunded", status_code=201)

    app.router.routes.append(
        Mount("/v2", routes=[Route("/refunds", refund, methods=["POST"])])
    )
    app.add_middleware(
        IdempotencyKeyMiddleware,
        required=["/"],
        store_factory=counted,
        anonymous=["/"],
    )
    app.add_middleware(
        RequestContextMiddleware, principal=lambda scope: Principal("u-1")
    )
    return app


async def post(app: Any, path: str, headers: dict[str, str] | None = None) -> Any:
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://shop.local"
    ) as client:
        return await client.post(path, headers=headers)


@pytest.mark.parametrize(
    ("path", "status"),
    [
        ("/orders/0", 405),  # GET /orders/{order_id} takes the path
        ("/orders/0/lines", 404),
        ("/nothing", 404),
        ("/v2/nothing", 404),  # the mount takes the path, none of its routes
    ],
)
async def test_an_unrouted_post_gets_the_apps_answer_not_a_400(
    path: str, status: int
) -> None:
    counted = Counted()
    app = fastapi_shop(counted)

    assert (await post(app, path)).status_code == status
    # With a key, nothing is claimed for a path that does not exist.
    assert (await post(app, path, KEY)).status_code == status
    assert (await post(app, path, {"Idempotency-Key": ""})).status_code == status
    assert counted.calls == 0


@pytest.mark.parametrize("path", ["/orders", "/v2/refunds"])
async def test_a_routed_post_still_needs_its_key(path: str) -> None:
    counted = Counted()
    app = fastapi_shop(counted)

    missing = await post(app, path)
    assert missing.status_code == 400
    assert missing.headers["content-type"] == "application/problem+json"
    assert (await post(app, path, KEY)).status_code == 201
    replayed = await post(app, path, KEY)
    assert replayed.status_code == 201
    assert replayed.headers["idempotent-replayed"] == "true"
    assert counted.calls == 2


async def test_wrapping_a_starlette_app_from_outside_finds_its_router_too() -> None:
    async def place(request: Request) -> PlainTextResponse:
        return PlainTextResponse("placed", status_code=201)

    inner = Starlette(routes=[Route("/orders", place, methods=["POST"])])
    app = IdempotencyKeyMiddleware(inner, required=["/"])

    assert (await post(app, "/orders")).status_code == 400
    assert (await post(app, "/orders/0")).status_code == 404


async def test_any_other_app_keeps_the_key_check() -> None:
    async def plain(scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": 404, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    app = IdempotencyKeyMiddleware(plain, required=["/orders"])

    assert router_inside(plain) is None
    assert (await post(app, "/orders/0")).status_code == 400


class Odd:
    """A route whose answer cannot be read: it raises, or says something else."""

    def __init__(self, answer: object) -> None:
        self.answer = answer

    def matches(self, scope: Scope) -> tuple[object, Scope]:
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer, {}


class OddRouter:
    def __init__(self, *routes: object) -> None:
        self.routes = list(routes)

    def url_path_for(self, name: str, /, **path_params: object) -> object:
        return name


@pytest.mark.parametrize(
    "route",
    [Odd(ValueError("no")), Odd("maybe"), object()],
    # Ids that do not change between runs (pytest-xdist's workers collect alike).
    ids=["raising", "not-a-bool", "plain-object"],
)
def test_a_route_that_cannot_be_read_counts_as_routed(route: object) -> None:
    scope: Scope = {"type": "http", "method": "POST", "path": "/x", "headers": []}
    assert routes_request(OddRouter(route), scope)
    assert not routes_request(OddRouter(), scope)


def test_the_router_is_found_through_the_middlewares_app_attributes() -> None:
    router = OddRouter()

    class Middleware:
        def __init__(self, app: object) -> None:
            self.app = app

    assert router_inside(Middleware(Middleware(router))) is router
    looped = Middleware(None)
    looped.app = looped
    assert router_inside(looped) is None
