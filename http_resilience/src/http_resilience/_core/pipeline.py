"""The seam strategies compose on: `Call`, the handlers, and the terminal sends.

A pipeline is a chain of handlers built once per transport, innermost first
(starlette's way: each strategy is constructed around the next, so the first
in the list ends up outermost). A chain is async (`AsyncHandler`, ending in
`AsyncSend`) or sync (`SyncHandler`, ending in `SyncSend`), never both: each
strategy's async and sync handlers are thin drivers over one decision (the
breaker's state machine, the retry's delays, the limiter's counts), and a
strategy that only makes sense on an event loop (hedging) has no sync handler
at all.

The chain is per transport; the `Call` is per logical request: what the
strategies share about it (the client, the method, the normalised host, the
current deadline) without rebuilding the request.
"""

from __future__ import annotations

import contextlib
import math
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from typing import TYPE_CHECKING, Final, Literal, Protocol, cast

import httpx

from http_resilience._core.backend import current_task
from http_resilience._core.classify import InvalidStatusError
from http_resilience._core.errors import AttemptStalledError, ResponseTooLargeError
from http_resilience._core.hosts import host_key
from http_resilience._core.nested import RETRY_ATTEMPT_HEADER
from http_resilience._core.pool import PoolWait, pool_sweeper
from http_resilience._core.raw_headers import header_writer

if TYPE_CHECKING:
    from http_resilience._core.telemetry import Telemetry

