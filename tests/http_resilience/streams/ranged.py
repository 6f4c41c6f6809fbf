"""An in-memory HTTP server for `httpx.MockTransport` that honours `Range`.

It serves one body with an ETag (and optionally Last-Modified), answers
`Range: bytes=N-` with a 206 when `If-Range` matches, and cuts any response
after a scripted number of bytes by raising a transport error from the body,
as httpx does when the server closes the connection.
"""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterable, AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field

import httpx

BODY = hashlib.sha256(b"seed").digest() * 1000  # 32,000 bytes
CHUNK = 1000


class CutStream(httpx.SyncByteStream, httpx.AsyncByteStream):
    """A response body that raises `failure` after `cut` bytes; records closing."""

    def __init__(
        self, data: bytes, cut: int | None, failure: type[httpx.TransportError]
    ) -> None:
        self.data = data
        self.cut = cut
        self.failure = failure
        self.closed = 0

    def _chunks(self) -> Iterator[bytes]:
        end = len(self.data) if self.cut is None else min(self.cut, len(self.data))
        for start in range(0, end, CHUNK):
            yield self.data[start : min(start + CHUNK, end)]
        if self.cut is not None:
            raise self.failure("peer closed connection without sending complete body")

    def __iter__(self) -> Iterator[bytes]:
        return self._chunks()

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for chunk in self._chunks():
            yield chunk

    def close(self) -> None:
        self.closed += 1

    async def aclose(self) -> None:
        self.closed += 1


async def drain(stream: AsyncIterable[bytes], into: list[bytes] | bytearray) -> None:
    """Append every chunk of `stream` to `into`, as it comes."""
    async for chunk in stream:
        if isinstance(into, bytearray):
            into += chunk
        else:
            into.append(chunk)


Respond = Callable[[httpx.Request], httpx.Response]


@dataclass
class RangeServer:
    """Serves `body`; `cuts[i]` cuts the i-th response after that many bytes."""

    body: bytes = BODY
    etag: str | None = '"v1"'
    last_modified: str | None = None
    cuts: list[int | None] = field(default_factory=list[int | None])
    honours_range: bool = True
    failure: type[httpx.TransportError] = httpx.RemoteProtocolError
    # The i-th request is answered by this function instead.
    instead: dict[int, Respond] = field(default_factory=dict[int, Respond])
    requests: list[httpx.Request] = field(default_factory=list[httpx.Request])
    streams: list[CutStream] = field(default_factory=list[CutStream])

    def __call__(self, request: httpx.Request) -> httpx.Response:
        index = len(self.requests)
        self.requests.append(request)
        if index in self.instead:
            response = self.instead[index](request)
            if isinstance(response.stream, CutStream):
                self.streams.append(response.stream)
            return response
        headers: dict[str, str] = {"Accept-Ranges": "bytes"}
        if self.etag is not None:
            headers["ETag"] = self.etag
        if self.last_modified is not None:
            headers["Last-Modified"] = self.last_modified
        status, start = 200, 0
        asked = request.headers.get("Range", "")
        validators = (self.etag, self.last_modified)
        if (
            self.honours_range
            and asked.startswith("bytes=")
            and asked.endswith("-")
            and request.headers.get("If-Range") in validators
        ):
            status, start = 206, int(asked[len("bytes=") : -1])
            headers["Content-Range"] = (
                f"bytes {start}-{len(self.body) - 1}/{len(self.body)}"
            )
        data = self.body[start:]
        headers["Content-Length"] = str(len(data))
        cut = self.cuts[index] if index < len(self.cuts) else None
        return self.respond(status, headers, data, cut)

    def respond(
        self, status: int, headers: dict[str, str], data: bytes, cut: int | None = None
    ) -> httpx.Response:
        stream = CutStream(data, cut, self.failure)
        self.streams.append(stream)
        return httpx.Response(status, headers=headers, stream=stream)

    @property
    def ranges(self) -> list[tuple[str | None, str | None]]:
        """`Range` and `If-Range` of every request, in order."""
        return [
            (r.headers.get("Range"), r.headers.get("If-Range")) for r in self.requests
        ]

    @property
    def all_closed(self) -> bool:
        return all(stream.closed >= 1 for stream in self.streams)
