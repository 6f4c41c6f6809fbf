"""The response bodies the terminal send hands on: watched for a stall, or bounded.

`WatchedBody` names a read timeout of a body for what it is when the pipeline
owns time (`AttemptStalledError`); `BoundedBody` refuses a body past the bytes
a buffered response may hold (`ResponseTooLargeError`). Each serves the async
and the sync send alike.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from typing import cast

import httpx

from http_resilience._core.errors import AttemptStalledError, ResponseTooLargeError
from http_resilience._core.hosts import host_key

__all__ = ["BoundedBody", "WatchedBody"]


class WatchedBody(httpx.AsyncByteStream, httpx.SyncByteStream):
    """A response body whose read timeout is reported as `AttemptStalledError`.

    The pipeline owns time: each read of the body waits at most the attempt's
    time (its httpx read timeout), so a body that stops arriving ends in a
    read timeout, which this names for what it is.
    """

    __slots__ = ("_inner", "_reads", "_request", "_seconds")

    def __init__(self, inner: object, seconds: float, request: httpx.Request) -> None:
        self._inner = inner
        self._seconds = seconds
        self._request = request
        self._reads: _WatchedReads | None = None

    def _stalled(self) -> AttemptStalledError:
        return AttemptStalledError(
            f"{self._request.method} {host_key(self._request.url)}: "
            f"the response body stopped arriving for {self._seconds:g} s",
            request=self._request,
        )

    def __aiter__(self) -> AsyncIterator[bytes]:
        # An iterator, not an async generator: a body closed half-way leaves
        # no generator of ours to the garbage collector (trio warns of one),
        # and closing it closes the inner one it reads.
        reads = self._reads = _WatchedReads(
            cast("httpx.AsyncByteStream", self._inner).__aiter__(), self._stalled
        )
        return reads

    def __iter__(self) -> Iterator[bytes]:
        try:
            yield from cast("httpx.SyncByteStream", self._inner)
        except httpx.ReadTimeout as exc:
            raise self._stalled() from exc

    async def aclose(self) -> None:
        reads, self._reads = self._reads, None
        if reads is not None:
            await reads.aclose()
        await cast("httpx.AsyncByteStream", self._inner).aclose()

    def close(self) -> None:
        cast("httpx.SyncByteStream", self._inner).close()


class _WatchedReads:
    """The reads of a `WatchedBody`: a read timeout becomes a stall."""

    __slots__ = ("_reads", "_stalled")

    def __init__(
        self,
        reads: AsyncIterator[bytes],
        stalled: Callable[[], AttemptStalledError],
    ) -> None:
        self._reads = reads
        self._stalled = stalled

    def __aiter__(self) -> _WatchedReads:
        return self

    async def __anext__(self) -> bytes:
        try:
            return await self._reads.__anext__()
        except httpx.ReadTimeout as exc:
            raise self._stalled() from exc

    async def aclose(self) -> None:
        """Close the inner reads, when they are a generator left half-way."""
        close = getattr(self._reads, "aclose", None)
        if close is not None:
            await close()


class BoundedBody(httpx.AsyncByteStream, httpx.SyncByteStream):
    """A response body that raises `ResponseTooLargeError` past `limit` bytes."""

    def __init__(self, inner: object, limit: int, request: httpx.Request) -> None:
        self._inner = inner
        self._limit = limit
        self._request = request

    def _too_large(self) -> ResponseTooLargeError:
        return ResponseTooLargeError(
            f"{self._request.method} {host_key(self._request.url)}: "
            f"the response body is larger than max_buffered_bytes ({self._limit})",
            limit=self._limit,
        )

    async def __aiter__(self) -> AsyncIterator[bytes]:
        size = 0
        async for chunk in cast("httpx.AsyncByteStream", self._inner):
            size += len(chunk)
            if size > self._limit:
                raise self._too_large()
            yield chunk

    def __iter__(self) -> Iterator[bytes]:
        size = 0
        for chunk in cast("httpx.SyncByteStream", self._inner):
            size += len(chunk)
            if size > self._limit:
                raise self._too_large()
            yield chunk

    async def aclose(self) -> None:
        await cast("httpx.AsyncByteStream", self._inner).aclose()

    def close(self) -> None:
        cast("httpx.SyncByteStream", self._inner).close()
