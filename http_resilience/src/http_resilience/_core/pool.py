"""Giving back the pool slots httpcore loses when a request is cancelled.

httpcore 1.0.9 (encode/httpcore#1093, open; #830 and #658 before it) loses a
connection slot when a request is cancelled, or its pool wait times out, at
the wrong moment:

- handed a *new* connection by another request's exit, before it starts
  connecting: the connection stays, never connected and never failed;
- after its connection connected, before its request began on it: the
  connection stays, connected, in HTTP/1.1's ``NEW`` state.

Neither is closed, expired, idle or available, and no request holds it any
more, so it keeps its slot for ever; once `max_connections` of them pile up,
every later request fails with `httpx.PoolTimeout` against a healthy host
until the process restarts.

The pipeline cancels attempts (an attempt timeout's cut, a hedge's loser, a
caller's cancel), and a herd of calls on a small pool loses every slot within
a second. So after an attempt through an httpx transport fails, for whatever
reason, `Sweeper` takes such connections out of the pool: one that no queued
or running request holds and that never connected, or connected and never
began a request. The first has no socket; the second's is closed. A
connection a request still holds (connecting now, or about to) is left alone.

Only httpx's own transports (`httpx.AsyncHTTPTransport`, `httpx.HTTPTransport`
or a subclass) are swept, only their direct connections (not a proxy's), and
only when their pool has httpcore 1.0's internals, checked when the transport
is wrapped: another pool is not swept at all rather than swept wrong. A
transport of your own around httpx's hides its pool: extend httpx's instead.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

import httpx

__all__ = ["PoolWait", "Sweeper", "pool_sweeper"]

_Trace = Callable[[str, dict[str, Any]], Awaitable[None]]

# httpcore's own classes, known by name: httpx brings httpcore, which this
# package does not import, nor declare.
_DIRECT = frozenset({"AsyncHTTPConnection", "HTTPConnection"})
_INTERNALS = ("_connections", "_requests", "_optional_thread_lock")


class Sweeper:
    """Takes the orphaned connections out of one httpcore pool.

    Args:
        pool: An `httpcore.AsyncConnectionPool` or `httpcore.ConnectionPool`.
    """

    __slots__ = ("_pool",)

    def __init__(self, pool: Any) -> None:
        self._pool = pool

    def sweep(self) -> list[Any]:
        """Take the orphans out; those with a socket, for the caller to close."""
        pool = self._pool
        with pool._optional_thread_lock:
            connections: list[Any] = pool._connections
            owned = {id(request.connection) for request in pool._requests}
            orphans = [
                connection
                for connection in connections
                if id(connection) not in owned and _unused(connection)
            ]
            for connection in orphans:
                connections.remove(connection)
        return [c for c in orphans if getattr(c, "_connection", None) is not None]

    async def sweep_async(self) -> None:
        """`sweep`, then close the sockets of what it took out.

        A failure to close is not the attempt's. A cancel while closing (the
        socket is already shut when it comes) is raised once all are closed.
        """
        cancelled: BaseException | None = None
        for connection in self.sweep():
            try:
                await connection.aclose()
            except Exception:  # closed all the same
                pass
            except BaseException as exc:
                cancelled = cancelled or exc
        if cancelled is not None:
            raise cancelled

    def sweep_sync(self) -> None:
        """`sweep`, then close the sockets of what it took out."""
        for connection in self.sweep():
            with contextlib.suppress(Exception):
                connection.close()


class PoolWait:
    """When an async attempt left the queue for a slot of the client's own pool.

    httpcore queues a request that finds every connection taken, and starts
    its pool timeout afresh each time a queued request is woken and finds the
    connection gone again, so the wait has no bound of its own. Time in that
    queue is the client's, not the host's: the attempt's timeout reads here
    whether the attempt still waits (`queued`) and when it stopped
    (`left_at`), to start the host's clock only then.

    The wait ends at httpcore's first trace event for the request (it opens a
    connection, or sends on one it was given), read through the request's
    ``trace`` extension (`watch`); the caller's own trace callback still gets
    every event.

    Args:
        now: The event loop's time.

    Attributes:
        watched: Whether the attempt went into a pool this can see.
        left_at: When the attempt left the queue, in loop time; None: not yet.
        then: Called once the attempt leaves the queue, if set by then.
    """

    __slots__ = ("_now", "left_at", "then", "watched")

    def __init__(self, now: Callable[[], float]) -> None:
        self._now = now
        self.watched = False
        self.left_at: float | None = None
        self.then: Callable[[], None] | None = None

    def waited(self, start: float) -> float:
        """Seconds from `start` (loop time) until the attempt left the queue."""
        left_at = self.left_at
        return 0.0 if left_at is None else left_at - start

    @property
    def queued(self) -> bool:
        """Whether the attempt is in the pool's queue, no connection begun yet."""
        return self.watched and self.left_at is None

    def watch(self, extensions: MutableMapping[str, Any]) -> None:
        """Learn from the attempt's trace events when it leaves the queue.

        Args:
            extensions: The attempt's own extensions, which httpcore reads
                afresh for each traced step: once the wait is over the
                caller's trace callback (or none) is put back.
        """
        own: _Trace | None = extensions.get("trace")

        async def trace(name: str, info: dict[str, Any]) -> None:
            if self.left_at is None:
                self.left_at = self._now()
                if own is None:
                    del extensions["trace"]
                else:
                    extensions["trace"] = own
                then = self.then
                if then is not None:
                    then()
            if own is not None:
                await own(name, info)

        extensions["trace"] = trace
        self.watched = True


def pool_sweeper(
    transport: httpx.AsyncBaseTransport | httpx.BaseTransport,
) -> Sweeper | None:
    """The `Sweeper` of `transport`'s pool; None when there is nothing to sweep.

    Nothing: a transport other than httpx's own, or a pool whose internals are
    not httpcore 1.0's. A proxy's pool is swept of nothing: its connections
    are of other kinds.
    """
    if not isinstance(transport, (httpx.AsyncHTTPTransport, httpx.HTTPTransport)):
        return None
    pool: Any = getattr(transport, "_pool", None)
    if not all(hasattr(pool, name) for name in _INTERNALS):
        return None
    return Sweeper(pool)


def _unused(connection: object) -> bool:
    """Never connected nor failed, or connected with no request begun on it."""
    kind = type(connection)
    if kind.__name__ not in _DIRECT or kind.__module__.split(".")[0] != "httpcore":
        return False
    inner = getattr(connection, "_connection", False)
    if inner is None:
        return getattr(connection, "_connect_failed", True) is False
    state = getattr(inner, "_state", None)
    return getattr(state, "name", None) == "NEW"