__all__ = [
    "LAYER_MARK",
    "AsyncHandler",
    "AsyncSend",
    "Budget",
    "Call",
    "DeadlineKind",
    "DeadlineTeller",
    "Stamp",
    "SyncHandler",
    "SyncSend",
    "charged",
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

DeadlineKind = Literal["attempt", "total"]

DeadlineTeller = Callable[[httpx.Request, float], None]
"""Writes into an attempt the time its deadline (on the pipeline's clock)
leaves it: `deadline_teller`."""

Stamp = Callable[[httpx.Request, httpx.Request], None]
"""Writes into each attempt before it is sent (the call's correlation id): the
attempt's headers and extensions are its own, never the caller's."""


class Budget(Protocol):
    """What a retry or a hedge asks before it sends again (the retry budget)."""

    def withdraw(self, now: float) -> bool:
        """Charge one more attempt at `now`: True if allowed, False if refused."""
        ...

    def refund(self, now: float) -> None:
        """Give back an attempt charged at `now` but refused in this process."""
        ...


def charged(call: Call, now: float, telemetry: Telemetry) -> bool:
    """Charge the call's retry budget, if any, for one more attempt at `now`.

    True when it may go (or there is no budget); False when the budget
    refuses, reported as a `RejectionEvent` of reason ``"retry_budget"``. The
    retry and hedging both ask it.
    """
    budget = call.budget
    if budget is None or budget.withdraw(now):
        return True
    telemetry.rejection(call.method, call.host, "retry_budget")
    return False


class Call:
    """One logical request as the strategies see it: shared, mutable, per call.

    Attributes:
        client: The client's name.
        method: The request's method.
        host: The normalised ``scheme://host:port``: safe to log.
        attempt: The physical attempt in progress, from 1.
        deadline: When the innermost timeout around this point runs out, in
            seconds on the pipeline's clock; infinity when there is none. A
            timeout strategy sets it for the strategies inside it, so a wait
            can tell whether it would pass the deadline.
        deadline_kind: Which timeout `deadline` belongs to.
        deadline_span: That timeout's length, in seconds.
        phase_timeout: When set, each attempt's httpx phase timeouts (connect,
            read, write, pool), in seconds: the pipeline owns time.
        owner: The task the call runs in, once a strategy has looked it up
            (async only; an `asyncio.Task`, or anyio's `TaskInfo` on trio:
            `current_task`); `AsyncSend` marks attempts with it.
        budget: The retry budget the retries and hedged copies of this call
            spend from, set by a retry budget around them; None: no budget.
        tell_attempt: Whether attempts after the first carry their number
            (`RETRY_ATTEMPT_HEADER`), set by a retry that detects nested
            retries.
        pool_timeout: When set with `phase_timeout`, the bound of the wait for
            a connection of a pool the send can see (`pool_sweeper`), in
            seconds: the time the deadline around the attempt's leaves, since
            the attempt's own clock starts once it has a connection.
        pool_wait: Set by the timeout that cuts the attempt (async only): told
            by the send when the attempt leaves the pool's queue.
    """

    __slots__ = (
        "attempt",
        "budget",
        "client",
        "deadline",
        "deadline_kind",
        "deadline_span",
        "host",
        "method",
        "owner",
        "phase_timeout",
        "pool_timeout",
        "pool_wait",
        "tell_attempt",
    )

    def __init__(self, client: str, method: str, host: str) -> None:
        self.client = client
        self.method = method
        self.host = host
        self.attempt = 1
        self.deadline = math.inf
        self.deadline_kind: DeadlineKind = "total"
        self.deadline_span = math.inf
        self.phase_timeout: float | None = None
        self.pool_timeout: float | None = None
        self.pool_wait: PoolWait | None = None
        self.owner: object = None
        self.budget: Budget | None = None
        self.tell_attempt = False

    def fork(self, attempt: int) -> Call:
        """A copy of this call for an attempt that runs beside others (a hedge).

        The copy has the same deadline; its `owner` is left unset, so the
        strategies inside look up the task the attempt runs in (its own).
        """
        twin = Call(self.client, self.method, self.host)
        twin.attempt = attempt
        twin.deadline = self.deadline
        twin.deadline_kind = self.deadline_kind
        twin.deadline_span = self.deadline_span
        twin.phase_timeout = self.phase_timeout
        twin.pool_timeout = self.pool_timeout
        twin.budget = self.budget
        twin.tell_attempt = self.tell_attempt
        return twin

    def where(self) -> str:
        """``"GET https://host:443 (client 'name')"``, for messages."""
        return f"{self.method} {self.host} (client {self.client!r})"


class AsyncHandler(Protocol):
    """One link of an async chain: a strategy, or the terminal `AsyncSend`.

    A link treats the request it is handed as read-only: one that needs to
    change it passes a copy inward (the send copies it for every attempt).
    """

    async def handle(self, request: httpx.Request, call: Call) -> httpx.Response:
        """Handle `request` on an event loop and return its response."""
        ...


class SyncHandler(Protocol):
    """One link of a sync chain: a strategy, or the terminal `SyncSend`."""

    def handle_sync(self, request: httpx.Request, call: Call) -> httpx.Response:
        """Handle `request`, blocking, and return its response."""
        ...


class AsyncSend:
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

    __slots__ = ("_buffer", "_inner", "_stamp", "_sweep", "_tell")

    def __init__(
        self,
        inner: httpx.AsyncBaseTransport,
        stamp: Stamp | None = None,
        tell_deadline: DeadlineTeller | None = None,
        buffer: int | None = None,
    ) -> None:
        self._inner = inner
        self._stamp = stamp
        self._sweep = pool_sweeper(inner)
        self._tell = tell_deadline
        self._buffer = buffer

    async def handle(self, request: httpx.Request, call: Call) -> httpx.Response:
        """Send one attempt through the async transport."""
        owner = call.owner
        if owner is None:
            owner = call.owner = current_task()
        watched = self._sweep is not None
        attempt = _attempt(request, owner, call, watched)
        if self._stamp is not None:
            self._stamp(attempt, request)
        if self._tell is not None and call.deadline != math.inf:
            self._tell(attempt, call.deadline)
        if call.attempt > 1 and call.tell_attempt:
            _tell_attempt(attempt, call.attempt)
        wait = call.pool_wait
        if watched and wait is not None:
            wait.watch(attempt.extensions)
        try:
            response = await self._inner.handle_async_request(attempt)
        except BaseException:
            if self._sweep is not None:
                await self._sweep.sweep_async()
            raise
        if not _STATUS_RANGE[0] <= response.status_code <= _STATUS_RANGE[1]:
            await close_quietly(response)
            raise _bad_status(request, response.status_code)
        if self._buffer is None:
            if call.phase_timeout is not None:
                response.stream = _Watched(response.stream, call.phase_timeout, request)
        else:
            # The body, read inside the attempt: under its deadline, and a
            # broken one is a failed attempt the retry sees. Its raw bytes
            # are served again from memory: the response is as httpx's
            # transports leave it (unread, open) for the client to read.
            body = _Bounded(response.stream, self._buffer, request)
            try:
                raw = b"".join([chunk async for chunk in body])
                await body.aclose()
                response.stream = httpx.ByteStream(raw)
            except BaseException:
                await close_quietly(response)
                if self._sweep is not None:
                    await self._sweep.sweep_async()
                raise
        return response


class SyncSend:
    """`AsyncSend`'s sync twin: one attempt through a sync transport.

    Args:
        inner: The wrapped sync transport.
        stamp: As for `AsyncSend`.
    """

    __slots__ = ("_buffer", "_inner", "_stamp", "_sweep", "_tell")

    def __init__(
        self,
        inner: httpx.BaseTransport,
        stamp: Stamp | None = None,
        tell_deadline: DeadlineTeller | None = None,
        buffer: int | None = None,
    ) -> None:
        self._inner = inner
        self._stamp = stamp
        self._sweep = pool_sweeper(inner)
        self._tell = tell_deadline
        self._buffer = buffer

    def handle_sync(self, request: httpx.Request, call: Call) -> httpx.Response:
        """Send one attempt through the sync transport."""
        attempt = _attempt(
            request, threading.get_ident(), call, self._sweep is not None
        )
        if self._stamp is not None:
            self._stamp(attempt, request)
        if self._tell is not None and call.deadline != math.inf:
            self._tell(attempt, call.deadline)
        if call.attempt > 1 and call.tell_attempt:
            _tell_attempt(attempt, call.attempt)
        try:
            response = self._inner.handle_request(attempt)
        except BaseException:
            if self._sweep is not None:
                self._sweep.sweep_sync()
            raise
        if not _STATUS_RANGE[0] <= response.status_code <= _STATUS_RANGE[1]:
            close_quietly_sync(response)
            raise _bad_status(request, response.status_code)
        if self._buffer is None:
            if call.phase_timeout is not None:
                response.stream = _Watched(response.stream, call.phase_timeout, request)
        else:
            body = _Bounded(response.stream, self._buffer, request)
            try:
                raw = b"".join(body)
                body.close()
                response.stream = httpx.ByteStream(raw)
            except BaseException:
                close_quietly_sync(response)
                if self._sweep is not None:
                    self._sweep.sweep_sync()
                raise
        return response


class _Watched(httpx.AsyncByteStream, httpx.SyncByteStream):
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
    """The reads of a `_Watched` body: a read timeout becomes a stall."""

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


class _Bounded(httpx.AsyncByteStream, httpx.SyncByteStream):
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


_STATUS_RANGE: Final = (100, 599)


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


def _attempt(
    request: httpx.Request, owner: object, call: Call, pooled: bool
) -> httpx.Request:
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
    attempt.headers = httpx.Headers(request.headers)
    extensions = dict(request.extensions)
    extensions[LAYER_MARK] = owner
    seconds = call.phase_timeout
    if seconds is not None:
        # A pool the send sees waits for the bound its timeout set; another
        # transport's pool (one hiding httpx's) for the attempt's own time.
        pool = call.pool_timeout if pooled else None
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
    return attempt


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
