"""A cancelled attempt never costs the client a connection slot for ever.

httpcore 1.0.9 (encode/httpcore#1093) loses a pool slot when a request is
cancelled between being handed a new connection and beginning its request on
it. The pipeline cancels attempts all the time (an attempt timeout's cut, a
hedge's loser, the caller), so a resilient client sweeps the pool after every
failed attempt (`http_resilience._core.pool`). Each test puts a one-slot pool
in one of the two losing states, deterministically (a trace hook cancels the
task at the exact step), then makes a call to a healthy real server: with the
slot lost, that call waits for the pool in vain and fails with PoolTimeout.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import httpcore
import httpx
import pytest

from http_resilience import (
    AsyncResilientTransport,
    ResiliencePipeline,
    ResilientTransport,
)
from http_resilience._core.pool import pool_sweeper
from tests.support.fault_server import FaultServer, free_port

pytestmark = pytest.mark.anyio

ONE_SLOT = httpx.Limits(max_connections=1, max_keepalive_connections=1)
# How long the healthy call may wait for the pool's one slot: with the slot
# lost it waits all of it, in vain.
POOL_WAIT = 2.0
Trace = Callable[[str, dict[str, Any]], Awaitable[None]]


def resilient(inner: httpx.AsyncHTTPTransport) -> httpx.AsyncClient:
    # No strategy: the httpx timeouts below are the client's own.
    return httpx.AsyncClient(
        transport=AsyncResilientTransport(inner, pipeline=ResiliencePipeline()),
        timeout=httpx.Timeout(5.0, pool=POOL_WAIT),
    )


def on(event: str, action: Callable[[], object]) -> dict[str, Trace]:
    """A request's trace extension that runs `action` at httpcore's `event`."""

    async def trace(name: str, info: dict[str, Any]) -> None:
        if name == event:
            action()

    return {"trace": trace}


def cancel_current() -> None:
    task = asyncio.current_task()
    assert task is not None
    task.cancel()


async def healthy_call_gets_the_slot(
    client: httpx.AsyncClient, server: FaultServer
) -> None:
    response = await client.get(f"{server.url}/healthy")
    assert response.status_code == 200


async def test_a_waiter_cancelled_as_it_is_handed_a_new_connection(
    fault_server: FaultServer,
) -> None:
    # The first call's connect is refused. On its way out the pool makes a new
    # connection for the one waiting behind it, which was cancelled meanwhile:
    # that connection never connects, and no request holds it.
    refused = f"http://127.0.0.1:{free_port()}/"
    async with resilient(httpx.AsyncHTTPTransport(limits=ONE_SLOT)) as client:
        waiter = asyncio.create_task(client.get(refused))
        first = client.get(
            refused, extensions=on("connection.connect_tcp.failed", waiter.cancel)
        )
        with pytest.raises(httpx.ConnectError):
            await first
        with pytest.raises(asyncio.CancelledError):
            await waiter
        await healthy_call_gets_the_slot(client, fault_server)


async def test_a_call_cancelled_between_its_connect_and_its_request(
    fault_server: FaultServer,
) -> None:
    # Connected, then cancelled before the request began on the connection:
    # it stays in HTTP/1.1's NEW state, neither idle nor closed.
    async with resilient(httpx.AsyncHTTPTransport(limits=ONE_SLOT)) as client:
        call = asyncio.create_task(
            client.get(
                f"{fault_server.url}/healthy",
                extensions=on("connection.connect_tcp.complete", cancel_current),
            )
        )
        with pytest.raises(asyncio.CancelledError):
            await call
        await healthy_call_gets_the_slot(client, fault_server)


async def test_a_subclass_of_httpx_transport_is_swept_too(
    fault_server: FaultServer,
) -> None:
    class Counting(httpx.AsyncHTTPTransport):
        sent = 0

        async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
            Counting.sent += 1
            return await super().handle_async_request(request)

    async with resilient(Counting(limits=ONE_SLOT)) as client:
        call = asyncio.create_task(
            client.get(
                f"{fault_server.url}/healthy",
                extensions=on("connection.connect_tcp.complete", cancel_current),
            )
        )
        with pytest.raises(asyncio.CancelledError):
            await call
        await healthy_call_gets_the_slot(client, fault_server)
    assert Counting.sent == 2


def test_the_sync_transport_sweeps_after_a_failed_attempt(
    fault_server: FaultServer,
) -> None:
    # A sync request is never cancelled, but its pool wait can time out just
    # as it is handed a new connection. Planted here: a connection made for a
    # request that has gone.
    inner = httpx.HTTPTransport(limits=ONE_SLOT)
    with httpx.Client(
        transport=ResilientTransport(inner, pipeline=ResiliencePipeline()),
        timeout=httpx.Timeout(5.0, pool=0.2),
    ) as client:
        pool: Any = getattr(inner, "_pool")  # the planted orphan's  # noqa: B009
        url = httpx.URL(fault_server.url)
        origin = httpcore.Origin(b"http", url.raw_host, url.port or 80)
        pool._connections.append(pool.create_connection(origin))
        with pytest.raises(httpx.PoolTimeout):
            client.get(f"{fault_server.url}/healthy")
        assert client.get(f"{fault_server.url}/healthy").status_code == 200


def test_httpcore_still_has_the_internals_the_sweep_reads() -> None:
    # A new httpcore that renames them turns the sweep off, silently in use;
    # this says so here first.
    assert pool_sweeper(httpx.AsyncHTTPTransport()) is not None
    assert pool_sweeper(httpx.HTTPTransport()) is not None


def test_other_transports_are_not_swept() -> None:
    mock = httpx.MockTransport(lambda request: httpx.Response(200))
    assert pool_sweeper(mock) is None
