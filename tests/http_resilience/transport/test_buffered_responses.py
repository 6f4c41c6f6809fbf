"""Response bodies: buffered inside the attempt, or watched for a stall after it.

Off by default: the body is read after the call returns, as httpx does. On,
a body that breaks half-way is one more failed attempt, and the retry sends
again; a body past `max_buffered_bytes` fails the call, not retried.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import AsyncIterator, Callable, Iterator

import httpx
import pytest

from http_resilience import AttemptStalledError, ResponseTooLargeError
from http_resilience.testing import FakeClock
from tests.http_resilience._support.scripted import URL, async_transport, sync_transport

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
    with (
        httpx.Client(transport=transport) as client,
        pytest.raises(httpx.ReadTimeout) as raised,
    ):
        client.get(URL)
    assert not isinstance(raised.value, AttemptStalledError)


# --- a buffered response behaves as httpx's own --------------------------------
# The oracle: a plain `httpx.Client` / `httpx.AsyncClient` on the same mock
# transport. Each probe records what a response gives, or the exception it
# raises; a buffered response must give the same, read or streamed.

_TEXT = b'{"items": [1, 2, 3], "note": "' + b"x" * 300 + b'"}'
_GZIPPED = gzip.compress(_TEXT)


class NetworkBody(httpx.SyncByteStream, httpx.AsyncByteStream):
    """A body as a connection gives it: in chunks, once; it records its close."""

    def __init__(self, raw: bytes) -> None:
        self.raw = raw
        self.taken = False
        self.closed = False

    def __iter__(self) -> Iterator[bytes]:
        if self.taken:
            raise RuntimeError("a connection's body is read once")
        self.taken = True
        for start in range(0, len(self.raw), 64):
            yield self.raw[start : start + 64]

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for chunk in self:
            yield chunk

    def close(self) -> None:
        self.closed = True

    async def aclose(self) -> None:
        self.closed = True


class Answers:
    """A mock's handler: the same body each time, streamed or in memory."""

    def __init__(self, *, streamed: bool, gzipped: bool) -> None:
        self.streamed = streamed
        self.raw = _GZIPPED if gzipped else _TEXT
        self.headers = {"content-encoding": "gzip"} if gzipped else {}
        self.bodies: list[NetworkBody] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        if not self.streamed:
            return httpx.Response(200, headers=self.headers, content=self.raw)
        body = NetworkBody(self.raw)
        self.bodies.append(body)
        return httpx.Response(200, headers=self.headers, stream=body)


KINDS = [
    pytest.param(streamed, gzipped, id=f"{how}-{encoding}")
    for streamed, how in ((True, "network"), (False, "in-memory"))
    for gzipped, encoding in ((False, "identity"), (True, "gzip"))
]


def outcome(read: Callable[[], object]) -> object:
    try:
        return read()
    except Exception as exc:
        return type(exc).__name__


def elapsed(response: httpx.Response) -> object:
    return outcome(lambda: type(response.elapsed).__name__)


def probe(client: httpx.Client) -> dict[str, object]:
    seen: dict[str, object] = {}
    read = client.get(URL)
    seen |= {
        "content": read.content,
        "json": read.json(),
        "is_closed": read.is_closed,
        "is_stream_consumed": read.is_stream_consumed,
        "elapsed": elapsed(read),
        "read": read.read(),
        "iter_bytes": b"".join(read.iter_bytes()),
        "iter_raw": outcome(lambda: b"".join(read.iter_raw())),
        "downloaded": read.num_bytes_downloaded,
    }
    with client.stream("GET", URL) as streamed:
        seen["open"] = (streamed.is_closed, streamed.is_stream_consumed)
        seen["elapsed open"] = elapsed(streamed)
        seen["raw"] = outcome(lambda: b"".join(streamed.iter_raw()))
        seen["after raw"] = (streamed.is_closed, streamed.is_stream_consumed)
        seen["elapsed after raw"] = elapsed(streamed)
        seen["read after raw"] = outcome(streamed.read)
    with client.stream("GET", URL) as streamed:
        seen["streamed read"] = streamed.read()
        seen["raw after read"] = outcome(lambda: b"".join(streamed.iter_raw()))
        seen["streamed closed"] = streamed.is_closed
    return seen


