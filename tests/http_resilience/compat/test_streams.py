"""Streamed bodies: `stream()`, `iter_*` / `aiter_*`, closing half-way (real server)."""

from __future__ import annotations

import contextlib
import itertools
from datetime import timedelta

import httpx
import pytest

from http_resilience import HttpResilienceOptions
from tests.http_resilience.compat.clients import (
    QUICK,
    RESILIENT,
    Kind,
    async_client,
    sync_client,
)
from tests.http_resilience.compat.server import GZIP_TEXT, CompatServer

pytestmark = pytest.mark.anyio

BUFFERED = HttpResilienceOptions(base_delay=timedelta(0), buffer_responses=True)
OPTIONS = {"streamed": QUICK, "buffered": BUFFERED}
_keys = itertools.count()


def _key(name: str) -> str:
    return f"{name}-{next(_keys)}"


Bodies = tuple[list[str], bytes, str, bytes, bytes, int]


def _sync_bodies(client: httpx.Client, url: str, *, read: bool = False) -> Bodies:
    """The bodies as each iterator gives them; `read`: read each response first."""

    def stream(path: str) -> contextlib.AbstractContextManager[httpx.Response]:
        return client.stream("GET", f"{url}{path}")

    with client:
        with stream("/lines/4") as response:
            if read:
                response.read()
            lines = list(response.iter_lines())
        with stream("/lines/3") as response:
            if read:
                response.read()
            data = b"".join(response.iter_bytes(chunk_size=5))
        with stream("/lines/2") as response:
            if read:
                response.read()
            text = "".join(response.iter_text())
        with stream("/gzip") as response:
            if read:
                response.read()
            decoded = b"".join(response.iter_bytes())
        with stream("/gzip") as response:
            if read:
                response.read()
            try:
                raw = b"".join(response.iter_raw())
            except httpx.StreamConsumed:
                raw = b"consumed"
            downloaded = response.num_bytes_downloaded
    return lines, data, text, decoded, raw, downloaded


async def _async_bodies(
    client: httpx.AsyncClient, url: str, *, read: bool = False
) -> Bodies:
    def stream(path: str) -> contextlib.AbstractAsyncContextManager[httpx.Response]:
        return client.stream("GET", f"{url}{path}")

    async with client:
        async with stream("/lines/4") as response:
            if read:
                await response.aread()
            lines = [line async for line in response.aiter_lines()]
        async with stream("/lines/3") as response:
            if read:
                await response.aread()
            data = b"".join([c async for c in response.aiter_bytes(chunk_size=5)])
        async with stream("/lines/2") as response:
            if read:
                await response.aread()
            text = "".join([t async for t in response.aiter_text()])
        async with stream("/gzip") as response:
            if read:
                await response.aread()
            decoded = b"".join([c async for c in response.aiter_bytes()])
        async with stream("/gzip") as response:
            if read:
                await response.aread()
            try:
                raw = b"".join([c async for c in response.aiter_raw()])
            except httpx.StreamConsumed:
                raw = b"consumed"
            downloaded = response.num_bytes_downloaded
    return lines, data, text, decoded, raw, downloaded


def _check_oracle(bodies: Bodies, *, read: bool) -> None:
    lines, data, text, decoded, raw, downloaded = bodies
    assert lines == ["line 0", "line 1", "line 2", "line 3"]
    assert data == b"line 0\nline 1\nline 2\n"
    assert text == "line 0\nline 1\n"
    assert decoded == GZIP_TEXT
    if read:
        assert raw == b"consumed"  # a read response has no raw stream left
    else:
        assert raw not in (GZIP_TEXT, b"consumed")  # still compressed
        assert downloaded == len(raw)


@pytest.mark.parametrize("body", list(OPTIONS))
@pytest.mark.parametrize("kind", RESILIENT)
def test_sync_iterators_give_what_plain_httpx_gives(
    kind: Kind, body: str, compat_server: CompatServer
) -> None:
    # Buffered, the body was read inside the attempt, and every iterator still
    # gives what it gives on a streamed httpx response.
    url = compat_server.url
    expected = _sync_bodies(sync_client("plain"), url)
    _check_oracle(expected, read=False)
    assert _sync_bodies(sync_client(kind, options=OPTIONS[body]), url) == expected
    # A read response is read again as httpx reads it: iter_raw has no stream.
    plain_read = _sync_bodies(sync_client("plain"), url, read=True)
    _check_oracle(plain_read, read=True)
    ours_read = _sync_bodies(sync_client(kind, options=OPTIONS[body]), url, read=True)
    assert ours_read == plain_read


