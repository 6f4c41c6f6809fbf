"""The wrapped transport's context manager is entered and exited with ours.

A transport of your own that takes a resource in ``__enter__`` and gives it
back in ``__exit__`` keeps it working behind a resilient transport: ``with
ResilientTransport(inner)`` and ``with httpx.Client(transport=...)`` enter
and exit it, once each; ``close()`` alone still closes it, once.
"""

from __future__ import annotations

from types import TracebackType
from typing import Self

import httpx
import pytest

from http_resilience import (
    AsyncResilientTransport,
    ResilientTransport,
    create_async_client,
    create_client,
)
from http_resilience.testing import FakeClock
from tests.http_resilience._support.scripted import URL
from tests.support.fault_server import FaultServer

pytestmark = pytest.mark.anyio


class Recording(httpx.BaseTransport):
    """A sync transport that records its context, its close and its requests."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def __enter__(self) -> Self:
        self.calls.append("enter")
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None = None,
        exc_value: BaseException | None = None,
        traceback: TracebackType | None = None,
    ) -> None:
        self.calls.append("exit" if exc_type is None else f"exit {exc_type.__name__}")

    def close(self) -> None:
        self.calls.append("close")

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        self.calls.append("request")
        return httpx.Response(200)


class AsyncRecording(httpx.AsyncBaseTransport):
    """`Recording`'s async twin."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    async def __aenter__(self) -> Self:
        self.calls.append("enter")
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None = None,
        exc_value: BaseException | None = None,
        traceback: TracebackType | None = None,
    ) -> None:
        self.calls.append("exit" if exc_type is None else f"exit {exc_type.__name__}")

    async def aclose(self) -> None:
        self.calls.append("close")

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.calls.append("request")
        return httpx.Response(200)


def sync_of(inner: httpx.BaseTransport) -> ResilientTransport:
    return ResilientTransport(inner, clock=FakeClock())


def async_of(inner: httpx.AsyncBaseTransport) -> AsyncResilientTransport:
    return AsyncResilientTransport(inner, clock=FakeClock())


# --- sync ------------------------------------------------------------------------


def test_with_the_transport_enters_and_exits_the_inner_one() -> None:
    inner = Recording()
    with sync_of(inner) as transport:
        assert isinstance(transport, ResilientTransport)
        transport.handle_request(httpx.Request("GET", URL))
    assert inner.calls == ["enter", "request", "exit"]


def test_the_inner_one_is_told_of_the_exception_that_left_the_block() -> None:
    inner = Recording()
    with pytest.raises(KeyError), sync_of(inner):
        raise KeyError("boom")
    assert inner.calls == ["enter", "exit KeyError"]


def test_a_client_used_as_a_context_manager_enters_the_inner_one() -> None:
    inner = Recording()
    with httpx.Client(transport=sync_of(inner)) as client:
        assert client.get(URL).status_code == 200
    assert inner.calls == ["enter", "request", "exit"]


def test_close_alone_still_closes_the_inner_one_once() -> None:
    inner = Recording()
    client = httpx.Client(transport=sync_of(inner))
    client.get(URL)
    client.close()
    client.close()
    assert inner.calls == ["request", "close"]


def test_each_is_used_at_most_once() -> None:
    inner = Recording()
    transport = sync_of(inner)
    with transport, transport:  # entered twice: the inner one once
        pass
    transport.__exit__(None, None, None)
    transport.close()  # its context was exited, which closed it
    assert inner.calls == ["enter", "exit"]


def test_closing_inside_the_block_closes_and_the_block_still_exits() -> None:
    # As httpx's client does with its own transport.
    inner = Recording()
    with httpx.Client(transport=sync_of(inner)) as client:
        client.close()
    assert inner.calls == ["enter", "close", "exit"]


def test_an_exit_never_entered_closes_as_httpx_s_transports_do() -> None:
    inner = Recording()
    transport = sync_of(inner)
    transport.__exit__(None, None, None)
    transport.close()
    assert inner.calls == ["close"]


def test_a_factory_client_enters_its_inner_transport_and_its_mounts() -> None:
    main, mounted = Recording(), Recording()
    with create_client(
        "inventory",
        transport=main,
        mounts={"http://other.example": mounted},
        clock=FakeClock(),
    ) as client:
        client.get(URL)
        client.get("http://other.example/")
    assert main.calls == ["enter", "request", "exit"]
    assert mounted.calls == ["enter", "request", "exit"]


def test_a_real_httpx_transport_s_pool_is_closed_by_the_block(
    fault_server: FaultServer,
) -> None:
    inner = httpx.HTTPTransport()
    # httpcore's pool, whose connections are public.
    pool = inner._pool  # pyright: ignore[reportPrivateUsage]
    with httpx.Client(transport=sync_of(inner)) as client:
        client.get(f"{fault_server.url}/status/200?key=inner-context-pool")
        assert len(pool.connections) == 1
    assert pool.connections == []


# --- async -----------------------------------------------------------------------


async def test_async_with_the_transport_enters_and_exits_the_inner_one() -> None:
    inner = AsyncRecording()
    async with async_of(inner) as transport:
        assert isinstance(transport, AsyncResilientTransport)
        await transport.handle_async_request(httpx.Request("GET", URL))
    assert inner.calls == ["enter", "request", "exit"]


async def test_an_async_client_as_a_context_manager_enters_the_inner_one() -> None:
    inner = AsyncRecording()
    async with httpx.AsyncClient(transport=async_of(inner)) as client:
        assert (await client.get(URL)).status_code == 200
    assert inner.calls == ["enter", "request", "exit"]


async def test_aclose_alone_still_closes_the_inner_one_once() -> None:
    inner = AsyncRecording()
    client = httpx.AsyncClient(transport=async_of(inner))
    await client.get(URL)
    await client.aclose()
    await client.aclose()
    assert inner.calls == ["request", "close"]


async def test_each_async_one_is_used_at_most_once() -> None:
    inner = AsyncRecording()
    transport = async_of(inner)
    async with transport, transport:
        pass
    await transport.__aexit__(None, None, None)
    await transport.aclose()
    assert inner.calls == ["enter", "exit"]


async def test_an_async_exit_never_entered_closes() -> None:
    inner = AsyncRecording()
    transport = async_of(inner)
    await transport.__aexit__(None, None, None)
    await transport.aclose()
    assert inner.calls == ["close"]


async def test_an_async_factory_client_enters_its_inner_transport() -> None:
    inner = AsyncRecording()
    async with create_async_client(
        "inventory", transport=inner, clock=FakeClock()
    ) as client:
        await client.get(URL)
    assert inner.calls == ["enter", "request", "exit"]
