"""The seam strategies compose on: `Call`, `Handler`, and the terminal `Send`.

A pipeline is a chain of handlers built once per transport, innermost first
(starlette's way: each strategy is constructed around the next, so the first
in the list ends up outermost). Each strategy is a small object with an async
`handle` and a sync `handle_sync`, both thin drivers over a pure decision
(the breaker's state machine, the retry's delays, the limiter's counts).

The chain is per transport; the `Call` is per logical request: what the
strategies share about it (the client, the method, the normalised host, the
current deadline) without rebuilding the request.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import threading
from typing import Any, Final, Literal, Protocol

import httpx

__all__ = [
    "LAYER_MARK",
    "Call",
    "DeadlineKind",
    "Handler",
    "Send",
    "close_quietly",
    "close_quietly_sync",
    "marked_by",
]

LAYER_MARK: Final = "http_resilience.layer"
"""A request extension every attempt carries: the task (async) or thread (sync)
the attempt runs in. A resilient transport that receives a request marked with
its own task or thread runs inside another one's attempt: a second layer."""

DeadlineKind = Literal["attempt", "total"]


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
            (async only); `Send` marks attempts with it.
    """

    __slots__ = (
        "attempt",
        "client",
        "deadline",
        "deadline_kind",
        "deadline_span",
        "host",
        "method",
        "owner",
        "phase_timeout",
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
        self.owner: asyncio.Task[Any] | None = None

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
        return twin

    def where(self) -> str:
        """``"GET https://host:443 (client 'name')"``, for messages."""
        return f"{self.method} {self.host} (client {self.client!r})"


class Handler(Protocol):
    """One link of the chain: a strategy, or the terminal `Send`.

    A link treats the request it is handed as read-only: one that needs to
    change it passes a copy inward (`Send` copies it for every attempt).
    """

    async def handle(self, request: httpx.Request, call: Call) -> httpx.Response:
        """Handle `request` on an event loop and return its response."""
        ...

    def handle_sync(self, request: httpx.Request, call: Call) -> httpx.Response:
        """Handle `request`, blocking, and return its response."""
        ...


class Send:
    """The innermost link: one physical attempt through the wrapped transport.

    Every attempt is a fresh `httpx.Request`: headers and extensions of its
    own, the same replayable body (re-sent whole). Its extensions carry
    `LAYER_MARK` and, when the pipeline owns time, ``call.phase_timeout`` as
    its httpx timeouts. The caller's request is never changed.

    Args:
        inner: The wrapped transport; async for `handle`, sync for
            `handle_sync`.
    """

    __slots__ = ("_async", "_sync")

    def __init__(self, inner: httpx.AsyncBaseTransport | httpx.BaseTransport) -> None:
        self._async = inner if isinstance(inner, httpx.AsyncBaseTransport) else None
        self._sync = inner if isinstance(inner, httpx.BaseTransport) else None

    async def handle(self, request: httpx.Request, call: Call) -> httpx.Response:
        """Send one attempt through the async transport."""
        inner = self._async
        if inner is None:
            raise TypeError("this pipeline wraps a sync transport: use handle_sync")
        owner = call.owner
        if owner is None:
            owner = call.owner = asyncio.current_task()
        return await inner.handle_async_request(_attempt(request, owner, call))

    def handle_sync(self, request: httpx.Request, call: Call) -> httpx.Response:
        """Send one attempt through the sync transport."""
        inner = self._sync
        if inner is None:
            raise TypeError("this pipeline wraps an async transport: use handle")
        return inner.handle_request(_attempt(request, threading.get_ident(), call))


def marked_by(request: httpx.Request, owner: object) -> bool:
    """Whether `request` is an attempt of a resilient transport run by `owner`."""
    mark = request.extensions.get(LAYER_MARK)
    return mark is not None and mark == owner


def _attempt(request: httpx.Request, owner: object, call: Call) -> httpx.Request:
    # The request's attributes (its body stream, and its content when read)
    # with headers and extensions of its own: what `httpx.Request(...)` would
    # build from them, without validating again a URL and headers known valid.
    attempt = httpx.Request.__new__(httpx.Request)
    vars(attempt).update(vars(request))
    attempt.headers = httpx.Headers(request.headers)
    extensions = dict(request.extensions)
    extensions[LAYER_MARK] = owner
    seconds = call.phase_timeout
    if seconds is not None:
        extensions["timeout"] = {
            "connect": seconds,
            "read": seconds,
            "write": seconds,
            "pool": seconds,
        }
    attempt.extensions = extensions
    return attempt


async def close_quietly(response: httpx.Response) -> None:
    """Close a response nobody will read; a failure to close is not the call's."""
    # A connection that breaks while closing is closed all the same.
    with contextlib.suppress(Exception):
        await response.aclose()


def close_quietly_sync(response: httpx.Response) -> None:
    """`close_quietly` for a sync response."""
    with contextlib.suppress(Exception):
        response.close()
