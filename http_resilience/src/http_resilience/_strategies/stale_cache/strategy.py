"""The stale cache in a chain: records good answers, serves the last when a call fails.

Outside every strategy but the fallbacks, it sees what the call ended with.
A good answer from the host (any response that is not a failure) replaces
the entry of its request; when it may be stored (`rules.stale_window`), its
body is recorded as the caller reads it, and stored once read to its end
within `max_bytes`: a body never read to the end (a stream closed early) or
larger is not stored. A call that ends in a failure that may degrade
(`is_degradable`: a failure status, a transport failure or timeout, an open
breaker, a limiter or a quota that refused) is answered with the entry, if
there is one within its window: its ``Age`` header says how old it is (in
whole seconds, on the pipeline's clock, plus the ``Age`` it came with), and
its extensions hold a `Degradation` (source ``"stale-cache"``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from itertools import chain
from typing import TYPE_CHECKING

import httpx

from http_resilience._core.call import Call
from http_resilience._core.classify import is_failure_status
from http_resilience._core.clock import Clock, reader
from http_resilience._core.degraded import (
    DEGRADED_EXTENSION,
    Degradation,
    is_degradable,
    outcome_name,
)
from http_resilience._core.drive import AsyncDriver, SyncDriver
from http_resilience._core.telemetry import Telemetry
from http_resilience._strategies.stale_cache.rules import (
    may_serve,
    read_request,
    read_response,
    vary_parts,
)
from http_resilience._strategies.stale_cache.store import Entry, StaleStore

if TYPE_CHECKING:
    from http_resilience._strategies.stale_cache.options import StaleCacheOptions

__all__ = ["AsyncStaleCache", "StaleCacheStrategy", "SyncStaleCache"]

_KEPT = ("http_version", "reason_phrase")  # the extensions an entry keeps


class _Recording:
    """A body being read: its chunks, while they stay within the bound."""

    __slots__ = ("chunks", "entry", "head", "key", "left", "strategy")

    def __init__(
        self, strategy: StaleCacheStrategy, key: bytes, entry: Entry, head: int
    ) -> None:
        self.strategy = strategy
        self.key = key
        self.entry = entry
        self.head = head  # the entry's size without its body
        self.left = strategy.store.max_bytes - head
        self.chunks: list[bytes] | None = []

    def add(self, chunk: bytes) -> None:
        chunks = self.chunks
        if chunks is None:
            return
        self.left -= len(chunk)
        if self.left < 0:
            self.chunks = None  # too large: not stored, nothing more held
        else:
            chunks.append(chunk)

    def done(self) -> None:
        chunks, self.chunks = self.chunks, None
        if chunks is not None:
            self.strategy.keep(self.key, self.entry, b"".join(chunks), self.head)


class _RecordingAsyncStream(httpx.AsyncByteStream):
    __slots__ = ("_inner", "_recording")

    def __init__(self, inner: httpx.AsyncByteStream, recording: _Recording) -> None:
        self._inner = inner
        self._recording = recording

    async def __aiter__(self) -> AsyncIterator[bytes]:
        recording = self._recording
        async for chunk in self._inner:
            recording.add(chunk)
            yield chunk
        recording.done()

    async def aclose(self) -> None:
        await self._inner.aclose()


class _RecordingSyncStream(httpx.SyncByteStream):
    __slots__ = ("_inner", "_recording")

    def __init__(self, inner: httpx.SyncByteStream, recording: _Recording) -> None:
        self._inner = inner
        self._recording = recording

    def __iter__(self) -> Iterator[bytes]:
        recording = self._recording
        for chunk in self._inner:
            recording.add(chunk)
            yield chunk
        recording.done()

    def close(self) -> None:
        self._inner.close()


def _raw_body(response: httpx.Response) -> bytes | None:
    """The body of a response read already, as the host sent it; None if unknown.

    A response built from bytes (a mock's) still holds them in its stream;
    one read otherwise holds only the decoded content, which is the raw body
    only when it had no ``Content-Encoding``.
    """
    stream = response.stream
    if isinstance(stream, httpx.ByteStream):
        return b"".join(stream)
    if "content-encoding" in response.headers:
        return None
    return response.content


class StaleCacheStrategy:
    """What the cache decides for a call: record, serve stale, or neither.

    Args:
        options: The window and the bounds.
        clock: Where the entries' ages are read.
        telemetry: Where a stale answer is logged.
    """

    __slots__ = ("_max_stale", "_now", "_store_private", "_telemetry", "store")

    def __init__(
        self, *, options: StaleCacheOptions, clock: Clock, telemetry: Telemetry
    ) -> None:
        self._now = reader(clock)
        self._telemetry = telemetry
        self._max_stale = options.max_stale.total_seconds()
        self._store_private = options.store_private
        self.store = StaleStore(
            max_entries=options.max_entries, max_bytes=options.max_bytes
        )

    def key(self, request: httpx.Request) -> bytes | None:
        """The entry key of `request`; None when the cache leaves it alone."""
        parts = read_request(request)
        return None if parts is None else self.store.hash(parts)

    def answered(
        self,
        request: httpx.Request,
        key: bytes,
        response: httpx.Response,
        *,
        sync: bool,
    ) -> None:
        """The host answered `response` (no failure): replace the entry, record it.

        `sync`: the body is read by a sync client (else by an async one).
        """
        now = self._now()
        store = self.store
        entry: Entry | None = None
        size = 0
        try:
            read = read_response(
                response, self._max_stale, store_private=self._store_private
            )
            if read is None:
                return
            window, vary, age = read
            headers = tuple(response.headers.raw)
            head = sum(map(len, chain.from_iterable(headers)))  # its size, in C
            left = store.max_bytes - head
            if left < 0:
                return
            extensions = response.extensions
            kept = (
                tuple(
                    [(name, extensions[name]) for name in _KEPT if name in extensions]
                )
                if extensions
                else ()
            )
            varied = store.hash(vary_parts(request, vary)) if vary else b""
            status = response.status_code
            try:
                response.content  # noqa: B018 - raises when the body is still to be read
            except httpx.ResponseNotRead:
                recording = _Recording(
                    self,
                    key,
                    Entry(status, headers, b"", kept, now, age, window, vary, varied),
                    head,
                )
                stream = response.stream
                if sync and isinstance(stream, httpx.SyncByteStream):
                    response.stream = _RecordingSyncStream(stream, recording)
                elif not sync and isinstance(stream, httpx.AsyncByteStream):
                    response.stream = _RecordingAsyncStream(stream, recording)
                return
            body = _raw_body(response)
            if body is not None and len(body) <= left:
                entry = Entry(
                    status, headers, body, kept, now, age, window, vary, varied
                )
                size = head + len(body)
        finally:
            # Whatever is stored or not, the entry is replaced, before a body
            # being recorded can be kept; a body read already is held in the
            # same step (`put`'s, without taking the lock again).
            store.replace(key, now, entry, size)

    def keep(self, key: bytes, entry: Entry, body: bytes, head: int) -> None:
        """Store `entry` for `key` with `body`, read to its end.

        `head`: the entry's size without its body.
        """
        self.store.put(
            key,
            Entry(
                entry.status,
                entry.headers,
                body,
                entry.extensions,
                entry.stored_at,
                entry.initial_age,
                entry.window,
                entry.vary,
                entry.varied,
            ),
            head + len(body),
        )

    def stale(
        self,
        request: httpx.Request,
        call: Call,
        key: bytes,
        failure: httpx.Response | Exception,
    ) -> httpx.Response | None:
        """The stale answer to `request` in place of `failure`; None: there is none."""
        if not may_serve(request):
            return None
        store = self.store
        entry = store.get(key)
        if entry is None:
            return None
        if entry.vary and store.varied(request, entry.vary) != entry.varied:
            return None
        resident = self._now() - entry.stored_at
        if resident > entry.window:
            store.drop(key)
            return None
        age = entry.initial_age + max(resident, 0.0)
        reason = outcome_name(failure)
        headers = [
            (name, value) for name, value in entry.headers if name.lower() != b"age"
        ]
        headers.append((b"Age", str(int(age)).encode()))
        extensions: dict[str, object] = dict(entry.extensions)
        extensions[DEGRADED_EXTENSION] = Degradation("stale-cache", reason, age)
        self._telemetry.degraded(call.method, call.host, "stale-cache", reason)
        return httpx.Response(
            entry.status,
            headers=headers,
            stream=httpx.ByteStream(entry.body),
            extensions=extensions,
        )


class AsyncStaleCache(AsyncDriver[StaleCacheStrategy]):
    """`StaleCacheStrategy` on an event loop."""

    __slots__ = ()

    async def handle(self, request: httpx.Request, call: Call) -> httpx.Response:
        """Run the inside; record a good answer, or serve a stale one for a failure."""
        strategy = self.strategy
        key = strategy.key(request)
        if key is None:
            return await self._next.handle(request, call)
        try:
            response = await self._next.handle(request, call)
        except Exception as exc:
            if not is_degradable(exc):
                raise
            stale = strategy.stale(request, call, key, exc)
            if stale is None:
                raise
            return stale
        if not is_failure_status(response.status_code):  # `is_degradable`, inline
            strategy.answered(request, key, response, sync=False)
            return response
        stale = strategy.stale(request, call, key, response)
        if stale is None:
            return response
        await response.aclose()
        return stale


class SyncStaleCache(SyncDriver[StaleCacheStrategy]):
    """`StaleCacheStrategy` for threads."""

    __slots__ = ()

    def handle_sync(self, request: httpx.Request, call: Call) -> httpx.Response:
        """Run the inside; record a good answer, or serve a stale one for a failure."""
        strategy = self.strategy
        key = strategy.key(request)
        if key is None:
            return self._next.handle_sync(request, call)
        try:
            response = self._next.handle_sync(request, call)
        except Exception as exc:
            if not is_degradable(exc):
                raise
            stale = strategy.stale(request, call, key, exc)
            if stale is None:
                raise
            return stale
        if not is_failure_status(response.status_code):  # `is_degradable`, inline
            strategy.answered(request, key, response, sync=True)
            return response
        stale = strategy.stale(request, call, key, response)
        if stale is None:
            return response
        response.close()
        return stale
