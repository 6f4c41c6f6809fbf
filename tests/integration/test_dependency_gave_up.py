"""A dependency that gave up is an outage, not a bug: over real uvicorn servers.

The scenario a new user met: a FastAPI orders service calls a payments service
that always answers 503 with ``Retry-After: 7``, through a resilient client,
and calls ``raise_for_status()`` on the answer the client gave up on. The
`httpx.HTTPStatusError` escaped, uvicorn logged a traceback per order and
dropped the connection. Now the client marks that answer final and the error
middlewares answer it: 503 problem+json with the dependency's
``Retry-After``, nothing logged at ERROR, and the keep-alive connection serves
the next order. With `DomainErrorMiddleware` inside or outside
`ResilienceErrorMiddleware` (both orders the stack allows), and with
`ResilienceContextMiddleware` alone. A 404 from the dependency is still the
service's error: 500, logged.

Both services run under uvicorn on 127.0.0.1; the client waits on a
`FakeClock`, so its three 7 s waits take no time.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import AsyncGenerator, Generator
from contextlib import ExitStack, asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from http_resilience import (
    ResilienceContextMiddleware,
    ResilienceErrorMiddleware,
    create_async_client,
)
from http_resilience.testing import FakeClock
from mediator.asgi import DomainErrorMiddleware
from tests.support.fault_server import (
    Message,
    Receive,
    Send,
    read_body,
    run_lifespan,
    serve_app,
)

pytestmark = pytest.mark.anyio

ATTEMPTS = 4  # the standard pipeline: the first and 3 retries


@dataclass
class Payments:
    """The dependency: ``/pay`` is always 503 with Retry-After: 7, ``/refunds`` 404."""

    started: threading.Event = field(default_factory=threading.Event)
    hits: list[str] = field(default_factory=list[str])

    async def __call__(self, scope: Message, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await run_lifespan(receive, send, self.started)
            return
        await read_body(receive)
        self.hits.append(scope["path"])
        if scope["path"] == "/pay":
            status, headers = 503, [(b"retry-after", b"7")]
        else:
            status, headers = 404, []
        headers.append((b"content-length", b"0"))
        await send(
            {"type": "http.response.start", "status": status, "headers": headers}
        )
        await send({"type": "http.response.body", "body": b""})


class Orders:
    """The service: FastAPI, its middlewares added innermost first."""

    def __init__(self, payments_url: str, middlewares: list[Any]) -> None:
        self.ready = threading.Event()
        self.peers: list[tuple[str, int]] = []
        self.clock = FakeClock()
        clients: list[httpx.AsyncClient] = []

        @asynccontextmanager
        async def lifespan(app: FastAPI) -> AsyncGenerator[None]:
            async with create_async_client(
                "payments", base_url=payments_url, clock=self.clock
            ) as client:
                clients.append(client)
                self.ready.set()
                yield

        self.app = FastAPI(lifespan=lifespan)

        @self.app.post("/orders/{order}")
        async def place(order: str) -> dict[str, str]:  # pyright: ignore[reportUnusedFunction]
            answer = await clients[0].post(
                "/pay", json={"order": order}, headers={"Idempotency-Key": order}
            )
            answer.raise_for_status()
            return {"order": order}

        @self.app.post("/orders/{order}/refund")
        async def refund(order: str) -> dict[str, str]:  # pyright: ignore[reportUnusedFunction]
            answer = await clients[0].post("/refunds", json={"order": order})
            answer.raise_for_status()  # a 404: this service's mistake
            return {"refunded": order}

        for middleware in middlewares:
            self.app.add_middleware(middleware)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            client = scope["client"]
            self.peers.append((client[0], client[1]))
        await self.app(scope, receive, send)


STACKS = {
    # add_middleware makes the last added the outermost.
    "domain-inside": [
        DomainErrorMiddleware,
        ResilienceErrorMiddleware,
        ResilienceContextMiddleware,
    ],
    "domain-outside": [
        ResilienceErrorMiddleware,
        DomainErrorMiddleware,
        ResilienceContextMiddleware,
    ],
    "error-middleware-only": [ResilienceErrorMiddleware],
    "context-middleware-only": [ResilienceContextMiddleware],
}


@contextmanager
def running(
    middlewares: list[Any],
) -> Generator[tuple[str, Orders, Payments]]:
    payments = Payments()
    with ExitStack() as stack:
        payments_url = stack.enter_context(
            serve_app(payments, payments.started, name="payments")
        )
        orders = Orders(payments_url, middlewares)
        url = stack.enter_context(serve_app(orders, orders.ready, name="orders"))
        yield url, orders, payments


def errors_logged(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [record for record in caplog.records if record.levelno >= logging.ERROR]


@pytest.mark.parametrize("stack", STACKS.values(), ids=STACKS.keys())
async def test_a_dependency_that_gave_up_is_a_503_and_the_connection_stays(
    stack: list[Any], caplog: pytest.LogCaptureFixture
) -> None:
    connections: list[str] = []

    async def trace(event: str, info: dict[str, Any]) -> None:
        if event == "connection.connect_tcp.complete":
            connections.append(event)

    with caplog.at_level(logging.ERROR), running(stack) as (url, orders, payments):
        async with httpx.AsyncClient(base_url=url, timeout=60.0) as caller:
            answers = [
                await caller.post(f"/orders/{order}", extensions={"trace": trace})
                for order in ("o-1", "o-2")
            ]
    for answer in answers:
        assert answer.status_code == 503
        assert answer.headers["content-type"] == "application/problem+json"
        assert answer.headers["retry-after"] == "7"
        assert answer.json()["status"] == 503
        assert "payments" not in answer.text
        assert "127.0.0.1" not in answer.text
    # The client retried as the dependency asked, then gave up.
    assert payments.hits == ["/pay"] * (2 * ATTEMPTS)
    assert orders.clock.sleeps == [7.0] * (2 * (ATTEMPTS - 1))
    # No traceback, and the server kept the connection for the second order.
    assert errors_logged(caplog) == []
    assert len(orders.peers) == 2
    assert orders.peers[0] == orders.peers[1]
    assert len(connections) == 1


@pytest.mark.parametrize("stack", STACKS.values(), ids=STACKS.keys())
async def test_a_dependencys_404_is_still_the_services_error(
    stack: list[Any], caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.ERROR), running(stack) as (url, _, payments):
        async with httpx.AsyncClient(base_url=url, timeout=60.0) as caller:
            answer = await caller.post("/orders/o-1/refund")
    assert answer.status_code == 500
    assert payments.hits == ["/refunds"]  # never retried: nothing was final
    raised = [
        record.exc_info[1]
        for record in errors_logged(caplog)
        if record.exc_info is not None
    ]
    assert len(raised) == 1
    assert isinstance(raised[0], httpx.HTTPStatusError)
    assert raised[0].response.status_code == 404
