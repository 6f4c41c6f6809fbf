"""Named clients that run a pipeline of their own, correlation stamp included."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field

import httpx
import pytest
from injector import Injector

import http_resilience
from http_resilience import (
    HedgeEvent,
    HttpClientFactory,
    HttpEvent,
    HttpResilienceOptions,
    ResiliencePipeline,
    correlation_id,
)
from http_resilience.injector import HttpClientsModule
from http_resilience.testing import FakeClock
from tests.support.fault_server import (
    MAX_SLEEP,
    Message,
    Receive,
    Send,
    read_body,
    run_lifespan,
    serve_app,
    stayed,
)

pytestmark = pytest.mark.anyio

HEADER = "X-Correlation-ID"
HEDGING = ResiliencePipeline().add_hedging(delay=0.2)


def built(module: HttpClientsModule) -> HttpClientFactory:
    return Injector([module]).get(HttpClientFactory)


@dataclass
class FirstHangs:
    """A `MockTransport` handler: the first request hangs until cancelled."""

    requests: list[httpx.Request] = field(default_factory=list[httpx.Request])
    hang: asyncio.Event = field(default_factory=asyncio.Event)

    async def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        if len(self.requests) == 1:
            await self.hang.wait()
        return httpx.Response(200, json={"answered": len(self.requests)})

    def ids(self) -> list[str | None]:
        return [request.headers.get(HEADER) for request in self.requests]


def test_the_factory_is_public_without_the_injector_extra() -> None:
    from http_resilience import injector

    assert http_resilience.HttpClientFactory is injector.HttpClientFactory


@pytest.mark.asyncio_only("its helpers use asyncio.Event, asyncio.run")
async def test_a_named_client_runs_its_own_pipeline_and_stamps_every_hedge() -> None:
    server = FirstHangs()
    seen: list[HttpEvent] = []
    factory = built(
        HttpClientsModule(
            lambda clients: clients.add(
                "catalog",
                pipeline=HEDGING,
                base_url="http://catalog.local",
                transport=httpx.MockTransport(server),
            ),
            clock=FakeClock(),
            listeners=[seen.append],
        )
    )
    async with factory:
        with correlation_id("order-42"):
            response = await factory.async_client("catalog").get("/items/A-1")
    assert response.json() == {"answered": 2}
    assert any(isinstance(event, HedgeEvent) for event in seen)
    assert server.ids() == ["order-42", "order-42"]


@pytest.mark.asyncio_only("its helpers use asyncio.Event, asyncio.run")
async def test_a_hedged_call_without_an_id_gives_every_copy_the_same_new_one() -> None:
    server = FirstHangs()
    factory = HttpClientFactory(clock=FakeClock()).add(
        "catalog", pipeline=HEDGING, transport=httpx.MockTransport(server)
    )
    async with factory:
        await factory.async_client("catalog").get("http://catalog.local/")
    first, second = server.ids()
    assert first is not None
    assert first == second


def test_a_sync_client_runs_a_retry_pipeline_and_stamps_every_attempt() -> None:
    statuses = iter([503, 503, 200])
    ids: list[str | None] = []

    def handler(request: httpx.Request) -> httpx.Response:
        ids.append(request.headers.get(HEADER))
        return httpx.Response(next(statuses))

    pipeline = ResiliencePipeline().add_retry(max_retry_attempts=2, base_delay=0)
    factory = HttpClientFactory(clock=FakeClock()).add(
        "orders", pipeline=pipeline, transport=httpx.MockTransport(handler)
    )
    with factory, correlation_id("sync-1"):
        assert factory.client("orders").get("http://orders.local/").status_code == 200
    assert ids == ["sync-1"] * 3


def test_a_pipeline_client_ignores_the_standard_pipelines_configuration() -> None:
    # The client's section configures the standard pipeline, which it does not
    # run; like options= given to add, pipeline= wins over the configuration.
    config = {"resilience": {"http": {"clients": {"orders": {"base_delay": 1}}}}}
    calls: list[int] = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(1)
        return httpx.Response(503 if len(calls) == 1 else 200)

    clock = FakeClock()
    factory = HttpClientFactory(config=config, clock=clock).add(
        "orders",
        pipeline=ResiliencePipeline().add_retry(max_retry_attempts=1, base_delay=0),
        transport=httpx.MockTransport(handler),
    )
    with factory:
        assert factory.client("orders").get("http://orders.local/").status_code == 200
    assert len(calls) == 2
    assert clock.monotonic() == 0.0


# --- what is checked when the client is added ---------------------------------------


def test_a_hedging_client_has_no_sync_twin_and_says_so_before_building() -> None:
    factory = HttpClientsModule(
        lambda clients: clients.add(
            "catalog",
            pipeline=HEDGING,
            transport=httpx.MockTransport(lambda request: httpx.Response(200)),
        )
    ).factory
    with pytest.raises(TypeError) as raised:
        factory.client("catalog")
    assert str(raised.value) == (
        "HTTP client 'catalog': its pipeline hedges, and hedging needs an async "
        "client (a sync attempt cannot be cancelled): ask for "
        "async_client('catalog')"
    )
    asyncio.run(factory.aclose())


def test_hedging_over_a_sync_transport_is_refused_when_added() -> None:
    with pytest.raises(TypeError) as raised:
        HttpClientsModule(
            lambda clients: clients.add(
                "catalog", pipeline=HEDGING, transport=httpx.HTTPTransport()
            )
        )
    assert str(raised.value) == (
        "HTTP client 'catalog' can be neither async (an async client needs async "
        "transports, got HTTPTransport) nor sync (its pipeline hedges, and hedging "
        "needs an async client (a sync attempt cannot be cancelled))"
    )


def test_a_transport_of_neither_kind_is_refused_when_added() -> None:
    with pytest.raises(TypeError, match="can be neither async") as raised:
        HttpClientFactory().add("catalog", mounts={"http://x": object()})
    assert "got object" in str(raised.value)


def test_a_client_names_its_deadline_header_and_a_bad_one_is_refused_when_added() -> (
    None
):
    sent: list[httpx.Request] = []

    def answer(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        return httpx.Response(200)

    factory = HttpClientFactory(clock=FakeClock())
    factory.add(
        "grpc", deadline_header="Grpc-Timeout-Ms", transport=httpx.MockTransport(answer)
    )
    factory.add("quiet", deadline_header=None, transport=httpx.MockTransport(answer))
    factory.client("grpc").get("http://grpc.local/")
    factory.client("quiet").get("http://quiet.local/")
    assert sent[0].headers["grpc-timeout-ms"].isdigit()
    assert "x-request-timeout-ms" not in sent[0].headers
    assert "x-request-timeout-ms" not in sent[1].headers
    factory.close()
    with pytest.raises(ValueError, match="deadline_header 'X Timeout' is not an"):
        HttpClientFactory().add("orders", deadline_header="X Timeout")
    with pytest.raises(TypeError, match="deadline_header must be a header name"):
        HttpClientFactory().add("orders", deadline_header=5)


def test_options_and_a_pipeline_together_are_refused_when_added() -> None:
    with pytest.raises(TypeError) as raised:
        HttpClientFactory().add(
            "orders", HttpResilienceOptions(), pipeline=ResiliencePipeline()
        )
    assert str(raised.value) == (
        "HTTP client 'orders': give options= (the standard pipeline) or "
        "pipeline= (your own), not both"
    )


def test_a_pipeline_of_the_wrong_type_is_refused_when_added() -> None:
    with pytest.raises(TypeError) as raised:
        HttpClientFactory().add("orders", pipeline="retry")  # type: ignore[arg-type]
    assert str(raised.value) == (
        "HTTP client 'orders': pipeline must be a ResiliencePipeline, got str"
    )


# --- against a real server ----------------------------------------------------------


@dataclass
class HeaderApp:
    """Records each request's correlation header per path; a path's first hit
    hangs until its client goes away, later hits answer at once."""

    started: threading.Event = field(default_factory=threading.Event)
    seen: dict[str, list[str | None]] = field(
        default_factory=dict[str, list[str | None]]
    )

    async def __call__(self, scope: Message, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await run_lifespan(receive, send, self.started)
            return
        headers = {
            name.decode("latin-1").lower(): value.decode("latin-1")
            for name, value in scope["headers"]
        }
        earlier = self.seen.setdefault(scope["path"], [])
        earlier.append(headers.get(HEADER.lower()))
        if not await read_body(receive):
            return
        if len(earlier) == 1 and not await stayed(receive, MAX_SLEEP):
            return
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})


@dataclass(frozen=True)
class Running:
    url: str
    app: HeaderApp


@pytest.fixture(scope="module")
def server() -> Iterator[Running]:
    app = HeaderApp()
    with serve_app(app, app.started, name="header server") as url:
        yield Running(url, app)


@pytest.mark.asyncio_only("counts under a fixed key of the session's one server")
async def test_every_hedged_copy_sent_over_loopback_carries_the_id(
    server: Running,
) -> None:
    factory = built(
        HttpClientsModule(
            lambda clients: clients.add(
                "catalog", pipeline=HEDGING, base_url=server.url
            ),
            clock=FakeClock(),
        )
    )
    async with factory:
        with correlation_id("loopback-7"):
            response = await factory.async_client("catalog").get("/hedged")
    assert response.text == "ok"
    assert server.app.seen["/hedged"] == ["loopback-7", "loopback-7"]
