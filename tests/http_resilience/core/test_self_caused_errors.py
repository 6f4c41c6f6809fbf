"""Errors the client causes itself: raised at once, never retried, hedged or
held against the host; statuses outside 100-599 surface as a protocol error.

Real httpx transports against the real fault server on 127.0.0.1.
"""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

from http_resilience import (
    AsyncResilientTransport,
    BreakerEvent,
    HedgeEvent,
    HttpEvent,
    RateLimitedError,
    ResiliencePipeline,
    ResilientTransport,
    TimeoutEvent,
)
from http_resilience.testing import EventRecorder, FakeClock
from tests.http_resilience._support.scripted import no_jitter, options
from tests.support.fault_server import FaultServer

pytestmark = pytest.mark.anyio

# A breaker that opens on 2 failures in 2: three counted failures open it.
TOUCHY: dict[str, Any] = {
    "max_retry_attempts": 3,
    "minimum_throughput": 2,
    "failure_ratio": 0.5,
    "break_duration": 30,
}
BAD_HEADER = {"x-trace": "a\r\nInjected: yes"}  # h11 refuses to send it


class Counting(httpx.AsyncBaseTransport):
    """The real async transport, counting the attempts handed to it."""

    def __init__(self, inner: httpx.AsyncBaseTransport) -> None:
        self.inner = inner
        self.attempts = 0

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.attempts += 1
        return await self.inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self.inner.aclose()


class CountingSync(httpx.BaseTransport):
    """The real sync transport, counting the attempts handed to it."""

    def __init__(self, inner: httpx.BaseTransport) -> None:
        self.inner = inner
        self.attempts = 0

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        self.attempts += 1
        return self.inner.handle_request(request)

    def close(self) -> None:
        self.inner.close()


def resilient(
    inner: httpx.AsyncBaseTransport, events: EventRecorder[HttpEvent], **values: Any
) -> AsyncResilientTransport:
    return AsyncResilientTransport(
        inner,
        options=options(**(TOUCHY | values)),
        name="inventory",
        clock=FakeClock(),
        listeners=[events],
        random=no_jitter,
    )


async def test_a_header_h11_refuses_is_raised_once_and_never_opens_the_breaker(
    fault_server: FaultServer,
) -> None:
    events, counting = EventRecorder[HttpEvent](), Counting(httpx.AsyncHTTPTransport())
    async with httpx.AsyncClient(transport=resilient(counting, events)) as client:
        for _ in range(10):
            counting.attempts = 0
            with pytest.raises(httpx.LocalProtocolError):
                await client.get(f"{fault_server.url}/healthy", headers=BAD_HEADER)
            assert counting.attempts == 1
        answer = await client.get(f"{fault_server.url}/healthy?key=self-caused-h11")
    assert answer.status_code == 200
    assert events.of(BreakerEvent) == []


@pytest.mark.parametrize(
    ("url", "base_url"),
    [("ftp://127.0.0.1:21/file", ""), ("/healthy", "")],
    ids=["ftp-scheme", "relative-without-base-url"],
)
async def test_an_unsupported_url_is_raised_once_and_never_opens_the_breaker(
    fault_server: FaultServer, url: str, base_url: str
) -> None:
    events, counting = EventRecorder[HttpEvent](), Counting(httpx.AsyncHTTPTransport())
    # One breaker for every host: a per-host breaker would hide the evidence.
    transport = resilient(counting, events, breaker_per_host=False)
    async with httpx.AsyncClient(transport=transport, base_url=base_url) as client:
        for _ in range(10):
            counting.attempts = 0
            with pytest.raises(httpx.UnsupportedProtocol):
                await client.get(url)
            assert counting.attempts == 1
        answer = await client.get(f"{fault_server.url}/healthy?key=self-caused-url")
    assert answer.status_code == 200
    assert events.of(BreakerEvent) == []


