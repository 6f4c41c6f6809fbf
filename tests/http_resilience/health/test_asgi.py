"""`http_resilience.asgi`: liveness stays up, readiness names what refuses calls."""

from __future__ import annotations

import json
from collections.abc import MutableMapping
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.routing import Mount, Route

from http_resilience import (
    CircuitControl,
    HttpClientFactory,
    ResilienceErrorMiddleware,
    create_client,
)
from http_resilience import asgi as health_asgi
from http_resilience.asgi import liveness, readiness
from http_resilience.testing import FakeClock
from tests.http_resilience._support.scripted import async_transport, options
from tests.http_resilience.health.support import BREAKS, HOST, URL, Upstream, get

pytestmark = pytest.mark.anyio

Message = MutableMapping[str, Any]


async def probe(
    app: Any, method: str = "GET", path: str = "/health/ready"
) -> httpx.Response:
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app)) as client:
        return await client.request(method, f"http://service{path}")


async def test_readiness_says_ready_while_every_breaker_takes_calls() -> None:
    transport = async_transport(Upstream(), FakeClock())
    await get(transport)
    response = await probe(readiness(transport))
    assert response.status_code == 200
    assert response.json() == {"status": "ready"}
    assert response.headers["content-type"] == "application/json"
    assert response.headers["cache-control"] == "no-store"


async def test_readiness_names_an_open_breaker_until_its_break_is_over() -> None:
    clock = FakeClock()
    transport = async_transport(Upstream(503), clock, **BREAKS)
    app = readiness(transport)
    for _ in range(5):
        await get(transport)
    response = await probe(app)
    assert response.status_code == 503
    assert response.json() == {
        "status": "degraded",
        "open": [{"client": "orders", "host": HOST, "state": "open"}],
    }
    clock.advance(3.0)
    # The next call is the probe: a replica out of rotation might never make it.
    assert (await probe(app)).json() == {"status": "ready"}


async def test_readiness_names_an_isolated_host_until_it_is_reset() -> None:
    transport = async_transport(Upstream(), FakeClock())
    app = readiness(transport)
    control = CircuitControl(transport)
    control.isolate("https://payments.example")
    response = await probe(app)
    assert response.status_code == 503
    assert response.json()["open"] == [
        {
            "client": "orders",
            "host": "https://payments.example:443",
            "state": "isolated",
        }
    ]
    control.reset("https://payments.example")
    assert (await probe(app)).status_code == 200


async def test_readiness_reads_a_factory_and_the_clients_it_builds_later() -> None:
    factory = HttpClientFactory(
        lambda clients: clients.add(
            "payments", options(**BREAKS), transport=httpx.MockTransport(Upstream())
        ),
        clock=FakeClock(),
    )
    other = async_transport(Upstream(), FakeClock(), name="audit")
    app = readiness(factory, other)
    assert (await probe(app)).status_code == 200
    async with factory:
        for client in (factory.async_client("payments"), factory.client("payments")):
            CircuitControl(client).isolate("http://api.example")
        CircuitControl(other).isolate("http://audit.example")
        response = await probe(app)
    # The async and sync clients of one name are named once.
    assert response.json() == {
        "status": "degraded",
        "open": [
            {"client": "audit", "host": "http://audit.example:80", "state": "isolated"},
            {"client": "payments", "host": HOST, "state": "isolated"},
        ],
    }


async def test_an_isolation_outranks_an_open_breaker_of_a_twin_client() -> None:
    clock = FakeClock()

    def failing(request: httpx.Request) -> httpx.Response:
        return httpx.Response(503)

    factory = HttpClientFactory(
        lambda clients: clients.add(
            "payments", options(**BREAKS), transport=httpx.MockTransport(failing)
        ),
        clock=clock,
    )
    async with factory:
        for _ in range(5):
            factory.client("payments").get(URL)
        CircuitControl(factory.async_client("payments")).isolate("http://api.example")
        response = await probe(readiness(factory))
    assert response.json()["open"] == [
        {"client": "payments", "host": HOST, "state": "isolated"}
    ]


