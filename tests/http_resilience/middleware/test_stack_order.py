"""`http_resilience`'s web middlewares refuse to serve in the wrong order."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

import httpx
import pytest

from http_resilience import (
    ResilienceContextMiddleware,
    ResilienceError,
    ResilienceErrorMiddleware,
)
from http_resilience.asgi import MiddlewareOrderError

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


class Service:
    """The app: counts its runs and keeps the stack it was reached through."""

    def __init__(self) -> None:
        self.runs = 0
        self.stacks: list[list[str]] = []

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        self.runs += 1
        self.stacks.append(list(scope[STACK_KEY]))
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})


def recorded_as(name: str, app: App) -> App:
    """A stand-in for a middleware of `mediator.asgi`: it only records `name`."""

    async def middleware(scope: Scope, receive: Receive, send: Send) -> None:
        scope.setdefault(STACK_KEY, []).append(name)
        await app(scope, receive, send)

    return middleware


async def get(app: App) -> httpx.Response:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport) as client:
        return await client.get("http://service/stock")


async def test_the_error_mapper_outside_the_context_is_refused_every_time() -> None:
    app = Service()
    stack = ResilienceErrorMiddleware(ResilienceContextMiddleware(app))
    for _ in range(2):
        with pytest.raises(MiddlewareOrderError) as raised:
            await get(stack)
        assert str(raised.value) == refused(
            "ResilienceErrorMiddleware", "ResilienceContextMiddleware"
        )
    assert app.runs == 0


async def test_the_error_is_not_a_resilience_error() -> None:
    # A ResilienceError would be answered 503, as an outage: this is a bug.
    assert not issubclass(MiddlewareOrderError, ResilienceError)
    assert MiddlewareOrderError.__name__ == "MiddlewareOrderError"


async def test_the_context_then_the_error_mapper_serve() -> None:
    app = Service()
    stack = ResilienceContextMiddleware(ResilienceErrorMiddleware(app))
    for _ in range(2):
        assert (await get(stack)).status_code == 200
    assert (
        app.stacks == [["ResilienceContextMiddleware", "ResilienceErrorMiddleware"]] * 2
    )


@pytest.mark.parametrize("outer", ["IdempotencyKeyMiddleware", "DomainErrorMiddleware"])
async def test_mediator_names_outside_the_context_are_refused(outer: str) -> None:
    # Stand-ins for the mediator's middlewares, which this package does not
    # import: the scope names them, and this package's table ranks the names.
    app = Service()
    stack = recorded_as(outer, ResilienceContextMiddleware(app))
    with pytest.raises(MiddlewareOrderError) as raised:
        await get(stack)
    assert str(raised.value) == refused(outer, "ResilienceContextMiddleware")
    assert app.runs == 0


async def test_mediator_names_in_their_place_serve() -> None:
    app = Service()
    stack = recorded_as(
        "RequestContextMiddleware",
        ResilienceContextMiddleware(
            recorded_as(
                "IdempotencyKeyMiddleware",
                recorded_as("DomainErrorMiddleware", ResilienceErrorMiddleware(app)),
            )
        ),
    )
    assert (await get(stack)).status_code == 200
    assert app.stacks == [
        [
            "RequestContextMiddleware",
            "ResilienceContextMiddleware",
            "IdempotencyKeyMiddleware",
            "DomainErrorMiddleware",
            "ResilienceErrorMiddleware",
        ]
    ]


async def test_the_error_mapper_may_sit_outside_the_domain_error_one() -> None:
    # Each answers only its own errors and re-raises the other's.
    app = Service()
    stack = ResilienceErrorMiddleware(
        recorded_as("DomainErrorMiddleware", ResilienceErrorMiddleware(app))
    )
    assert (await get(stack)).status_code == 200
    assert app.stacks == [
        [
            "ResilienceErrorMiddleware",
            "DomainErrorMiddleware",
            "ResilienceErrorMiddleware",
        ]
    ]


async def test_a_mounted_app_may_run_the_context_again() -> None:
    app = Service()
    mounted = ResilienceContextMiddleware(ResilienceErrorMiddleware(app))
    stack = ResilienceContextMiddleware(ResilienceErrorMiddleware(mounted))
    assert (await get(stack)).status_code == 200
    assert app.stacks == [
        [
            "ResilienceContextMiddleware",
            "ResilienceErrorMiddleware",
            "ResilienceContextMiddleware",
            "ResilienceErrorMiddleware",
        ]
    ]


@pytest.mark.parametrize("kind", ["websocket", "other"])
async def test_other_scopes_are_not_recorded(kind: str) -> None:
    seen: list[Scope] = []

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        seen.append(dict(scope))

    async def never(*args: Any) -> Any:
        raise AssertionError("not called")

    scope: Scope = {"type": kind}
    await ResilienceErrorMiddleware(ResilienceContextMiddleware(app))(
        scope, never, never
    )
    assert seen == [{"type": kind}]


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
    await ResilienceErrorMiddleware(ResilienceContextMiddleware(app))(
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
    await ResilienceContextMiddleware(ResilienceErrorMiddleware(app))(
        scope, never, never
    )
    # Recorded, and passed on: the app runs the lifespan itself.
    assert calls == [scope]
