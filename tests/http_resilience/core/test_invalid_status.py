"""A status outside 100-599: raised at once, never retried or hedged, no evidence.

Real httpx transports against a raw-socket server on 127.0.0.1 that answers a
status no HTTP server may send, and `httpx.MockTransport` for the statuses h11
would never hand over.
"""

from __future__ import annotations

import socket
import socketserver
import threading
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from http_resilience import (
    AsyncResilientTransport,
    BreakerEvent,
    BrokenCircuitError,
    HedgeEvent,
    HttpEvent,
    ResiliencePipeline,
    ResilientTransport,
    RetryEvent,
)
from http_resilience._core.classify import (
    InvalidStatusError,
    is_classified_failure,
    is_failure,
    is_invalid_status,
)
from http_resilience._core.clock import checkpoint
from http_resilience.testing import EventRecorder, FakeClock
from tests.http_resilience._support.scripted import no_jitter, options
from tests.http_resilience.core.test_self_caused_errors import (
    Counting,
    CountingSync,
)

pytestmark = pytest.mark.anyio

# Retries on, and a breaker that opens on 2 failures in 2: before, each call
# made 4 attempts and the second call opened it.
TOUCHY: dict[str, Any] = {
    "max_retry_attempts": 3,
    "minimum_throughput": 2,
    "failure_ratio": 0.5,
    "break_duration": 30,
}
CALLS = 5


class _Answer(socketserver.BaseRequestHandler):
    line: bytes = b"HTTP/1.1 600 Weird"

    def handle(self) -> None:
        connection: socket.socket = self.request
        received = b""
        while b"\r\n\r\n" not in received:
            chunk = connection.recv(4096)
            if not chunk:
                return
            received += chunk
        connection.sendall(
            self.line + b"\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
        )


@pytest.fixture
def raw_server(request: pytest.FixtureRequest) -> Iterator[str]:
    """A threaded loopback server answering every request with `request.param`."""
    line: bytes = getattr(request, "param", b"HTTP/1.1 600 Weird")
    handler = type("Answer", (_Answer,), {"line": line})
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    thread = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
    )
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def resilient(
    inner: httpx.AsyncBaseTransport, events: EventRecorder[HttpEvent]
) -> AsyncResilientTransport:
    return AsyncResilientTransport(
        inner,
        options=options(**TOUCHY),
        name="inventory",
        clock=FakeClock(),
        listeners=[events],
        random=no_jitter,
    )


def resilient_sync(
    inner: httpx.BaseTransport, events: EventRecorder[HttpEvent]
) -> ResilientTransport:
    return ResilientTransport(
        inner,
        options=options(**TOUCHY),
        name="inventory",
        clock=FakeClock(),
        listeners=[events],
        random=no_jitter,
    )


async def test_a_600_from_a_real_server_is_raised_at_once_and_opens_nothing(
    raw_server: str,
) -> None:
    events, counting = EventRecorder[HttpEvent](), Counting(httpx.AsyncHTTPTransport())
    async with httpx.AsyncClient(transport=resilient(counting, events)) as client:
        for _ in range(CALLS - 1):
            counting.attempts = 0
            with pytest.raises(InvalidStatusError):
                await client.get(f"{raw_server}/stock")
            assert counting.attempts == 1
        with pytest.raises(InvalidStatusError) as raised:
            await client.get(f"{raw_server}/stock")
    assert counting.attempts == 2
    assert str(raised.value) == (
        f"GET {raw_server}: the server answered status 600, outside 100-599"
    )
    assert raised.value.status_code == 600
    assert isinstance(raised.value, httpx.RemoteProtocolError)
    assert events.of(RetryEvent) == []
    assert events.of(BreakerEvent) == []


def test_a_600_on_the_sync_transport_is_raised_at_once_too(raw_server: str) -> None:
    events, counting = EventRecorder[HttpEvent](), CountingSync(httpx.HTTPTransport())
    with httpx.Client(transport=resilient_sync(counting, events)) as client:
        for _ in range(CALLS):
            counting.attempts = 0
            with pytest.raises(InvalidStatusError, match=r"status 600, outside"):
                client.get(f"{raw_server}/stock")
            assert counting.attempts == 1
    assert events.of(RetryEvent) == []
    assert events.of(BreakerEvent) == []


