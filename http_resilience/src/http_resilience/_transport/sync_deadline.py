"""Hold a sync attempt to its deadline at every socket operation.

A blocking attempt cannot be cancelled from outside, and httpx's timeouts bound
each socket operation, not the phase it belongs to: a server that sends its
answer's head a byte at a time starts the read timeout afresh with every byte.
So the deadline goes where the thread blocks. While a sync attempt runs, its
`SyncTimeout` keeps the attempt's deadline in a thread-local
(`attempt_deadline`); `DeadlineBackend`, put in as the network backend of the
`httpx.HTTPTransport` a `ResilientTransport` wraps (`hold_deadlines`), gives
each connect, TLS handshake, read and write the thread makes the time left as
its timeout (never more than httpx's own), and raises httpx's timeout once
none is left. No thread and no timer: a thread-local read per socket
operation, and a clock read while a deadline is set. The first operation of
an attempt starts its clock (`AttemptDeadline.due`): the time before it was
spent waiting for a slot of the client's own pool, which is not the host's.

httpx builds its connection pool itself and takes no network backend, so the
backend is set on the pool it built (``transport._pool._network_backend``):
private to httpx and httpcore, and tested against the real thing. A transport
that is not an `httpx.HTTPTransport`, or whose pool has no such attribute, is
left alone; its attempts are bounded by the phase timeouts alone.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

import httpx

from http_resilience._core.clock import attempt_deadline, real_time

if TYPE_CHECKING:
    # httpcore's base classes, to type checkers only: httpx brings httpcore,
    # but this package declares httpx alone, so it never imports httpcore.
    from httpcore import NetworkBackend, NetworkStream

__all__ = ["WRITE_PIECE", "DeadlineBackend", "DeadlineStream", "hold_deadlines"]

WRITE_PIECE: Final = 64 * 1024
"""A write longer than this goes out in pieces, each given the time left."""


def _bounded(when: float, timeout: float | None, error: type[Exception]) -> float:
    """`timeout` cut to the time left before `when`; `error` if none is left."""
    left = when - real_time()
    if left <= 0:
        raise error("the attempt's deadline passed")
    return left if timeout is None or left < timeout else timeout


def _left(timeout: float | None, error: type[Exception]) -> float | None:
    """`timeout` cut to the thread's attempt deadline; as it is outside an attempt.

    Raises:
        error: The attempt has no time left.
    """
    when = attempt_deadline().due()
    return timeout if when is None else _bounded(when, timeout, error)


class DeadlineStream:
    """A network stream whose operations end at the thread's attempt deadline.

    Outside an attempt (no deadline set on the thread: a body read after the
    attempt returned, or the transport used without a pipeline) each
    operation is passed on unchanged.

    Args:
        stream: The stream that does the I/O.
    """

    __slots__ = ("_stream",)

    def __init__(self, stream: NetworkStream) -> None:
        self._stream = stream

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        """Read, for at most the time left.

        Raises:
            httpx.ReadTimeout: No time is left.
        """
        return self._stream.read(max_bytes, _left(timeout, httpx.ReadTimeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        """Write; each piece of `WRITE_PIECE` bytes for at most the time left.

        Raises:
            httpx.WriteTimeout: No time is left.
        """
        when = attempt_deadline().due()
        if when is None:
            self._stream.write(buffer, timeout)
            return
        stream = self._stream
        if len(buffer) <= WRITE_PIECE:
            stream.write(buffer, _bounded(when, timeout, httpx.WriteTimeout))
            return
        for start in range(0, len(buffer), WRITE_PIECE):
            piece = buffer[start : start + WRITE_PIECE]
            stream.write(piece, _bounded(when, timeout, httpx.WriteTimeout))

    def start_tls(
        self,
        ssl_context: Any,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> DeadlineStream:
        """The TLS handshake, for at most the time left; the TLS stream, held too.

        Raises:
            httpx.ConnectTimeout: No time is left.
        """
        timeout = _left(timeout, httpx.ConnectTimeout)
        return DeadlineStream(
            self._stream.start_tls(ssl_context, server_hostname, timeout)
        )

    def close(self) -> None:
        """Close the stream."""
        self._stream.close()

    def get_extra_info(self, info: str) -> Any:
        """What the stream says about itself."""
        return self._stream.get_extra_info(info)


class DeadlineBackend:
    """A network backend whose connections end at the thread's attempt deadline.

    Each address a host name resolves to is tried for at most the time left;
    the name resolution itself (a blocking ``getaddrinfo``) is not bounded.

    Args:
        backend: The backend that connects.
    """

    __slots__ = ("_backend",)

    def __init__(self, backend: NetworkBackend) -> None:
        self._backend = backend

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Any = None,
    ) -> DeadlineStream:
        """Connect, for at most the time left.

        Raises:
            httpx.ConnectTimeout: No time is left.
        """
        return DeadlineStream(
            self._backend.connect_tcp(
                host,
                port,
                timeout=_left(timeout, httpx.ConnectTimeout),
                local_address=local_address,
                socket_options=socket_options,
            )
        )

    def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Any = None
    ) -> DeadlineStream:
        """Connect to a Unix socket, for at most the time left.

        Raises:
            httpx.ConnectTimeout: No time is left.
        """
        timeout = _left(timeout, httpx.ConnectTimeout)
        return DeadlineStream(
            self._backend.connect_unix_socket(
                path, timeout=timeout, socket_options=socket_options
            )
        )

    def sleep(self, seconds: float) -> None:
        """Wait between connection attempts (httpcore's ``retries``)."""
        self._backend.sleep(seconds)


def hold_deadlines(transport: object) -> bool:
    """Put a `DeadlineBackend` under `transport`'s connections; whether it could.

    Only an `httpx.HTTPTransport` (or a subclass) can take it: its pool's
    backend is wrapped, so connections it opens from now on hold the deadline
    of the attempt that uses them. Anything else is left as it is. Calling it
    twice wraps once.
    """
    if not isinstance(transport, httpx.HTTPTransport):
        return False
    pool: Any = getattr(transport, "_pool", None)
    backend = getattr(pool, "_network_backend", None)
    if backend is None:
        return False
    if not isinstance(backend, DeadlineBackend):
        pool._network_backend = DeadlineBackend(backend)
    return True
