"""Response bodies: buffered inside the attempt, or watched for a stall after it.

Off by default: the body is read after the call returns, as httpx does. On,
a body that breaks half-way is one more failed attempt, and the retry sends
again; a body past `max_buffered_bytes` fails the call, not retried.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import httpx
import pytest

from http_resilience import AttemptStalledError, ResponseTooLargeError
from http_resilience.testing import FakeClock
from tests.http_resilience.scripted import URL, async_transport, sync_transport

pytestmark = pytest.mark.anyio


class Breaking(httpx.SyncByteStream, httpx.AsyncByteStream):
    """A JSON body that breaks half-way when `broken`."""

    def __init__(self, broken: bool) -> None:
        self.broken = broken
        self.closed = False

    def __iter__(self) -> Iterator[bytes]:
        yield b'{"items": ['
        if self.broken:
            raise httpx.RemoteProtocolError("peer closed connection mid-body")
        yield b"1, 2]}"

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for chunk in self:
            yield chunk

    def close(self) -> None:
        self.closed = True

    async def aclose(self) -> None:
        self.closed = True


class Server:
    def __init__(self, breaks: int) -> None:
        self.breaks = breaks
        self.hits = 0
        self.bodies: list[Breaking] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.hits += 1
        body = Breaking(broken=self.hits <= self.breaks)
        self.bodies.append(body)
        return httpx.Response(200, stream=body)


def test_a_body_that_breaks_is_retried_when_buffered() -> None:
    server = Server(breaks=2)
    transport = sync_transport(server, FakeClock(), buffer_responses=True)
    with httpx.Client(transport=transport) as client:
        response = client.get(URL)
    assert response.json() == {"items": [1, 2]}
    assert server.hits == 3
    assert all(body.closed for body in server.bodies[:2])


async def test_the_async_transport_buffers_the_same_way() -> None:
    server = Server(breaks=1)
    transport = async_transport(server, FakeClock(), buffer_responses=True)
    async with httpx.AsyncClient(transport=transport) as client:
        response = await client.get(URL)
    assert response.json() == {"items": [1, 2]}
    assert server.hits == 2


def test_unbuffered_a_broken_body_reaches_the_caller_after_the_call() -> None:
    server = Server(breaks=1)
    transport = sync_transport(server, FakeClock())
    with (
        httpx.Client(transport=transport) as client,
        pytest.raises(httpx.RemoteProtocolError),
    ):
        client.get(URL)
    assert server.hits == 1


def test_a_body_past_the_bound_fails_the_call_and_is_not_retried() -> None:
    server = Server(breaks=0)
    transport = sync_transport(
        server, FakeClock(), buffer_responses=True, max_buffered_bytes=8
    )
    with (
        httpx.Client(transport=transport) as client,
        pytest.raises(
            ResponseTooLargeError, match="larger than max_buffered_bytes \\(8\\)"
        ) as raised,
    ):
        client.get(URL)
    assert raised.value.limit == 8
    assert server.hits == 1
    assert server.bodies[0].closed


def test_a_buffered_answer_streams_back_whole() -> None:
    server = Server(breaks=0)
    transport = sync_transport(server, FakeClock(), buffer_responses=True)
    with httpx.Client(transport=transport) as client, client.stream("GET", URL) as r:
        assert b"".join(r.iter_bytes()) == b'{"items": [1, 2]}'


class Stalling(httpx.SyncByteStream, httpx.AsyncByteStream):
    """Half a body, then the read timeout a stalled connection ends in."""

    def __iter__(self) -> Iterator[bytes]:
        yield b"half"
        raise httpx.ReadTimeout("timed out")

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for chunk in self:
            yield chunk


def stalling(request: httpx.Request) -> httpx.Response:
    return httpx.Response(200, stream=Stalling())


def test_unbuffered_a_stalled_body_is_an_attempt_stalled_error() -> None:
    transport = sync_transport(stalling, FakeClock())
    with (
        httpx.Client(transport=transport) as client,
        pytest.raises(AttemptStalledError, match="stopped arriving for 10 s") as raised,
    ):
        client.get(URL)
    assert isinstance(raised.value.__cause__, httpx.ReadTimeout)


async def test_the_async_client_names_the_stall_too() -> None:
    transport = async_transport(stalling, FakeClock())
    async with httpx.AsyncClient(transport=transport) as client:
        with pytest.raises(AttemptStalledError):
            await client.get(URL)


def test_without_owning_time_the_read_timeout_is_left_as_httpx_raised_it() -> None:
    transport = sync_transport(stalling, FakeClock(), own_transport_timeout=False)
    with httpx.Client(transport=transport) as client, pytest.raises(httpx.ReadTimeout):
        client.get(URL)