async def test_liveness_stays_up_while_every_dependency_fails() -> None:
    transport = async_transport(Upstream(503), FakeClock(), **BREAKS)
    for _ in range(5):
        await get(transport)
    CircuitControl(transport).isolate("https://payments.example")
    assert (await probe(readiness(transport))).status_code == 503
    response = await probe(liveness(), path="/health/live")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


async def test_no_credentials_path_or_query_ever_reach_the_answer() -> None:
    transport = async_transport(Upstream(503), FakeClock(), **BREAKS)
    for _ in range(5):
        await get(transport, "https://user:secret@api.example/items/7?token=abc")
    text = (await probe(readiness(transport))).text
    assert json.loads(text)["open"][0]["host"] == "https://api.example:443"
    for word in ("secret", "user", "token", "items"):
        assert word not in text


async def test_head_answers_without_a_body_and_other_methods_are_refused() -> None:
    app = readiness(async_transport(Upstream(), FakeClock()))
    head = await probe(app, "HEAD")
    assert head.status_code == 200
    assert head.content == b""
    assert head.headers["content-length"] == str(len(b'{"status": "ready"}'))
    post = await probe(app, "POST")
    assert post.status_code == 405
    assert post.headers["allow"] == "GET, HEAD"
    assert (await probe(liveness(), "DELETE")).status_code == 405


async def test_mounted_in_starlette_the_apps_answer_under_their_prefix() -> None:
    transport = async_transport(Upstream(), FakeClock())
    CircuitControl(transport).isolate("http://api.example")
    app = Starlette(
        routes=[
            Mount("/health/live", app=liveness()),
            Mount("/health/ready", app=readiness(transport)),
        ]
    )
    assert (await probe(app, path="/health/live/")).json() == {"status": "ok"}
    ready = await probe(app, path="/health/ready/")
    assert ready.status_code == 503
    assert ready.json()["status"] == "degraded"


async def test_on_a_starlette_route_the_apps_answer_at_its_exact_path() -> None:
    transport = async_transport(Upstream(), FakeClock())
    app = Starlette(
        routes=[
            Route("/health/live", liveness()),
            Route("/health/ready", readiness(transport)),
        ]
    )
    assert (await probe(app, path="/health/live")).json() == {"status": "ok"}
    assert (await probe(app, "HEAD", "/health/ready")).status_code == 200


async def test_run_alone_the_app_starts_and_stops_with_the_server() -> None:
    incoming: list[Message] = [
        {"type": "lifespan.startup"},
        {"type": "lifespan.shutdown"},
    ]
    sent: list[Message] = []

    async def receive() -> Message:
        return incoming.pop(0)

    async def send(message: Message) -> None:
        sent.append(message)

    await liveness()({"type": "lifespan"}, receive, send)
    assert sent == [
        {"type": "lifespan.startup.complete"},
        {"type": "lifespan.shutdown.complete"},
    ]


async def test_a_websocket_is_closed() -> None:
    sent: list[Message] = []

    async def receive() -> Message:
        return {"type": "websocket.connect"}  # pragma: no cover - never read

    async def send(message: Message) -> None:
        sent.append(message)

    await liveness()({"type": "websocket"}, receive, send)
    assert sent == [{"type": "websocket.close", "code": 1000}]


def test_readiness_needs_something_to_watch() -> None:
    with pytest.raises(TypeError, match=r"readiness\(\) needs an HttpClientFactory"):
        readiness()
    with pytest.raises(TypeError, match=r"^readiness\(\): this Client was not built"):
        readiness(httpx.Client())
    with pytest.raises(TypeError, match=r"^readiness\(\) takes a client .* got str"):
        readiness("http://api.example")  # type: ignore[arg-type]


def test_the_module_also_offers_the_error_middleware() -> None:
    assert health_asgi.ResilienceErrorMiddleware is ResilienceErrorMiddleware
    assert health_asgi.__all__ == [
        "AdmissionHealth",
        "AdmissionMiddleware",
        "MiddlewareOrderError",
        "ResilienceErrorMiddleware",
        "liveness",
        "readiness",
    ]
    with create_client(transport=httpx.MockTransport(Upstream().answer)) as client:
        assert readiness(client) is not None
