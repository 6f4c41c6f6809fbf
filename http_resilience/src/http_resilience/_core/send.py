"""The terminal sends: one physical attempt through the wrapped transport.

`AsyncSend` and `SyncSend` end a chain of handlers (`http_resilience._core.call`).
Both are thin drivers over what `_Send` decides: the attempt a request becomes
(`LAYER_MARK`, the phase timeouts, the stamps), the status it may answer, and
what of the body is read inside the attempt. Only the I/O differs: awaiting
the transport, sweeping its pool, reading and closing the body.
"""

from __future__ import annotations

import contextlib
import math
import threading
from collections.abc import Callable
from typing import Final, Generic, TypeVar

import httpx

from http_resilience._core.backend import current_task
from http_resilience._core.bodies import BoundedBody, WatchedBody
from http_resilience._core.call import Call
from http_resilience._core.classify import InvalidStatusError
from http_resilience._core.hosts import host_key
from http_resilience._core.nested import RETRY_ATTEMPT_HEADER
from http_resilience._core.pool import pool_sweeper
from http_resilience._core.raw_headers import copy_headers, header_writer

__all__ = [
    "LAYER_MARK",
    "AsyncSend",
    "DeadlineTeller",
    "Stamp",
    "SyncSend",
    "close_quietly",
    "close_quietly_sync",
    "deadline_teller",
    "marked_by",
]

LAYER_MARK: Final = "http_resilience.layer"
"""A request extension every attempt carries: the task (async) or thread (sync)
the attempt runs in. A resilient transport that receives a request marked with
its own task or thread runs inside another one's attempt: a second layer."""

POOL_LEAD: Final = 0.1
"""When the pipeline owns time, an attempt's wait for a connection from the
client's own pool ends this much sooner than the bound its timeout sets for
it (a tenth of it when that is less): httpx raises `httpx.PoolTimeout`, which
the timeout reports as the pool's refusal, before its own cut would have to
end the wait."""

DeadlineTeller = Callable[[httpx.Request, float], None]
"""Writes into an attempt the time its deadline (on the pipeline's clock)
leaves it: `deadline_teller`."""

Stamp = Callable[[httpx.Request, httpx.Request], None]
"""Writes into each attempt before it is sent (the call's correlation id): the
attempt's headers and extensions are its own, never the caller's."""


Transport = TypeVar("Transport", httpx.AsyncBaseTransport, httpx.BaseTransport)


