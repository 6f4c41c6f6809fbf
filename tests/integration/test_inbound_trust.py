"""Trust at the edge: an untrusted caller's context headers never travel on.

An edge service runs under uvicorn on 127.0.0.1 behind both context
middlewares, each given the same `trusted` check: the peer's address, in
the service's own network (here 127.0.0.1/32). Its handler calls a second
local server, a dependency that records what each request carried, through a
factory client that sends the mediator's correlation id. A caller connecting
from 127.0.0.2 (loopback too, but outside that network) sends a deadline, a
retry marker and a correlation id: the dependency sees none of them, but the
service's own default deadline and a fresh id, the one the caller was
answered with; and the service retries its own call, as for a first attempt.
The same headers from 127.0.0.1 are honoured. Both packages read the
correlation header by one rule, and refuse the same ids with one message.
"""

from __future__ import annotations

import ipaddress
import threading
import uuid
from collections.abc import Awaitable, Callable, Iterator, MutableMapping
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import http_resilience
import mediator
from http_resilience import (
    HttpClientFactory,
    HttpResilienceOptions,
    ResilienceContextMiddleware,
)
from http_resilience.testing import FakeClock
from mediator.asgi import RequestContextMiddleware
from tests.support.fault_server import run_lifespan, serve_app

pytestmark = pytest.mark.anyio

# The middlewares' own ASGI types; the fault server's are narrower (dicts).
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

SERVICE_NETWORK = ipaddress.ip_network("127.0.0.1/32")
UNTRUSTED_PEER = "127.0.0.2"
# Seconds: under the 10 s attempt timeout, whose time an attempt's header
# would otherwise say.
DEFAULT_DEADLINE = 5
FROM_A_CALLER = {
    "X-Request-Timeout-Ms": "1500",
    "X-Retry-Attempt": "2",
    "X-Correlation-ID": "order-42",
}


def from_the_service_network(scope: Message) -> bool:
    peer = scope.get("client")
    return peer is not None and ipaddress.ip_address(peer[0]) in SERVICE_NETWORK