async def test_a_wait_on_the_own_pool_is_raised_once_and_never_opens_the_breaker(
    fault_server: FaultServer,
) -> None:
    events = EventRecorder[HttpEvent]()
    one = httpx.AsyncHTTPTransport(limits=httpx.Limits(max_connections=1))
    counting = Counting(one)
    pool_wait = httpx.Timeout(5.0, pool=0.01)
    # The caller's own timeouts: httpx's `PoolTimeout` passes as it is. When
    # the pipeline owns time, the wait is its own refusal (test_pool_wait.py).
    transport = resilient(counting, events, own_transport_timeout=False)
    async with httpx.AsyncClient(transport=transport, timeout=pool_wait) as client:
        held = client.stream("GET", f"{fault_server.url}/healthy?key=self-caused-pool")
        async with held as holding:  # its connection stays taken until closed
            assert holding.status_code == 200
            for _ in range(4):
                counting.attempts = 0
                with pytest.raises(httpx.PoolTimeout):
                    await client.get(f"{fault_server.url}/healthy?key=self-caused-pool")
                assert counting.attempts == 1
        answer = await client.get(f"{fault_server.url}/healthy?key=self-caused-pool")
    assert answer.status_code == 200
    assert events.of(BreakerEvent) == []


# The pipeline owns time (the default): the total timeout bounds each wait for the
# one connection, which a streamed response holds (the attempt timeout only runs
# once the attempt has a connection). The wait ends as the pool's refusal,
# `RateLimitedError`, whether httpx's pool timeout (POOL_LEAD sooner) or the
# pipeline's cut ended it.
OWNED = {"attempt_timeout": 1.0, "total_request_timeout": 1.5}


class CountingHTTP(httpx.HTTPTransport):
    """A real sync transport (its sockets held to the deadline), counting attempts."""

    attempts = 0

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        self.attempts += 1
        return super().handle_request(request)


async def wait_out_the_own_pool(
    transport: httpx.AsyncBaseTransport, counting: Counting, url: str
) -> None:
    async with httpx.AsyncClient(transport=transport) as client:
        async with client.stream("GET", url) as holding:
            assert holding.status_code == 200
            for _ in range(2):
                counting.attempts = 0
                with pytest.raises(RateLimitedError, match="own pool came free"):
                    await client.get(url)
                assert counting.attempts == 1
        answer = await client.get(url)
    assert answer.status_code == 200


async def test_a_pool_wait_that_runs_the_total_out_is_refused_locally(
    fault_server: FaultServer,
) -> None:
    events = EventRecorder[HttpEvent]()
    one = httpx.AsyncHTTPTransport(limits=httpx.Limits(max_connections=1))
    counting = Counting(one)
    url = f"{fault_server.url}/healthy?key=self-caused-pool-owned"
    await wait_out_the_own_pool(resilient(counting, events, **OWNED), counting, url)
    assert events.of(BreakerEvent) == []
    assert events.of(TimeoutEvent) == []


async def test_a_pool_wait_that_runs_a_lone_total_timeout_out_is_refused(
    fault_server: FaultServer,
) -> None:
    # No attempt timeout: the total timeout around the retry bounds the attempt.
    pipeline = (
        ResiliencePipeline()
        .add_timeout(1.0)
        .add_retry(max_retry_attempts=3)
        .add_breaker(minimum_throughput=2, failure_ratio=0.5, break_duration=30)
    )
    events = EventRecorder[HttpEvent]()
    one = httpx.AsyncHTTPTransport(limits=httpx.Limits(max_connections=1))
    counting = Counting(one)
    transport = AsyncResilientTransport(
        counting,
        pipeline=pipeline,
        name="inventory",
        clock=FakeClock(),
        listeners=[events],
        random=no_jitter,
    )
    url = f"{fault_server.url}/healthy?key=self-caused-pool-total"
    await wait_out_the_own_pool(transport, counting, url)
    assert events.of(BreakerEvent) == []
    assert events.of(TimeoutEvent) == []