async def aprobe(client: httpx.AsyncClient) -> dict[str, object]:
    seen: dict[str, object] = {}
    read = await client.get(URL)

    async def raw_of(response: httpx.Response) -> object:
        try:
            return b"".join([chunk async for chunk in response.aiter_raw()])
        except Exception as exc:
            return type(exc).__name__

    seen |= {
        "content": read.content,
        "json": read.json(),
        "is_closed": read.is_closed,
        "is_stream_consumed": read.is_stream_consumed,
        "elapsed": elapsed(read),
        "read": await read.aread(),
        "iter_bytes": b"".join([chunk async for chunk in read.aiter_bytes()]),
        "iter_raw": await raw_of(read),
        "downloaded": read.num_bytes_downloaded,
    }
    async with client.stream("GET", URL) as streamed:
        seen["open"] = (streamed.is_closed, streamed.is_stream_consumed)
        seen["elapsed open"] = elapsed(streamed)
        seen["raw"] = await raw_of(streamed)
        seen["after raw"] = (streamed.is_closed, streamed.is_stream_consumed)
        seen["elapsed after raw"] = elapsed(streamed)
        try:
            seen["read after raw"] = await streamed.aread()
        except Exception as exc:
            seen["read after raw"] = type(exc).__name__
    async with client.stream("GET", URL) as streamed:
        seen["streamed read"] = await streamed.aread()
        seen["raw after read"] = await raw_of(streamed)
        seen["streamed closed"] = streamed.is_closed
    return seen


@pytest.mark.parametrize(("streamed", "gzipped"), KINDS)
def test_a_buffered_response_behaves_as_a_plain_client_s(
    streamed: bool, gzipped: bool
) -> None:
    answers = Answers(streamed=streamed, gzipped=gzipped)
    with httpx.Client(transport=httpx.MockTransport(answers)) as plain:
        expected = probe(plain)
    buffered = sync_transport(answers, FakeClock(), buffer_responses=True)
    with httpx.Client(transport=buffered) as client:
        assert probe(client) == expected
    assert expected["json"] == json.loads(_TEXT)
    if streamed:
        # The raw bytes were kept (not decoded twice), and the client's timer
        # stopped when it read the body.
        assert (expected["raw"], expected["elapsed"]) == (answers.raw, "timedelta")


@pytest.mark.parametrize(("streamed", "gzipped"), KINDS)
async def test_a_buffered_async_response_behaves_as_a_plain_client_s(
    streamed: bool, gzipped: bool
) -> None:
    answers = Answers(streamed=streamed, gzipped=gzipped)
    async with httpx.AsyncClient(transport=httpx.MockTransport(answers)) as plain:
        expected = await aprobe(plain)
    buffered = async_transport(answers, FakeClock(), buffer_responses=True)
    async with httpx.AsyncClient(transport=buffered) as client:
        assert await aprobe(client) == expected
    if streamed:
        assert (expected["raw"], expected["elapsed"]) == (answers.raw, "timedelta")


def sync_stream(response: httpx.Response) -> httpx.SyncByteStream:
    stream = response.stream
    assert isinstance(stream, httpx.SyncByteStream)
    return stream


@pytest.mark.parametrize("gzipped", [False, True], ids=["identity", "gzip"])
def test_the_stream_of_a_read_response_reads_again_as_httpx_s_own(
    gzipped: bool,
) -> None:
    # httpx's read response holds its body in memory, and its stream serves it
    # again; a buffered one's does too, whatever the transport's body was.
    in_memory = Answers(streamed=False, gzipped=gzipped)
    with httpx.Client(transport=httpx.MockTransport(in_memory)) as plain:
        stream = sync_stream(plain.get(URL))
        expected = [b"".join(stream), b"".join(stream)]
    assert expected == [in_memory.raw] * 2
    for answers in (in_memory, Answers(streamed=True, gzipped=gzipped)):
        transport = sync_transport(answers, FakeClock(), buffer_responses=True)
        with httpx.Client(transport=transport) as client:
            stream = sync_stream(client.get(URL))
            assert [b"".join(stream), b"".join(stream)] == expected


async def test_the_async_stream_of_a_read_response_reads_again() -> None:
    answers = Answers(streamed=True, gzipped=True)
    transport = async_transport(answers, FakeClock(), buffer_responses=True)
    async with httpx.AsyncClient(transport=transport) as client:
        response = await client.get(URL)
        stream = response.stream
        assert isinstance(stream, httpx.AsyncByteStream)
        again = [b"".join([chunk async for chunk in stream]) for _ in range(2)]
    assert again == [answers.raw] * 2
    assert response.content == _TEXT


def test_the_connection_s_body_is_read_and_closed_inside_the_attempt() -> None:
    answers = Answers(streamed=True, gzipped=False)
    transport = sync_transport(answers, FakeClock(), buffer_responses=True)
    with httpx.Client(transport=transport) as client, client.stream("GET", URL) as r:
        # Nothing read yet by the caller, and the connection's body is done.
        assert (r.is_closed, r.is_stream_consumed) == (False, False)
        assert [(body.taken, body.closed) for body in answers.bodies] == [(True, True)]
        assert r.read() == _TEXT