@pytest.mark.parametrize("body", list(OPTIONS))
@pytest.mark.parametrize("kind", RESILIENT)
async def test_async_iterators_give_what_plain_httpx_gives(
    kind: Kind, body: str, compat_server: CompatServer
) -> None:
    url = compat_server.url
    expected = await _async_bodies(async_client("plain"), url)
    _check_oracle(expected, read=False)
    got = await _async_bodies(async_client(kind, options=OPTIONS[body]), url)
    assert got == expected
    plain_read = await _async_bodies(async_client("plain"), url, read=True)
    _check_oracle(plain_read, read=True)
    client = async_client(kind, options=OPTIONS[body])
    assert await _async_bodies(client, url, read=True) == plain_read


Closed = tuple[str, bool, str, str, int]


def _sync_close_half_way(
    client: httpx.Client, server: CompatServer, key: str
) -> Closed:
    with client:
        with client.stream("GET", f"{server.url}/stall/30?key={key}") as response:
            first = next(response.iter_lines())
        try:
            response.read()
        except httpx.StreamError as exc:
            error = type(exc).__name__
        else:
            error = "none"
        # The client is still good for the next request.
        after = client.get(f"{server.url}/lines/1").text
    return first, response.is_closed, error, after, server.aborted(key)


async def _async_close_half_way(
    client: httpx.AsyncClient, server: CompatServer, key: str
) -> Closed:
    async with client:
        url = f"{server.url}/stall/30?key={key}"
        async with client.stream("GET", url) as response:
            # Closed by hand, as trio asks of an async generator left half-way.
            lines = response.aiter_lines()
            first = await anext(lines)
            await lines.aclose()  # type: ignore[attr-defined]
        try:
            await response.aread()
        except httpx.StreamError as exc:
            error = type(exc).__name__
        else:
            error = "none"
        after = (await client.get(f"{server.url}/lines/1")).text
    return first, response.is_closed, error, after, await server.aaborted(key)


@pytest.mark.parametrize("kind", RESILIENT)
def test_sync_closing_a_stream_half_way_closes_it_as_plain_httpx_does(
    kind: Kind, compat_server: CompatServer
) -> None:
    expected = _sync_close_half_way(sync_client("plain"), compat_server, _key("s"))
    assert expected == ("first", True, "StreamConsumed", "line 0\n", 1)
    got = _sync_close_half_way(sync_client(kind), compat_server, _key("s"))
    assert got == expected


# httpx's and httpcore's own: on trio, a body closed half-way leaves their
# nested async generators (each `async for`s the next, none closes it) to the
# garbage collector, which trio warns of: plain httpx and a resilient client
# alike; which of them is finalized first, and so warned of, varies. None is
# ours: the pipeline's body wrappers iterate without a generator and close
# what they read.
@pytest.mark.filterwarnings(
    "ignore:Exception ignored in. <async_generator object "
    r"(Response\.aiter_\w+|BoundAsyncStream\.__aiter__|AsyncResponseStream"
    r"\.__aiter__|PoolByteStream\.__aiter__|HTTP11ConnectionByteStream\.__aiter__"
    r"|AsyncHTTP11Connection\._receive_response_body) "
    ":pytest.PytestUnraisableExceptionWarning"
)
@pytest.mark.parametrize("kind", RESILIENT)
async def test_async_closing_a_stream_half_way_closes_it_as_plain_httpx_does(
    kind: Kind, compat_server: CompatServer
) -> None:
    plain = async_client("plain")
    expected = await _async_close_half_way(plain, compat_server, _key("a"))
    assert expected == ("first", True, "StreamConsumed", "line 0\n", 1)
    got = await _async_close_half_way(async_client(kind), compat_server, _key("a"))
    assert got == expected