class _Send(Generic[Transport]):
    """What the async and the sync send share: the attempt and its checks.

    The body is read inside the attempt when buffered: under its deadline,
    and a broken one is a failed attempt the retry sees. Its raw bytes are
    then served again from memory: the response is as httpx's transports
    leave it (unread, open) for the client to read. Unbuffered, a body of an
    attempt whose pipeline owns time is watched for a stall (`WatchedBody`).
    Each driver chooses in place (it runs on every attempt) and reads a
    buffered body in its `_buffered`.

    Args:
        inner: The wrapped transport (async for `AsyncSend`, sync for `SyncSend`).
        stamp: Run on each attempt before it is sent; None: nothing.
        tell_deadline: Writes the time the deadline leaves into each attempt
            (`deadline_teller`); None: nothing.
        buffer: When set, the body is read inside the attempt, at most this
            many bytes (`BoundedBody`); None: handed on unread.
    """

    __slots__ = ("_buffer", "_inner", "_stamp", "_sweep", "_tell")

    def __init__(
        self,
        inner: Transport,
        stamp: Stamp | None = None,
        tell_deadline: DeadlineTeller | None = None,
        buffer: int | None = None,
    ) -> None:
        self._inner: Transport = inner
        self._stamp = stamp
        self._sweep = pool_sweeper(inner)
        self._tell = tell_deadline
        self._buffer = buffer

    def _prepared(
        self, request: httpx.Request, owner: object, call: Call
    ) -> httpx.Request:
        """The attempt `request` becomes, marked with `owner` and stamped."""
        # The request's attributes (its body stream, and its content when read)
        # with headers and extensions of its own: what `httpx.Request(...)` would
        # build from them, without validating again a URL and headers known valid.
        attempt = httpx.Request.__new__(httpx.Request)
        if _PLAIN_REQUEST:
            # Attribute by attribute: the copy keeps CPython's compact layout,
            # which `vars(attempt).update(...)` would give up for a dict that every
            # later read of the attempt, httpx's included, pays for.
            attempt.method = request.method
            attempt.url = request.url
            attempt.stream = request.stream
            content: object = getattr(request, _CONTENT, _UNREAD)
            if content is not _UNREAD:
                setattr(attempt, _CONTENT, content)  # the body, once read
        else:
            vars(attempt).update(vars(request))
        attempt.headers = copy_headers(request.headers)
        extensions = dict(request.extensions)
        extensions[LAYER_MARK] = owner
        seconds = call.phase_timeout
        if seconds is not None:
            # A pool the send sees waits for the bound its timeout set; another
            # transport's pool (one hiding httpx's) for the attempt's own time.
            pool = call.pool_timeout if self._sweep is not None else None
            if pool is None:
                pool = seconds
            lead = pool * 0.1
            extensions["timeout"] = {
                "connect": seconds,
                "read": seconds,
                "write": seconds,
                "pool": pool - (lead if lead < POOL_LEAD else POOL_LEAD),
            }
        attempt.extensions = extensions
        if self._stamp is not None:
            self._stamp(attempt, request)
        if self._tell is not None and call.deadline != math.inf:
            self._tell(attempt, call.deadline)
        if call.attempt > 1 and call.tell_attempt:
            _tell_attempt(attempt, call.attempt)
        return attempt


class AsyncSend(_Send[httpx.AsyncBaseTransport]):
    """The innermost async link: one physical attempt through the wrapped transport.

    Every attempt is a fresh `httpx.Request`: headers and extensions of its
    own, the same replayable body (re-sent whole). Its extensions carry
    `LAYER_MARK` and, when the pipeline owns time, ``call.phase_timeout`` as
    its httpx timeouts (the pool's `POOL_LEAD` shorter). The caller's
    request is never changed. A response whose status is outside 100-599 is
    closed and raised as `InvalidStatusError` (an `httpx.RemoteProtocolError`):
    the host broke HTTP, never a 5xx; it is raised at once, not retried, and
    no breaker evidence.

    An attempt that fails in any way (a cancel included) has the wrapped
    transport's pool swept of the slots httpcore loses (`pool_sweeper`).

    Args:
        inner: The wrapped async transport.
        stamp: Run on each attempt before it is sent; None: nothing.
    """

    __slots__ = ()

    async def handle(self, request: httpx.Request, call: Call) -> httpx.Response:
        """Send one attempt through the async transport."""
        owner = call.owner
        if owner is None:
            owner = call.owner = current_task()
        attempt = self._prepared(request, owner, call)
        wait = call.pool_wait
        if self._sweep is not None and wait is not None:
            wait.watch(attempt.extensions)
        try:
            response = await self._inner.handle_async_request(attempt)
        except BaseException:
            await self._swept()
            raise
        if not _STATUS_RANGE[0] <= response.status_code <= _STATUS_RANGE[1]:
            await close_quietly(response)
            raise _bad_status(request, response.status_code)
        if self._buffer is None:
            return _watched(request, response, call)
        return await self._buffered(request, response, self._buffer)

    async def _buffered(
        self, request: httpx.Request, response: httpx.Response, limit: int
    ) -> httpx.Response:
        body = BoundedBody(response.stream, limit, request)
        try:
            raw = b"".join([chunk async for chunk in body])
            await body.aclose()
        except BaseException:
            await close_quietly(response)
            await self._swept()
            raise
        response.stream = httpx.ByteStream(raw)
        return response

    async def _swept(self) -> None:
        if self._sweep is not None:
            await self._sweep.sweep_async()


