"""Both middlewares on a FastAPI app whose route sends a command."""

from __future__ import annotations

import httpx
import pytest
from fastapi import FastAPI
from starlette.types import Scope

from mediator import (
    Command,
    CommandHandler,
    NotFoundError,
    Principal,
    authorize,
    current_correlation_id,
    current_principal,
)
from mediator.asgi import DomainErrorMiddleware, RequestContextMiddleware
from tests.mediator._support.support import build

pytestmark = pytest.mark.anyio

PLACED: list[tuple[str, str | None, str | None]] = []


@authorize(roles=["clerk"])
class PlaceOrder(Command[int]):
    sku: str


class PlaceOrderHandler(CommandHandler[PlaceOrder, int]):
    async def handle(self, request: PlaceOrder) -> int:
        if request.sku != "A-1":
            raise NotFoundError(f"no item {request.sku}")
        principal = current_principal()
        PLACED.append(
            (
                request.sku,
                None if principal is None else principal.id,
                current_correlation_id(),
            )
        )
        return 7


def user_of(scope: Scope) -> Principal | None:
    # A stand-in for Starlette's scope["user"]: the user named in a header.
    for name, value in scope["headers"]:
        if name == b"x-user":
            return Principal(value.decode(), roles=frozenset({"clerk"}))
    return None


def make_app() -> FastAPI:
    mediator = build(lambda m: m.add_handler(PlaceOrderHandler).use_defaults())
    app = FastAPI()

    @app.post("/orders/{sku}", status_code=201)
    async def place(sku: str) -> dict[str, int]:  # pyright: ignore[reportUnusedFunction]
        return {"order": await mediator.send(PlaceOrder(sku=sku))}

    # The last added is the outermost: the context is set around the answers.
    app.add_middleware(DomainErrorMiddleware)
    app.add_middleware(RequestContextMiddleware, principal=user_of)
    return app


async def post(path: str, headers: dict[str, str]) -> httpx.Response:
    transport = httpx.ASGITransport(app=make_app())
    async with httpx.AsyncClient(
        transport=transport, base_url="http://shop.local"
    ) as client:
        return await client.post(path, headers=headers)


async def test_a_route_sends_with_the_requests_principal_and_id() -> None:
    PLACED.clear()
    response = await post("/orders/A-1", {"X-User": "u-1", "X-Correlation-ID": "c-1"})
    assert (response.status_code, response.json()) == (201, {"order": 7})
    assert response.headers["x-correlation-id"] == "c-1"
    assert PLACED == [("A-1", "u-1", "c-1")]


async def test_a_domain_error_is_a_problem_answer_with_the_id() -> None:
    response = await post("/orders/B-2", {"X-User": "u-1", "X-Correlation-ID": "c-2"})
    assert response.status_code == 404
    assert response.headers["content-type"] == "application/problem+json"
    assert response.headers["x-correlation-id"] == "c-2"
    assert "B-2" not in response.text


async def test_an_anonymous_caller_is_answered_401() -> None:
    response = await post("/orders/A-1", {})
    assert response.status_code == 401
    assert response.json()["title"] == "Unauthorized"