@pytest.mark.parametrize("raw_server", [b"HTTP/1.1 099 Low"], indirect=True)
async def test_a_status_below_100_that_h11_refuses_is_raised_at_once(
    raw_server: str,
) -> None:
    events, counting = EventRecorder[HttpEvent](), Counting(httpx.AsyncHTTPTransport())
    async with httpx.AsyncClient(transport=resilient(counting, events)) as client:
        for _ in range(CALLS):
            counting.attempts = 0
            with pytest.raises(
                httpx.RemoteProtocolError,
                match=r"status_code should be in range \[100, 200\), not 99",
            ):
                await client.get(f"{raw_server}/stock")
            assert counting.attempts == 1
    assert events.of(BreakerEvent) == []


@pytest.mark.parametrize("raw_server", [b"HTTP/1.1 abc Odd"], indirect=True)
async def test_a_status_line_that_is_no_status_line_stays_a_broken_answer(
    raw_server: str,
) -> None:
    # Garbage where the status line goes is a broken connection as any other:
    # retried, and evidence. Only a well-formed status out of range is final.
    events, counting = EventRecorder[HttpEvent](), Counting(httpx.AsyncHTTPTransport())
    async with httpx.AsyncClient(transport=resilient(counting, events)) as client:
        # Two broken answers open the touchy breaker, which refuses the third.
        with pytest.raises(BrokenCircuitError, match="circuit open"):
            await client.get(f"{raw_server}/stock")
    assert counting.attempts == 2
    assert [event.reason for event in events.of(RetryEvent)] == [
        "RemoteProtocolError",
        "RemoteProtocolError",
    ]
    assert [event.current for event in events.of(BreakerEvent)] == ["open"]


@pytest.mark.parametrize("status", [0, 99, 600, 999, 1000, 70000])
async def test_any_status_outside_100_599_from_a_transport_is_final(
    status: int,
) -> None:
    events, attempts = EventRecorder[HttpEvent](), [0]

    def answer(request: httpx.Request) -> httpx.Response:
        attempts[0] += 1
        return httpx.Response(status)

    transport = resilient(httpx.MockTransport(answer), events)
    async with httpx.AsyncClient(transport=transport) as client:
        for _ in range(CALLS):
            with pytest.raises(InvalidStatusError, match=f"status {status},"):
                await client.get("http://inventory.local/stock")
    assert attempts[0] == CALLS
    assert events.of(BreakerEvent) == []


def test_the_sync_transport_holds_a_mock_600_final_too() -> None:
    events, attempts = EventRecorder[HttpEvent](), [0]

    def answer(request: httpx.Request) -> httpx.Response:
        attempts[0] += 1
        return httpx.Response(600)

    transport = resilient_sync(httpx.MockTransport(answer), events)
    with httpx.Client(transport=transport) as client:
        for _ in range(CALLS):
            with pytest.raises(InvalidStatusError):
                client.get("http://inventory.local/stock")
    assert attempts[0] == CALLS
    assert events.of(BreakerEvent) == []


async def test_a_600_launches_no_hedge() -> None:
    events, attempts = EventRecorder[HttpEvent](), [0]

    async def answer(request: httpx.Request) -> httpx.Response:
        attempts[0] += 1
        await checkpoint()
        return httpx.Response(600)

    pipeline = ResiliencePipeline().add_hedging(delay=60.0, max_hedged_attempts=2)
    transport = AsyncResilientTransport(
        httpx.MockTransport(answer),
        pipeline=pipeline,
        name="catalog",
        listeners=[events],
    )
    async with httpx.AsyncClient(transport=transport) as client:
        with pytest.raises(InvalidStatusError):
            await client.get("http://catalog.local/items")
    assert attempts[0] == 1
    assert events.of(HedgeEvent) == []


def test_a_classifier_cannot_make_an_invalid_status_a_failure() -> None:
    request = httpx.Request("GET", "http://inventory.local/stock")
    invalid = InvalidStatusError("600", request=request, status_code=600)
    from_h11 = httpx.RemoteProtocolError(
        "InformationalResponse status_code should be in range [100, 200), not 7"
    )
    table = tuple(True for _ in range(600))
    for error in (invalid, from_h11):
        assert is_invalid_status(error)
        assert not is_failure(error)
        assert not is_classified_failure(error, table, lambda outcome: True)
    dead = httpx.RemoteProtocolError("Server disconnected without sending a response.")
    assert not is_invalid_status(dead)
    assert is_failure(dead)
    assert is_classified_failure(dead, table, None)
