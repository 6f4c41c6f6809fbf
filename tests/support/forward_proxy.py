"""A real HTTP forward proxy on 127.0.0.1, recording what it forwards.

The small part of an egress proxy the proxy tests need: a threaded TCP server
that reads one request in absolute form (``GET http://host:port/path
HTTP/1.1``), records it, sends it on to the origin in origin form, and relays
the origin's answer. One request per connection: the request goes on with
``Connection: close``, the answer comes back with it, so a client never
reuses a connection the proxy is about to drop. No ``CONNECT`` (plain http
only).

`aliases` maps host names only the proxy knows to the address it connects to:
a client that reaches ``http://origin.invalid:PORT`` went through the proxy,
since it could not have resolved the name itself.

Every socket operation is bounded (`IO_TIMEOUT`), and so are the sizes read.
A request the proxy cannot serve is answered 502 and recorded all the same.
"""

from __future__ import annotations

import socket
import socketserver
import threading
from collections.abc import Generator, Mapping
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from typing import cast
from urllib.parse import urlsplit

__all__ = ["ForwardProxy", "Forwarded", "serve_forward_proxy"]

HOST = "127.0.0.1"
IO_TIMEOUT = 10.0
JOIN_TIMEOUT = 10.0
MAX_HEAD = 64 * 1024
MAX_BODY = 1024 * 1024
_HOP_BY_HOP = frozenset(
    {b"connection", b"keep-alive", b"proxy-connection", b"proxy-authorization"}
)


@dataclass(frozen=True)
class Forwarded:
    """One request the proxy received.

    Attributes:
        method: The request's method.
        target: Its request target, as sent: an absolute URL for a proxy.
    """

    method: str
    target: str


@dataclass
class ForwardProxy:
    """A running forward proxy.

    Attributes:
        url: The proxy's URL, ``http://127.0.0.1:PORT``.
        aliases: Host names the proxy resolves itself, to an address.
    """

    url: str = ""
    aliases: Mapping[str, str] = field(default_factory=dict[str, str])
    _seen: list[Forwarded] = field(default_factory=list[Forwarded])
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def seen(self) -> list[Forwarded]:
        """Every request received so far, in order."""
        with self._lock:
            return list(self._seen)

    def record(self, forwarded: Forwarded) -> None:
        """Note one request (on the proxy's thread)."""
        with self._lock:
            self._seen.append(forwarded)


def _read_head(connection: socket.socket) -> tuple[bytes, bytes]:
    """The head (without its blank line) and what came after it."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = connection.recv(4096)
        if not chunk:
            raise ConnectionError("closed before the end of the head")
        data += chunk
        if len(data) > MAX_HEAD:
            raise ConnectionError("head too large")
    head, _, rest = data.partition(b"\r\n\r\n")
    return head, rest


def _headers(lines: list[bytes]) -> list[tuple[bytes, bytes]]:
    pairs: list[tuple[bytes, bytes]] = []
    for line in lines:
        name, _, value = line.partition(b":")
        pairs.append((name.strip(), value.strip()))
    return pairs


def _length(headers: list[tuple[bytes, bytes]]) -> int:
    for name, value in headers:
        if name.lower() == b"transfer-encoding":
            raise ConnectionError("chunked requests are not supported")
        if name.lower() == b"content-length":
            length = int(value)
            if not 0 <= length <= MAX_BODY:
                raise ConnectionError("body too large")
            return length
    return 0


def _head(first: bytes, headers: list[tuple[bytes, bytes]]) -> bytes:
    kept = [(n, v) for n, v in headers if n.lower() not in _HOP_BY_HOP]
    lines = [first, *(n + b": " + v for n, v in kept), b"Connection: close"]
    return b"\r\n".join(lines) + b"\r\n\r\n"


def _exchange(proxy: ForwardProxy, client: socket.socket) -> None:
    head, rest = _read_head(client)
    first, *lines = head.split(b"\r\n")
    method, target, version = first.decode("latin-1").split(" ")
    proxy.record(Forwarded(method, target))
    headers = _headers(lines)
    length = _length(headers)
    body = rest
    while len(body) < length:
        chunk = client.recv(65536)
        if not chunk:
            raise ConnectionError("closed before the end of the body")
        body += chunk
    url = urlsplit(target)
    if url.scheme != "http" or url.hostname is None:
        raise ConnectionError("not an absolute http URL")
    address = proxy.aliases.get(url.hostname, url.hostname)
    path = (url.path or "/") + (f"?{url.query}" if url.query else "")
    request_line = f"{method} {path} {version}".encode("latin-1")
    with socket.create_connection((address, url.port or 80), IO_TIMEOUT) as origin:
        origin.sendall(_head(request_line, headers) + body[:length])
        answer = b""
        while chunk := origin.recv(65536):
            answer += chunk
            if len(answer) > MAX_HEAD + MAX_BODY:
                raise ConnectionError("answer too large")
    answer_head, _, answer_body = answer.partition(b"\r\n\r\n")
    status, *answer_lines = answer_head.split(b"\r\n")
    client.sendall(_head(status, _headers(answer_lines)) + answer_body)


class _Handler(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        connection: socket.socket = self.request
        connection.settimeout(IO_TIMEOUT)
        try:
            _exchange(cast("_Server", self.server).proxy, connection)
        except (OSError, ValueError):
            bad = b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n"
            with suppress(OSError):
                connection.sendall(bad + b"Connection: close\r\n\r\n")


class _Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, proxy: ForwardProxy) -> None:
        super().__init__((HOST, 0), _Handler)
        self.proxy = proxy


@contextmanager
def serve_forward_proxy(
    aliases: Mapping[str, str] | None = None,
) -> Generator[ForwardProxy]:
    """Run a forward proxy for the block; `aliases`: names it resolves itself."""
    proxy = ForwardProxy(aliases=dict(aliases or {}))
    server = _Server(proxy)
    port: int = server.server_address[1]
    proxy.url = f"http://{HOST}:{port}"
    thread = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
    )
    thread.start()
    try:
        yield proxy
    finally:
        server.shutdown()
        server.server_close()
        thread.join(JOIN_TIMEOUT)
