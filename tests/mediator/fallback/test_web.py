"""The ``Degraded`` header: a DomainErrorMiddleware option, on ASGI and WSGI."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterable
from datetime import timedelta
from typing import Any
from wsgiref.types import StartResponse, WSGIEnvironment
from wsgiref.util import setup_testing_defaults

import httpx
import pytest

from mediator import Degradation, Mediator
from mediator.asgi import DomainErrorMiddleware
from mediator.wsgi import DomainErrorMiddleware as WsgiDomainErrorMiddleware
from tests.mediator.fallback.shop import GetStock, GetStockAsync, Outage, shop

pytestmark = pytest.mark.anyio


def asgi_app(mediator: Mediator) -> Any:
    """Answers ``/stock/<sku>`` with the stock, sent from a task of its own."""

    async def app(scope: Any, receive: Any, send: Any) -> None:
        sku = scope["path"].rsplit("/", 1)[-1]
        # A task of its own, as frameworks run endpoints: the header still sees it.
        stock = await asyncio.ensure_future(mediator.send(GetStockAsync(sku=sku)))
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"application/json")],
            }
        )
        await send({"type": "http.response.body", "body": json.dumps(stock).encode()})

    return app


async def get(app: Any, path: str) -> httpx.Response:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport) as client:
        return await client.get(f"http://shop{path}")


async def test_a_degraded_answer_names_its_source_and_age() -> None:
    mediator, _ = shop(Outage(failures=4))
    app = DomainErrorMiddleware(asgi_app(mediator), degradation_header=True)

    degraded = await get(app, "/stock/A")
    answered = await get(app, "/stock/A")

    assert (degraded.status_code, degraded.json()) == (200, 7)
    assert degraded.headers["degraded"] == '"stock-cache";age=42'
    assert (answered.status_code, answered.json()) == (200, 40)
    assert "degraded" not in answered.headers


async def test_without_the_option_no_header_is_sent() -> None:
    mediator, _ = shop(Outage(failures=4))
    app = DomainErrorMiddleware(asgi_app(mediator))

    response = await get(app, "/stock/A")

    assert response.json() == 7
    assert "degraded" not in response.headers


async def test_a_domain_error_is_still_its_problem_answer() -> None:
    mediator, _ = shop(Outage(failures=4))
    app = DomainErrorMiddleware(asgi_app(mediator), degradation_header=True)

    response = await get(app, "/stock/gone")

    assert response.status_code == 404
    assert "degraded" not in response.headers


def wsgi_app(mediator: Mediator) -> Any:
    def app(environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        sku = environ["PATH_INFO"].rsplit("/", 1)[-1]
        stock = mediator.send_sync(GetStock(sku=sku))
        start_response("200 OK", [("Content-Type", "application/json")])
        return [json.dumps(stock).encode()]

    return app


def call(app: Any, path: str) -> tuple[str, dict[str, str], bytes]:
    environ: dict[str, Any] = {"PATH_INFO": path}
    setup_testing_defaults(environ)
    answered: list[tuple[str, list[tuple[str, str]]]] = []
    written: list[bytes] = []

    def start_response(
        status: str, headers: list[tuple[str, str]], exc_info: Any = None
    ) -> Any:
        answered.append((status, headers))
        return written.append

    body = b"".join(app(environ, start_response))
    [(status, headers)] = answered
    return status, {name.lower(): value for name, value in headers}, body


def test_the_wsgi_twin_sends_the_same_header() -> None:
    mediator, _ = shop(Outage(failures=4))
    app = WsgiDomainErrorMiddleware(wsgi_app(mediator), degradation_header=True)

    status, headers, body = call(app, "/stock/A")
    assert (status, headers["degraded"], body) == (
        "200 OK",
        '"stock-cache";age=42',
        b"7",
    )
    status, headers, body = call(app, "/stock/A")
    assert (status, body) == ("200 OK", b"40")
    assert "degraded" not in headers
    status, headers, _ = call(app, "/stock/gone")
    assert status == "404 Not Found"
    assert "degraded" not in headers


def test_the_wsgi_twin_without_the_option_sends_none() -> None:
    mediator, _ = shop(Outage(failures=4))
    _, headers, body = call(WsgiDomainErrorMiddleware(wsgi_app(mediator)), "/s/A")
    assert body == b"7"
    assert "degraded" not in headers


@pytest.mark.parametrize(
    "middleware", [DomainErrorMiddleware, WsgiDomainErrorMiddleware]
)
def test_the_option_is_a_bool(middleware: Any) -> None:
    with pytest.raises(
        TypeError, match="degradation_header must be True or False, got int"
    ):
        middleware(wsgi_app, degradation_header=1)


def test_the_header_value_lists_each_source_once_with_its_oldest_age() -> None:
    from mediator._asgi.answers import degraded_value

    def seen(source: str, seconds: float | None) -> Degradation:
        age = None if seconds is None else timedelta(seconds=seconds)
        return Degradation(source, None, age, "OSError")

    assert degraded_value([]) is None
    assert (
        degraded_value(
            [seen("a", 5), seen("b", None), seen("a", 90.9), seen("b", 3), seen("a", 1)]
        )
        == '"a";age=90, "b";age=3'
    )


def fastapi_app(mediator: Mediator) -> Any:
    from fastapi import FastAPI
    from starlette.middleware.base import BaseHTTPMiddleware

    app = FastAPI()

    @app.get("/async/{sku}")
    async def read_async(sku: str) -> int:  # pyright: ignore[reportUnusedFunction]
        return await mediator.send(GetStockAsync(sku=sku))

    @app.get("/sync/{sku}")
    def read_sync(sku: str) -> int:  # pyright: ignore[reportUnusedFunction]
        # FastAPI runs a plain def in its thread pool, in a copy of the context.
        return mediator.send_sync(GetStock(sku=sku))

    async def passing(request: Any, call_next: Any) -> Any:
        return await call_next(request)

    # BaseHTTPMiddleware runs the app in a task of its own.
    app.add_middleware(BaseHTTPMiddleware, dispatch=passing)
    app.add_middleware(DomainErrorMiddleware, degradation_header=True)
    return app


@pytest.mark.parametrize("route", ["async", "sync"])
async def test_a_fastapi_route_in_a_thread_or_a_task_gets_the_header(
    route: str,
) -> None:
    mediator, _ = shop(Outage(failures=4))
    app = fastapi_app(mediator)

    degraded = await get(app, f"/{route}/A")
    answered = await get(app, f"/{route}/A")

    assert (degraded.status_code, degraded.json()) == (200, 7)
    assert degraded.headers["degraded"] == '"stock-cache";age=42'
    assert answered.json() == 40
    assert "degraded" not in answered.headers
