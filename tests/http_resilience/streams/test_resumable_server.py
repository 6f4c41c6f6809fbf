"""`resumable_bytes` against a real server: uvicorn on 127.0.0.1.

The ASGI app serves a 4 MB body with an ETag. The first request for each path
gets half the body, then the app returns without finishing the response, and
uvicorn closes the connection: httpx sees a real broken body. Under `/ranged/`
the app honours `Range` with `If-Range`; under `/plain/` it ignores them and
always sends the whole body with a 200.
"""

from __future__ import annotations

import hashlib
import random
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest

from http_resilience import (
    PartialStreamPolicy,
    StreamRetryOptions,
    resumable_bytes,
    resumable_bytes_sync,
)
from http_resilience.testing import FakeClock
from tests.support.fault_server import run_lifespan, serve_app

from .ranged import drain

pytestmark = pytest.mark.anyio

BODY = random.Random(6).randbytes(4 * 1024 * 1024)
HALF = len(BODY) // 2
ETAG = '"body-' + hashlib.sha256(BODY).hexdigest()[:16] + '"'
CHUNK = 256 * 1024

Scope = dict[str, Any]
Message = dict[str, Any]


@dataclass
class FileApp:
    """The ASGI app; records the headers of every request, per path."""

    started: threading.Event = field(default_factory=threading.Event)
    seen: dict[str, list[dict[str, str]]] = field(
        default_factory=dict[str, list[dict[str, str]]]
    )

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            await run_lifespan(receive, send, self.started)
            return
        path: str = scope["path"]
        headers = {
            name.decode("latin-1"): value.decode("latin-1")
            for name, value in scope["headers"]
        }
        earlier = self.seen.setdefault(path, [])
        earlier.append(headers)
        status, start = 200, 0
        asked = headers.get("range", "")
        ranged = path.startswith("/ranged/")
        if ranged and asked.startswith("bytes=") and headers.get("if-range") == ETAG:
            status, start = 206, int(asked.removeprefix("bytes=").removesuffix("-"))
        data = BODY[start:]
        response_headers = [
            (b"content-length", str(len(data)).encode()),
            (b"etag", ETAG.encode()),
            (b"accept-ranges", b"bytes" if ranged else b"none"),
        ]
        if status == 206:
            content_range = f"bytes {start}-{len(BODY) - 1}/{len(BODY)}"
            response_headers.append((b"content-range", content_range.encode()))
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": response_headers,
            }
        )
        # The first response for a path stops half-way: returning without the
        # last body message makes uvicorn close the connection.
        end = HALF if len(earlier) == 1 else len(data)
        for offset in range(0, end, CHUNK):
            chunk = data[offset : min(offset + CHUNK, end)]
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
        if end == len(data):
            await send({"type": "http.response.body", "body": b"", "more_body": False})


@dataclass(frozen=True)
class Running:
    url: str
    app: FileApp


@pytest.fixture(scope="module")
def server() -> Iterator[Running]:
    app = FileApp()
    with serve_app(app, app.started, name="file server") as url:
        yield Running(url, app)


def options(**overrides: Any) -> StreamRetryOptions:
    return StreamRetryOptions.model_validate(
        {"clock": FakeClock(), "use_jitter": False, **overrides}
    )


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def assert_resumed(server: Running, path: str) -> None:
    requests = server.app.seen[path]
    assert len(requests) == 2
    assert "range" not in requests[0]
    assert requests[1]["range"] == f"bytes={HALF}-"
    assert requests[1]["if-range"] == ETAG
    assert requests[1]["accept-encoding"] == "identity"


@pytest.mark.asyncio_only("counts under a fixed key of the session's one server")
async def test_a_download_cut_half_way_resumes_with_range(server: Running) -> None:
    digest = hashlib.sha256()
    size = 0
    async with httpx.AsyncClient(base_url=server.url) as client:
        async for chunk in resumable_bytes(client, "/ranged/async", options()):
            digest.update(chunk)
            size += len(chunk)
    assert size == len(BODY)
    assert digest.hexdigest() == sha256(BODY)
    assert_resumed(server, "/ranged/async")


def test_the_sync_twin_resumes_a_download_cut_half_way(server: Running) -> None:
    with httpx.Client(base_url=server.url) as client:
        body = b"".join(resumable_bytes_sync(client, "/ranged/sync", options()))
    assert sha256(body) == sha256(BODY)
    assert_resumed(server, "/ranged/sync")


@pytest.mark.asyncio_only("counts under a fixed key of the session's one server")
async def test_a_server_ignoring_range_reraises_the_break(server: Running) -> None:
    received = bytearray()
    async with httpx.AsyncClient(base_url=server.url) as client:
        stream = resumable_bytes(client, "/plain/rethrow", options())
        with pytest.raises(httpx.RemoteProtocolError) as raised:
            await drain(stream, received)
    assert bytes(received) == BODY[:HALF]
    assert "the server sent the whole body (200)" in raised.value.__notes__[0]
    assert len(server.app.seen["/plain/rethrow"]) == 2


@pytest.mark.asyncio_only("counts under a fixed key of the session's one server")
async def test_a_server_ignoring_range_restarts_under_restart_from_start(
    server: Running,
) -> None:
    received = bytearray()
    chosen = options(partial_stream_policy=PartialStreamPolicy.RESTART_FROM_START)
    async with httpx.AsyncClient(base_url=server.url) as client:
        async for chunk in resumable_bytes(client, "/plain/restart", chosen):
            received += chunk
    # The consumer had half the body, then gets all of it again from byte 0.
    assert len(received) == HALF + len(BODY)
    assert bytes(received[:HALF]) == BODY[:HALF]
    assert sha256(bytes(received[HALF:])) == sha256(BODY)
    assert len(server.app.seen["/plain/restart"]) == 2


def test_the_sync_twin_restarts_against_a_server_ignoring_range(
    server: Running,
) -> None:
    chosen = options(partial_stream_policy=PartialStreamPolicy.RESTART_FROM_START)
    with httpx.Client(base_url=server.url) as client:
        body = b"".join(resumable_bytes_sync(client, "/plain/sync", chosen))
    assert sha256(body[HALF:]) == sha256(BODY)
