"""A bug's 500 carries the correlation id: `RequestContextMiddleware` answers it.

In process, the 500 is problem+json with the request's id and nothing of the
error, and the error is logged once, not raised on; over a real uvicorn, a
FastAPI app's bug is answered so (not with Starlette's plain-text 500, sent
outside the middleware), logged once, and the connection serves the next
request.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import AsyncGenerator, Awaitable, Callable, MutableMapping
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from http_resilience import ResilienceContextMiddleware
from mediator import current_correlation_id
from mediator.asgi import DomainErrorMiddleware, RequestContextMiddleware
from tests.support.fault_server import serve_app

pytestmark = pytest.mark.anyio

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

SECRET = "card 4111 1111 1111 1111"
PROBLEM = {
    "type": "about:blank",
    "title": "Internal Server Error",
    "status": 500,
    "detail": "The service failed to answer this request.",
}


async def buggy(scope: Scope, receive: Receive, send: Send) -> None:
    raise KeyError(SECRET)


async def get(app: Any, headers: dict[str, str]) -> httpx.Response:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://shop") as client:
        return await client.get("/orders", headers=headers)


def bugs_logged(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [
        record
        for record in caplog.records
        if record.exc_info is not None and record.exc_info[0] is KeyError
    ]


async def test_a_bug_is_answered_500_with_the_id_and_logged_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    app = RequestContextMiddleware(DomainErrorMiddleware(buggy))

    with caplog.at_level(logging.ERROR):
        answered = await get(app, {"X-Correlation-ID": "order-42"})

    assert answered.status_code == 500
    assert answered.headers["x-correlation-id"] == "order-42"
    assert answered.headers["content-type"] == "application/problem+json"
    assert answered.json() == PROBLEM
    assert SECRET not in answered.text
    (record,) = bugs_logged(caplog)
    assert record.name == "mediator.asgi"
    assert record.getMessage() == (
        "unhandled error in GET /orders (correlation id order-42), answered 500"
    )
    assert current_correlation_id() is None


async def test_a_failing_principal_reader_is_raised_as_documented() -> None:
    def principal(scope: Scope) -> Any:
        raise RuntimeError(SECRET)

    with pytest.raises(RuntimeError):
        await get(RequestContextMiddleware(buggy, principal=principal), {})


async def test_a_mounted_apps_own_stack_leaves_the_bug_to_the_outer_one(
    caplog: pytest.LogCaptureFixture,
) -> None:
    mounted = RequestContextMiddleware(buggy)
    app = RequestContextMiddleware(DomainErrorMiddleware(mounted))

    with caplog.at_level(logging.ERROR):
        answered = await get(app, {"X-Correlation-ID": "order-42"})

    assert answered.status_code == 500
    assert answered.headers["x-correlation-id"] == "order-42"
    assert len(bugs_logged(caplog)) == 1


async def test_an_answer_begun_is_left_as_it_is() -> None:
    async def half(scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        raise KeyError(SECRET)

    sent: list[Message] = []

    async def receive() -> Message:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: Message) -> None:
        sent.append(message)

    scope: Scope = {"type": "http", "method": "GET", "path": "/", "headers": []}
    with pytest.raises(KeyError):
        await RequestContextMiddleware(half)(scope, receive, send)
    assert [message["type"] for message in sent] == ["http.response.start"]
    assert sent[0]["status"] == 200


async def test_a_caller_that_left_is_no_second_error(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def gone(message: Message) -> None:
        raise OSError("the caller left")

    async def receive() -> Message:
        return {"type": "http.disconnect"}

    scope: Scope = {"type": "http", "method": "GET", "path": "/", "headers": []}
    with caplog.at_level(logging.ERROR):
        await RequestContextMiddleware(buggy)(scope, receive, gone)
    assert len(bugs_logged(caplog)) == 1


class Service:
    """A FastAPI app whose one route has a bug, under the web middlewares."""

    def __init__(self) -> None:
        self.ready = threading.Event()

        @asynccontextmanager
        async def lifespan(app: FastAPI) -> AsyncGenerator[None]:
            self.ready.set()
            yield

        self.app = FastAPI(lifespan=lifespan)

        @self.app.get("/orders")
        async def orders() -> dict[str, str]:  # pyright: ignore[reportUnusedFunction]
            raise KeyError(SECRET)

        @self.app.get("/health")
        async def health() -> dict[str, str]:  # pyright: ignore[reportUnusedFunction]
            return {"status": "up"}

        self.app.add_middleware(DomainErrorMiddleware)
        self.app.add_middleware(ResilienceContextMiddleware)
        self.app.add_middleware(RequestContextMiddleware)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        await self.app(scope, receive, send)


async def test_over_uvicorn_the_500_carries_the_id_and_is_logged_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    service = Service()
    with (
        caplog.at_level(logging.ERROR),
        serve_app(service, service.ready, name="buggy service") as url,
    ):
        async with httpx.AsyncClient(base_url=url) as client:
            answered = await client.get(
                "/orders", headers={"X-Correlation-ID": "order-42"}
            )
            after = await client.get("/health")

    assert answered.status_code == 500
    assert answered.headers["x-correlation-id"] == "order-42"
    assert answered.json() == PROBLEM
    assert SECRET not in answered.text
    # The connection the 500 came on serves the next request.
    assert after.status_code == 200
    assert [record.name for record in bugs_logged(caplog)] == ["mediator.asgi"]
