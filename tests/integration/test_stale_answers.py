"""Stale answers from a real host that goes down: uvicorn on 127.0.0.1, real httpx.

A stock service answers each user's reads; then it fails (503), and then it
is stopped (connections refused). Through a pipeline with a fallback, a
stale cache and a retry on a `FakeClock`, a read the host answered while it
was up comes back stale, with its ``Age``, to the same user only; past
`max_stale`, or for a read never answered, the fallback speaks (marked as
such); a POST is never answered stale. Async and sync clients alike.
"""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Generator
from contextlib import contextmanager
from dataclasses import dataclass, field

import httpx
import pytest

from http_resilience import (
    Degradation,
    HttpEvent,
    RequestEvent,
    ResiliencePipeline,
    create_async_client,
    create_client,
    degradation,
)
from http_resilience.testing import EventRecorder, FakeClock
from tests.support.fault_server import (
    Message,
    Receive,
    Send,
    read_body,
    run_lifespan,
    serve_app,
)

pytestmark = pytest.mark.anyio

ALICE = {"Authorization": "Bearer alice"}
BOB = {"Authorization": "Bearer bob"}


@dataclass
class Stock:
    """``GET /stock/<sku>``: the user's view of a SKU, the hit number; or 503."""

    started: threading.Event = field(default_factory=threading.Event)
    failing: bool = False
    hits: int = 0

    async def __call__(self, scope: Message, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await run_lifespan(receive, send, self.started)
            return
        await read_body(receive)
        self.hits += 1
        headers = dict(scope["headers"])
        if self.failing:
            status, body = 503, b""
        else:
            user = headers.get(b"authorization", b"anonymous").decode()
            status = 200
            body = json.dumps(
                {"sku": scope["path"], "user": user, "hit": self.hits}
            ).encode()
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                    # No connection outlives its answer, so the port is free
                    # to hold (`refusing`) once the server stops.
                    (b"connection", b"close"),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})


def unknown_stock(
    request: httpx.Request, failure: Exception | httpx.Response
) -> httpx.Response | None:
    if request.method != "GET":
        return None
    return httpx.Response(200, json={"sku": request.url.path, "in_stock": None})


@contextmanager
def refusing(url: str) -> Generator[None, None, None]:
    """Hold the stopped server's port, bound and never listening: refused.

    So that no server another test starts meanwhile answers in its place.
    """
    port = int(url.rsplit(":", 1)[1])
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as held:
        held.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        held.bind(("127.0.0.1", port))
        yield


PIPELINE = (
    ResiliencePipeline()
    .add_fallback(unknown_stock)
    .add_stale_cache(max_stale=120)
    .add_retry(max_retry_attempts=2, base_delay=0)
)


async def test_a_host_that_goes_down_answers_stale_then_falls_back() -> None:
    clock = FakeClock()
    events: EventRecorder[HttpEvent] = EventRecorder()
    async with create_async_client(
        "stock", pipeline=PIPELINE, clock=clock, listeners=[events]
    ) as client:
        app = Stock()
        with serve_app(app, app.started, name="stock service") as url:
            alice = await client.get(f"{url}/stock/42", headers=ALICE)
            bob = await client.get(f"{url}/stock/42", headers=BOB)
            assert (alice.json()["user"], bob.json()["user"]) == (
                "Bearer alice",
                "Bearer bob",
            )
            assert degradation(alice) is None

            app.failing = True
            clock.advance(30)
            hits = app.hits
            stale = await client.get(f"{url}/stock/42", headers=ALICE)
            assert app.hits == hits + 3  # retried first: three attempts, all 503
            assert stale.json() == alice.json()
            assert stale.headers["age"] == "30"
            found = degradation(stale)
            assert found is not None
            assert (found.source, found.reason) == ("stale-cache", "503")
            posted = await client.post(f"{url}/stock/42", headers=ALICE, json={})
            assert posted.status_code == 503  # a write never degrades

        # The host is gone: connections are refused.
        with refusing(url):
            refused = await client.get(f"{url}/stock/42", headers=BOB)
            stranger = await client.get(
                f"{url}/stock/42", headers={"Authorization": "Bearer mallory"}
            )
            clock.advance(120)  # past max_stale
            late = await client.get(f"{url}/stock/42", headers=ALICE)
        assert refused.json()["user"] == "Bearer bob"  # Bob's own entry, not Alice's
        assert degradation(refused) == Degradation("stale-cache", "ConnectError", 30.0)
        assert stranger.json()["in_stock"] is None
        assert degradation(stranger) == Degradation("fallback", "ConnectError")
        assert degradation(late) == Degradation("fallback", "ConnectError")

    ends = [(end.outcome, end.degraded) for end in events.of(RequestEvent)]
    assert ends == [
        ("200", None),
        ("200", None),
        ("200", "stale-cache"),
        ("503", None),
        ("200", "stale-cache"),
        ("200", "fallback"),
        ("200", "fallback"),
    ]


def test_sync_a_host_that_goes_down_answers_stale() -> None:
    clock = FakeClock()
    with create_client("stock", pipeline=PIPELINE, clock=clock) as client:
        app = Stock()
        with serve_app(app, app.started, name="stock service") as url:
            fresh = client.get(f"{url}/stock/7", headers=ALICE)
            app.failing = True
            clock.advance(10)
            stale = client.get(f"{url}/stock/7", headers=ALICE)
            assert stale.json() == fresh.json()
            assert stale.headers["age"] == "10"
            other = client.get(f"{url}/stock/7", headers=BOB)
            assert degradation(other) == Degradation("fallback", "503")
        with refusing(url):
            refused = client.get(f"{url}/stock/7", headers=ALICE)
        assert refused.json() == fresh.json()
        found = degradation(refused)
        assert found is not None
        assert found.reason == "ConnectError"