class SyncSend(_Send[httpx.BaseTransport]):
    """`AsyncSend`'s sync twin: one attempt through a sync transport.

    Args:
        inner: The wrapped sync transport.
        stamp: As for `AsyncSend`.
    """

    __slots__ = ()

    def handle_sync(self, request: httpx.Request, call: Call) -> httpx.Response:
        """Send one attempt through the sync transport."""
        attempt = self._prepared(request, threading.get_ident(), call)
        try:
            response = self._inner.handle_request(attempt)
        except BaseException:
            self._swept()
            raise
        if not _STATUS_RANGE[0] <= response.status_code <= _STATUS_RANGE[1]:
            close_quietly_sync(response)
            raise _bad_status(request, response.status_code)
        if self._buffer is None:
            return _watched(request, response, call)
        return self._buffered(request, response, self._buffer)

    def _buffered(
        self, request: httpx.Request, response: httpx.Response, limit: int
    ) -> httpx.Response:
        body = BoundedBody(response.stream, limit, request)
        try:
            raw = b"".join(body)
            body.close()
        except BaseException:
            close_quietly_sync(response)
            self._swept()
            raise
        response.stream = httpx.ByteStream(raw)
        return response

    def _swept(self) -> None:
        if self._sweep is not None:
            self._sweep.sweep_sync()


_STATUS_RANGE: Final = (100, 599)


def _watched(
    request: httpx.Request, response: httpx.Response, call: Call
) -> httpx.Response:
    """`response`, its body watched for a stall if the attempt has a phase timeout."""
    seconds = call.phase_timeout
    if seconds is not None:
        response.stream = WatchedBody(response.stream, seconds, request)
    return response


def _bad_status(request: httpx.Request, status_code: int) -> InvalidStatusError:
    """A status outside 100-599 is no HTTP answer: the host broke the protocol."""
    return InvalidStatusError(
        f"{request.method} {host_key(request.url)}: the server answered status "
        f"{status_code}, outside 100-599",
        request=request,
        status_code=status_code,
    )


def deadline_teller(header: str, now: Callable[[], float]) -> DeadlineTeller:
    """What writes `header` into each attempt: the milliseconds it has left.

    An integer, 0 once the deadline has passed; a value the request already
    carries under that name is replaced (it could only be stale).
    """
    put = header_writer(header)

    def tell(attempt: httpx.Request, deadline: float) -> None:
        left = (deadline - now()) * 1000
        put(attempt.headers, b"%d" % left if left > 0 else b"0")

    return tell


_put_attempt: Final = header_writer(RETRY_ATTEMPT_HEADER)


def _tell_attempt(attempt: httpx.Request, number: int) -> None:
    """Write the attempt's number into it: the server sees its caller retrying."""
    _put_attempt(attempt.headers, b"%d" % number)


def marked_by(request: httpx.Request, owner: object) -> bool:
    """Whether `request` is an attempt of a resilient transport run by `owner`."""
    mark = request.extensions.get(LAYER_MARK)
    return mark is not None and mark == owner


_UNREAD: Final = object()
_CONTENT: Final = "_content"


def _plain_request() -> bool:
    """Whether an `httpx.Request` holds exactly the attributes `_attempt` copies.

    It has since 0.18 (``_content`` once the body is read); an httpx that adds
    one gets the generic copy, which cannot miss it.
    """
    read = vars(httpx.Request("GET", "http://probe.invalid/", content=b"x"))
    copied = {"method", "url", "headers", "extensions", "stream", "_content"}
    return set(read) == copied


_PLAIN_REQUEST: Final = _plain_request()


async def close_quietly(response: httpx.Response) -> None:
    """Close a response nobody will read; a failure to close is not the call's."""
    # A connection that breaks while closing is closed all the same.
    with contextlib.suppress(Exception):
        await response.aclose()


def close_quietly_sync(response: httpx.Response) -> None:
    """`close_quietly` for a sync response."""
    with contextlib.suppress(Exception):
        response.close()
