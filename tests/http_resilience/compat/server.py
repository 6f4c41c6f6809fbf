"""A real server for the compatibility tests: streamed bodies and echoes.

An ASGI app under uvicorn on 127.0.0.1 (`serve_app`), one per session
(fixture `compat_server`). `?key=NAME` names the counter a request of the
streaming routes is counted under.

| route | answer |
| --- | --- |
| `/lines/{n}` | n body chunks ``line i\\n`` (chunked, no length) |
| `/gzip` | `GZIP_TEXT`, gzip-encoded, with ``Content-Encoding: gzip`` |
| `/stall/{seconds}` | ``first\\n``, then nothing for `seconds`, then ``last\\n`` |
| an absolute-form target | 200 naming it in ``X-Proxied-For``: a forward proxy |
| anything else | 200, JSON: method, target, headers, body |

A request whose client leaves before its answer is complete is counted as
aborted under its key.
"""

from __future__ import annotations

import gzip
import json
import threading
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from urllib.parse import parse_qs

import anyio.to_thread
import pytest

from tests.support.fault_server import (
    Message,
    Receive,
    Send,
    read_body,
    run_lifespan,
    serve_app,
    stayed,
)

__all__ = ["GZIP_TEXT", "CompatServer", "compat_server"]

GZIP_TEXT = b"compressed " * 64


async def _start(send: Send, headers: list[tuple[bytes, bytes]]) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": headers})


async def _chunk(send: Send, body: bytes, *, more: bool) -> None:
    await send({"type": "http.response.body", "body": body, "more_body": more})


@dataclass
class CompatApp:
    """The app; counts aborted requests per key."""

    started: threading.Event = field(default_factory=threading.Event)
    changed: threading.Condition = field(default_factory=threading.Condition)
    aborted: Counter[str] = field(default_factory=Counter[str])
    in_flight: Counter[str] = field(default_factory=Counter[str])

    async def __call__(self, scope: Message, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await run_lifespan(receive, send, self.started)
            return
        query = parse_qs(scope["query_string"].decode("latin-1"))
        key = query.get("key", [str(scope["path"])])[0]
        with self.changed:
            self.in_flight[key] += 1
        answered = False
        try:
            if await read_body(receive):
                answered = await self._answer(scope, receive, send)
        finally:
            with self.changed:
                self.in_flight[key] -= 1
                if not answered:
                    self.aborted[key] += 1
                self.changed.notify_all()

    async def _answer(self, scope: Message, receive: Receive, send: Send) -> bool:
        raw: bytes = scope["raw_path"]
        name, _, rest = str(scope["path"]).strip("/").partition("/")
        if raw.startswith(b"http://"):
            # An absolute-form target: the client took this server for its proxy.
            target = raw + (
                b"?" + scope["query_string"] if scope["query_string"] else b""
            )
            await _start(send, [(b"x-proxied-for", target)])
            await _chunk(send, b"via proxy", more=False)
        elif name == "lines":
            await _start(send, [(b"content-type", b"text/plain")])
            for index in range(int(rest)):
                await _chunk(send, b"line %d\n" % index, more=True)
            await _chunk(send, b"", more=False)
        elif name == "gzip":
            body = gzip.compress(GZIP_TEXT, mtime=0)
            await _start(
                send,
                [
                    (b"content-encoding", b"gzip"),
                    (b"content-length", str(len(body)).encode()),
                ],
            )
            await _chunk(send, body, more=False)
        elif name == "stall":
            await _start(send, [(b"content-type", b"text/plain")])
            await _chunk(send, b"first\n", more=True)
            if not await stayed(receive, float(rest)):
                return False
            await _chunk(send, b"last\n", more=False)
        else:
            headers = [[k.decode(), v.decode()] for k, v in scope["headers"]]
            document = {
                "method": scope["method"],
                "target": raw.decode(),
                "headers": headers,
            }
            await _start(send, [(b"content-type", b"application/json")])
            await _chunk(send, json.dumps(document).encode(), more=False)
        return True


@dataclass(frozen=True)
class CompatServer:
    """The running server: its base URL and its abort counts."""

    url: str
    app: CompatApp

    async def aaborted(self, key: str) -> int:
        """`aborted`, waiting in a worker thread: the client's socket closes on
        the test's event loop, which must keep running while the server notices.
        """
        return await anyio.to_thread.run_sync(self.aborted, key)

    def aborted(self, key: str, *, limit: float = 5.0) -> int:
        """Aborted requests of `key`, once none of the key's is in flight.

        Raises:
            TimeoutError: some are still in flight after `limit` seconds.
        """
        with self.app.changed:
            if not self.app.changed.wait_for(
                lambda: not self.app.in_flight[key], limit
            ):
                raise TimeoutError(f"compat server: {key!r} still in flight")
            return self.app.aborted[key]


@pytest.fixture(scope="session")
def compat_server() -> Iterator[CompatServer]:
    """The session's compatibility server."""
    app = CompatApp()
    with serve_app(app, app.started, name="compat server") as url:
        yield CompatServer(url, app)