def test_a_sync_pool_wait_that_runs_the_total_out_is_refused_locally(
    fault_server: FaultServer,
) -> None:
    events = EventRecorder[HttpEvent]()
    counting = CountingHTTP(limits=httpx.Limits(max_connections=1))
    transport = ResilientTransport(
        counting,
        options=options(**(TOUCHY | OWNED)),
        name="inventory",
        clock=FakeClock(),
        listeners=[events],
        random=no_jitter,
    )
    url = f"{fault_server.url}/healthy?key=self-caused-pool-sync"
    with httpx.Client(transport=transport) as client:
        with client.stream("GET", url) as holding:
            assert holding.status_code == 200
            for _ in range(2):
                counting.attempts = 0
                with pytest.raises(RateLimitedError, match="own pool came free"):
                    client.get(url)
                assert counting.attempts == 1
        answer = client.get(url)
    assert answer.status_code == 200
    assert events.of(BreakerEvent) == []
    assert events.of(TimeoutEvent) == []


def test_the_sync_transport_neither_retries_nor_blames_the_host(
    fault_server: FaultServer,
) -> None:
    events, counting = EventRecorder[HttpEvent](), CountingSync(httpx.HTTPTransport())
    transport = ResilientTransport(
        counting,
        options=options(**TOUCHY),
        name="inventory",
        clock=FakeClock(),
        listeners=[events],
        random=no_jitter,
    )
    with httpx.Client(transport=transport) as client:
        for _ in range(10):
            counting.attempts = 0
            with pytest.raises(httpx.LocalProtocolError):
                client.get(f"{fault_server.url}/healthy", headers=BAD_HEADER)
            assert counting.attempts == 1
        answer = client.get(f"{fault_server.url}/healthy?key=self-caused-sync")
    assert answer.status_code == 200
    assert events.of(BreakerEvent) == []


async def test_a_self_caused_error_launches_no_hedge(fault_server: FaultServer) -> None:
    events, counting = EventRecorder[HttpEvent](), Counting(httpx.AsyncHTTPTransport())
    # The real clock: the delay is never reached, the attempt fails first (a
    # fake clock's sleep would end at once and hedge before the connection).
    pipeline = ResiliencePipeline().add_hedging(delay=60.0, max_hedged_attempts=2)
    transport = AsyncResilientTransport(
        counting, pipeline=pipeline, name="catalog", listeners=[events]
    )
    async with httpx.AsyncClient(transport=transport) as client:
        with pytest.raises(httpx.LocalProtocolError):
            await client.get(f"{fault_server.url}/healthy", headers=BAD_HEADER)
    assert counting.attempts == 1
    assert events.of(HedgeEvent) == []


# --- statuses outside 100-599 --------------------------------------------------------


async def serve_raw_status(status: int) -> tuple[asyncio.Server, str]:
    """A loopback server that answers every request with a bare `status` line."""

    async def answer(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(
            f"HTTP/1.1 {status} Odd\r\nContent-Length: 0\r\n"
            "Connection: close\r\n\r\n".encode()
        )
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    return server, f"http://127.0.0.1:{port}"


@pytest.mark.asyncio_only("its helpers use asyncio.Server, asyncio.StreamReader")
async def test_a_status_above_599_from_a_real_server_is_a_protocol_error() -> None:
    server, url = await serve_raw_status(600)
    events, counting = EventRecorder[HttpEvent](), Counting(httpx.AsyncHTTPTransport())
    try:
        transport = resilient(counting, events, max_retry_attempts=0)
        async with httpx.AsyncClient(transport=transport) as client:
            with pytest.raises(httpx.RemoteProtocolError, match="status 600"):
                await client.get(f"{url}/stock")
    finally:
        server.close()
        await server.wait_closed()
    assert counting.attempts == 1


@pytest.mark.parametrize("status", [99, 600, 999])
def test_a_status_outside_100_599_is_never_taken_for_a_5xx(status: int) -> None:
    # h11 itself refuses a status below 100 on the wire; a transport that is
    # no HTTP/1.1 parser can still hand one over.
    transport = ResilientTransport(
        httpx.MockTransport(lambda request: httpx.Response(status)),
        options=options(max_retry_attempts=0),
        name="inventory",
        clock=FakeClock(),
    )
    with (
        httpx.Client(transport=transport) as client,
        pytest.raises(httpx.RemoteProtocolError, match=f"status {status},") as raised,
    ):
        client.get("http://inventory.local/stock?token=planted-secret")
    assert "planted-secret" not in str(raised.value)
