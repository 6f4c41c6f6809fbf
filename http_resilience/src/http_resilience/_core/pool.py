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
from typing import Any

import httpx

__all__ = ["Sweeper", "pool_sweeper"]

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