@dataclass
class Dependency:
    """``/ok`` answers 200, ``/down`` 503; every request's headers are kept."""

    started: threading.Event = field(default_factory=threading.Event)
    seen: list[tuple[str, httpx.Headers]] = field(
        default_factory=list[tuple[str, httpx.Headers]]
    )

    async def __call__(self, scope: Message, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await run_lifespan(receive, send, self.started)  # type: ignore[arg-type]
            return
        self.seen.append((scope["path"], httpx.Headers(scope["headers"])))
        status = 200 if scope["path"] == "/ok" else 503
        await send({"type": "http.response.start", "status": status, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    def of(self, path: str) -> list[httpx.Headers]:
        return [headers for seen, headers in self.seen if seen == path]


@dataclass
class Edge:
    """The edge service's handler: it calls ``/ok`` once, then ``/down`` once."""

    dependency_url: str
    started: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        self.clients = HttpClientFactory(
            lambda clients: clients.add(
                "dependency",
                # Waits far shorter than any deadline: every retry is made.
                HttpResilienceOptions(base_delay=0.001),
                base_url=self.dependency_url,
            ),
            clock=FakeClock(),  # and they pass at once
            correlation=mediator.current_correlation_id,
        )

    async def __call__(self, scope: Message, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await run_lifespan(receive, send, self.started)  # type: ignore[arg-type]
            await self.clients.aclose()
            return
        client = self.clients.async_client("dependency")
        await client.get("/ok")
        await client.get("/down")
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"done"})


@dataclass
class Running:
    url: str
    dependency: Dependency


@pytest.fixture(scope="module")
def edge() -> Iterator[Running]:
    dependency = Dependency()
    served_dependency: Any = dependency
    with serve_app(served_dependency, dependency.started, name="dependency") as dep_url:
        handler = Edge(dep_url)
        app = RequestContextMiddleware(
            ResilienceContextMiddleware(
                handler,
                trusted=from_the_service_network,
                default_deadline=DEFAULT_DEADLINE,
            ),
            trusted=from_the_service_network,
        )
        served: Any = app
        with serve_app(served, handler.started, name="edge service") as url:
            yield Running(url, dependency)


async def call_edge(
    edge: Running, *, local_address: str | None = None
) -> httpx.Response:
    edge.dependency.seen.clear()
    transport = httpx.AsyncHTTPTransport(local_address=local_address)
    async with httpx.AsyncClient(transport=transport, base_url=edge.url) as client:
        answer = await client.get("/orders/7", headers=FROM_A_CALLER)
    assert answer.status_code == 200
    return answer


def deadline_ms(headers: httpx.Headers) -> int:
    return int(headers["x-request-timeout-ms"])


async def test_an_untrusted_callers_headers_do_not_reach_the_dependency(
    edge: Running,
) -> None:
    answer = await call_edge(edge, local_address=UNTRUSTED_PEER)
    echoed = answer.headers["x-correlation-id"]
    assert echoed != "order-42"
    assert uuid.UUID(echoed).version == 4  # made by the mediator's middleware
    [ok] = edge.dependency.of("/ok")
    assert "x-retry-attempt" not in ok
    assert ok["x-correlation-id"] == echoed
    # The service's default deadline, not the caller's 1.5 s (bounds that hold
    # however long a busy machine takes between arrival and the call).
    assert 1500 < deadline_ms(ok) <= DEFAULT_DEADLINE * 1000
    # No retry marker was believed: the service retries its own failing call.
    down = edge.dependency.of("/down")
    assert [headers.get("x-retry-attempt") for headers in down] == [
        None,
        "2",
        "3",
        "4",
    ]
    assert {headers["x-correlation-id"] for headers in down} == {echoed}


async def test_a_trusted_callers_headers_are_honoured(edge: Running) -> None:
    answer = await call_edge(edge)
    assert answer.headers["x-correlation-id"] == "order-42"
    [ok] = edge.dependency.of("/ok")
    assert ok["x-correlation-id"] == "order-42"
    assert "x-retry-attempt" not in ok
    # The caller's deadline less the 50 ms margin and the time spent since;
    # not the service's default.
    assert 0 < deadline_ms(ok) <= 1450
    # The caller is retrying: the service makes one attempt, not four.
    down = edge.dependency.of("/down")
    assert [headers["x-correlation-id"] for headers in down] == ["order-42"]


async def test_an_id_sent_twice_is_refused_by_both_middlewares_alike(
    edge: Running,
) -> None:
    edge.dependency.seen.clear()
    async with httpx.AsyncClient(base_url=edge.url) as client:
        answer = await client.get(
            "/orders/7",
            headers=[("X-Correlation-ID", "audit-id"), ("X-Correlation-ID", "call-id")],
        )
    echoed = answer.headers["x-correlation-id"]
    assert echoed not in ("audit-id", "call-id")
    [ok] = edge.dependency.of("/ok")
    assert ok["x-correlation-id"] == echoed


CANDIDATE_IDS = st.one_of(
    st.text(max_size=210),
    st.text(alphabet=[chr(code) for code in range(0x00, 0x80)], max_size=210),
    st.sampled_from(["a,b", "a, b", "x" * 200, "x" * 201, "id\r\nX-Admin: 1", ""]),
)


def refusal(set_id: object, value: str) -> str | None:
    try:
        with set_id(value):  # type: ignore[operator]
            return None
    except ValueError as error:
        return str(error)


@settings(max_examples=300, deadline=None)
@given(value=CANDIDATE_IDS)
def test_both_packages_take_and_refuse_the_same_ids_with_one_message(
    value: str,
) -> None:
    refused = refusal(mediator.correlation_id, value)
    assert refused == refusal(http_resilience.correlation_id, value)
    visible = 1 <= len(value) <= 200 and all(
        "!" <= char <= "~" and char != "," for char in value
    )
    assert (refused is None) == visible
