"""A TCP proxy that injects faults between a client and a real server.

Toxiproxy is not available here, so this is the small part of it the chaos
suites need. A proxy listens on 127.0.0.1 (a free port) and forwards every
connection to one upstream ``host:port``, in a background thread with its own
event loop, so async and sync clients alike can use it (fixture `fault_proxy`).

One fault is in force at a time and `set_fault` switches it at once, also for
connections already open: each forwarding loop reads the current fault for
every chunk it moves. Without that a client's connection pool would hide a
fault switched after its first request.

| fault | what the client sees |
| --- | --- |
| `PassThrough()` | the server, unchanged |
| `Latency(seconds, jitter)` | each chunk of the answer held `seconds` ± `jitter` |
| `Blackhole()` | a connection that takes the request and never answers |
| `Reset()` | a TCP reset (RST) as soon as either side sends |
| `Refuse()` | connections refused; those open are closed at once |
| `SlowClose(seconds)` | the server's close delivered `seconds` late |
| `BandwidthCap(bytes_per_second)` | each connection, each way, paced to the cap |
| `Drip(seconds)` | the server's answer one byte at a time, `seconds` apart |
| `CloseMidBody(after_bytes)` | the answer cut after `after_bytes`, then a close |
| `Mix(header)` | per answer, the fault the server names in its `header` |

`Mix` lets the server decide each exchange's fault itself (a seeded plan on its
side): every request reaches the server and is counted there, and the proxy
applies what the answer's head asks for on the way back (see `Mix`).

Durations are seconds. Jitter is drawn from a `random.Random` seeded when the
proxy starts, so a run can be repeated. `stats()` counts connections accepted,
connections open now and the bytes forwarded each way.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import socket
import struct
import threading
from collections.abc import Coroutine, Generator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, TypeVar
from urllib.parse import urlsplit

import pytest

from http_resilience import SystemClock

__all__ = [
    "BandwidthCap",
    "Blackhole",
    "CloseMidBody",
    "Drip",
    "Fault",
    "FaultProxy",
    "Latency",
    "MakeProxy",
    "Mix",
    "PassThrough",
    "ProxyStats",
    "Refuse",
    "Reset",
    "SlowClose",
    "fault_proxy",
    "proxy_faults",
]

HOST = "127.0.0.1"
CHUNK = 64 * 1024
DEFAULT_SEED = 7
CONNECT_TIMEOUT = 5.0
STARTUP_TIMEOUT = 10.0
# How long set_fault, stats and close wait for the proxy's loop to answer.
CALL_TIMEOUT = 5.0
STOP_TIMEOUT = 5.0
# A capped connection writes at most this much of a second's allowance at once.
PACING_SLICE = 0.02  # seconds
# The longest answer head Mix reads; a longer one turns the connection raw.
MAX_HEAD = 64 * 1024

_CLOCK = SystemClock()
_T = TypeVar("_T")


@dataclass(frozen=True)
class PassThrough:
    """Forward everything unchanged: the proxy's initial state."""


@dataclass(frozen=True)
class Latency:
    """Hold every chunk the server sends for `seconds` ± `jitter` (at least 0).

    Raises:
        ValueError: a negative or non-finite duration.
    """

    seconds: float
    jitter: float = 0.0

    def __post_init__(self) -> None:
        _check_seconds("Latency.seconds", self.seconds)
        _check_seconds("Latency.jitter", self.jitter)


@dataclass(frozen=True)
class Blackhole:
    """Read and drop what the client sends; send it nothing, never close."""


@dataclass(frozen=True)
class Reset:
    """Answer the next chunk either side sends with a TCP reset to the client."""


@dataclass(frozen=True)
class Refuse:
    """Stop listening (connections are refused) and close those open."""


@dataclass(frozen=True)
class SlowClose:
    """When the server closes, close the client's side `seconds` later.

    Raises:
        ValueError: a negative or non-finite duration.
    """

    seconds: float

    def __post_init__(self) -> None:
        _check_seconds("SlowClose.seconds", self.seconds)


@dataclass(frozen=True)
class BandwidthCap:
    """Pace each connection, in each direction, to `bytes_per_second`.

    Raises:
        ValueError: a cap below 1.
    """

    bytes_per_second: int

    def __post_init__(self) -> None:
        if self.bytes_per_second < 1:
            raise ValueError(
                f"BandwidthCap.bytes_per_second must be >= 1, "
                f"got {self.bytes_per_second!r}"
            )


@dataclass(frozen=True)
class Drip:
    """Send the server's answer, head first, one byte every `seconds`.

    Each byte comes well within any read timeout longer than `seconds`, so a
    client bounded per read, not per phase, waits for the whole answer.

    Raises:
        ValueError: a negative or non-finite duration.
    """

    seconds: float

    def __post_init__(self) -> None:
        _check_seconds("Drip.seconds", self.seconds)


@dataclass(frozen=True)
class CloseMidBody:
    """Forward `after_bytes` more of the server's answer, then close the client.

    Counted per connection from the first chunk the fault sees on it; so set
    it just before the request whose answer it should cut.

    Raises:
        ValueError: a negative byte count.
    """

    after_bytes: int

    def __post_init__(self) -> None:
        if self.after_bytes < 0:
            raise ValueError(
                f"CloseMidBody.after_bytes must be >= 0, got {self.after_bytes!r}"
            )


@dataclass(frozen=True)
class Mix:
    """Give each answer the fault its server names in the answer's `header`.

    The server decides per exchange and says so in a response header, which
    the proxy removes before doing what it says:

    - ``reset``: the client gets a TCP reset instead of the answer;
    - ``blackhole``: no answer, ever; the connection stays open until the
      client leaves;
    - ``cut``: the head and the first half of the body, then a close;
    - ``slow-close SECONDS``: the answer framed by the close (its
      Content-Length removed), and the close `SECONDS` late.

    An answer without the header passes unchanged, and so does one with a
    value it does not know (its header left in place, so the client can tell).
    Mix reads answers framed by Content-Length, so it is not for HEAD requests;
    from an answer framed any other way on, the connection is forwarded as it
    comes. Switch to and from Mix between exchanges, not while an answer is on
    its way.

    Raises:
        ValueError: `header` is not a lowercase header name.
    """

    header: str = "x-chaos"

    def __post_init__(self) -> None:
        name = self.header
        if not (name and name.isascii() and name == name.lower()) or any(
            char in name for char in ": \t\r\n"
        ):
            raise ValueError(
                f"Mix.header must be a lowercase header name, got {name!r}"
            )


Fault = (
    PassThrough
    | Latency
    | Blackhole
    | Reset
    | Refuse
    | SlowClose
    | BandwidthCap
    | Drip
    | CloseMidBody
    | Mix
)


def _check_seconds(name: str, value: float) -> None:
    if not 0 <= value < float("inf"):
        raise ValueError(f"{name} must be finite and >= 0, got {value!r}")


@dataclass(frozen=True)
class _End:
    """How a connection under Mix ends: reset, held open, or closed `delay` late."""

    kind: Literal["reset", "hold", "close"]
    delay: float = 0.0


_CLOSE = _End("close")


@dataclass(eq=False)
class _Answers:
    """Where a connection under `Mix` is in its stream of answers.

    `feed` takes what the server sent and returns what to forward, and how the
    connection ends when an answer's instruction ends it (None: it goes on).
    """

    header: bytes
    held: bytearray = field(default_factory=bytearray)
    body_left: int = 0
    # Under `cut`: body bytes still forwarded before the close.
    cut_left: int | None = None
    # Under `slow-close`: seconds between the body's end and the close.
    close_delay: float | None = None
    raw: bool = False

    def feed(self, data: bytes) -> tuple[bytes, _End | None]:
        out = bytearray()
        held = self.held
        held += data
        while held:
            if self.raw:
                out += held
                held.clear()
                break
            if self.body_left:
                take = min(self.body_left, len(held))
                if self.cut_left is not None and take >= self.cut_left:
                    out += held[: self.cut_left]
                    held.clear()
                    return bytes(out), _CLOSE
                out += held[:take]
                del held[:take]
                self.body_left -= take
                if self.cut_left is not None:
                    self.cut_left -= take
                if not self.body_left and self.close_delay is not None:
                    held.clear()  # the client reads to the close: nothing follows
                    return bytes(out), _End("close", self.close_delay)
                continue
            end = held.find(b"\r\n\r\n")
            if end < 0:
                if len(held) > MAX_HEAD:
                    self.raw = True
                    continue
                break
            head = bytes(held[: end + 4])
            del held[: end + 4]
            finished = self._answer(head, out)
            if finished is not None:
                held.clear()
                return bytes(out), finished
        return bytes(out), None

    def flush(self) -> bytes:
        """What is held back, let go: Mix is no longer in force, or the server left."""
        rest = bytes(self.held)
        self.held.clear()
        return rest

    def _answer(self, head: bytes, out: bytearray) -> _End | None:
        """Read one answer's head: forward what it asks for, or end the connection."""
        status, *lines = head[:-4].split(b"\r\n")
        instruction: str | None = None
        length: int | None = None
        kept: list[bytes] = []
        for line in lines:
            name, _, value = line.partition(b":")
            name = name.strip().lower()
            if name == self.header:
                instruction = value.strip().decode("latin-1")
                continue
            if name == b"content-length" and value.strip().isdigit():
                length = int(value)
            kept.append(line)
        verb, _, argument = (instruction or "").partition(" ")
        if instruction is None or length is None:
            # Not ours to change, or framed some other way: from here on, raw.
            self.raw = length is None
            out += head
            self.body_left = length or 0
            return None
        if verb == "reset" and not argument:
            return _End("reset")
        if verb == "blackhole" and not argument:
            return _End("hold")
        if verb == "cut" and not argument:
            out += _head(status, kept)
            if length // 2 == 0:
                return _CLOSE
            self.body_left, self.cut_left = length, length // 2
            return None
        delay = _seconds(argument) if verb == "slow-close" else None
        if delay is None:
            out += head  # an instruction it does not know: the answer as it came
            self.body_left = length
            return None
        framed_by_close = [
            line
            for line in kept
            if line.partition(b":")[0].strip().lower()
            not in (b"content-length", b"connection")
        ]
        out += _head(status, [*framed_by_close, b"connection: close"])
        if not length:
            return _End("close", delay)
        self.body_left, self.close_delay = length, delay
        return None


def _head(status: bytes, lines: list[bytes]) -> bytes:
    return b"\r\n".join([status, *lines]) + b"\r\n\r\n"


def _seconds(text: str) -> float | None:
    try:
        seconds = float(text)
    except ValueError:
        return None
    return seconds if 0 <= seconds < float("inf") else None


@dataclass(frozen=True)
class ProxyStats:
    """A snapshot of the proxy's counters.

    Attributes:
        accepted: Connections accepted since the proxy started.
        open: Client connections open now.
        bytes_up: Bytes forwarded from clients to the server.
        bytes_down: Bytes forwarded from the server to clients.
    """

    accepted: int
    open: int
    bytes_up: int
    bytes_down: int


@dataclass(eq=False)
class _Pair:
    """One client connection and its connection to the server."""

    client: asyncio.StreamWriter
    client_reader: asyncio.StreamReader
    upstream: asyncio.StreamWriter | None = None
    done: asyncio.Event = field(default_factory=asyncio.Event)
    reset: bool = False
    # CloseMidBody: the fault in force when counting began, and bytes sent since.
    cut_fault: Fault | None = None
    cut_sent: int = 0
    # Mix: the answers read so far on this connection.
    answers: _Answers | None = None

    def finish(self, *, reset: bool = False) -> None:
        self.reset = self.reset or reset
        self.done.set()


class FaultProxy:
    """A running proxy, as `proxy_faults` and the `fault_proxy` fixture hand it out.

    Attributes:
        url: ``http://127.0.0.1:PORT``: the upstream URL's scheme, the proxy's port.
        port: The port the proxy listens on (kept while `Refuse` is in force).
    """

    def __init__(self, upstream: tuple[str, int], *, scheme: str, seed: int) -> None:
        self._upstream = upstream
        self._random = random.Random(seed)
        self._fault: Fault = PassThrough()
        self._pairs: set[_Pair] = set()
        self._handlers: set[asyncio.Task[None]] = set()
        self._lock = threading.Condition()
        self._accepted = 0
        self._bytes_up = 0
        self._bytes_down = 0
        self._ready = threading.Event()
        self._startup_error: BaseException | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._server: asyncio.Server | None = None
        # Bound with SO_REUSEPORT and never listening: holds the port while the
        # listener is closed under Refuse, so nobody else can take it.
        self._holder = _bound_socket(0)
        self.port: int = self._holder.getsockname()[1]
        self.url = f"{scheme}://{HOST}:{self.port}"
        self._thread = threading.Thread(
            target=self._run, name=f"fault-proxy-{self.port}", daemon=True
        )

    # --- the test's side ----------------------------------------------------

    def start(self) -> None:
        """Start the proxy's thread and wait until it listens.

        Raises:
            RuntimeError: the proxy did not start within its startup timeout.
        """
        self._thread.start()
        if not self._ready.wait(STARTUP_TIMEOUT):
            raise RuntimeError("fault proxy: did not start")
        if self._startup_error is not None:
            raise RuntimeError("fault proxy: did not start") from self._startup_error

    def set_fault(self, fault: Fault) -> None:
        """Put `fault` in force; returns once the proxy applies it.

        Connections already open get it from their next chunk; `Refuse` and
        leaving it take effect before this returns.
        """
        self._call(self._apply(fault))

    @property
    def fault(self) -> Fault:
        """The fault in force."""
        return self._fault

    def stats(self) -> ProxyStats:
        """The counters, read at once."""
        with self._lock:
            return ProxyStats(
                accepted=self._accepted,
                open=len(self._pairs),
                bytes_up=self._bytes_up,
                bytes_down=self._bytes_down,
            )

    def wait_idle(self, limit: float = 5.0) -> None:
        """Block until no client connection is open (the proxy has closed its side).

        Raises:
            TimeoutError: some are still open after `limit` seconds.
        """
        with self._lock:
            if not self._lock.wait_for(lambda: not self._pairs, limit):
                raise TimeoutError(
                    f"fault proxy: {len(self._pairs)} connection(s) still open "
                    f"after {limit} s"
                )

    def close(self) -> None:
        """Close every connection, stop listening and join the thread; idempotent.

        Raises:
            RuntimeError: the thread outlived the stop timeout.
        """
        loop, stop = self._loop, self._stop
        if loop is not None and stop is not None and self._thread.is_alive():
            with contextlib.suppress(RuntimeError):  # the loop has just closed
                loop.call_soon_threadsafe(stop.set)
        if self._thread.ident is not None:
            self._thread.join(STOP_TIMEOUT + CALL_TIMEOUT)
        self._holder.close()
        if self._thread.is_alive():
            raise RuntimeError("fault proxy: still running after its stop timeout")

    def _call(self, coroutine: Coroutine[Any, Any, _T]) -> _T:
        if self._loop is None:
            coroutine.close()
            raise RuntimeError("fault proxy: not started")
        future = asyncio.run_coroutine_threadsafe(coroutine, self._loop)
        return future.result(CALL_TIMEOUT)

    # --- the proxy's thread -------------------------------------------------

    def _run(self) -> None:
        try:
            asyncio.run(self._main())
        except BaseException as error:  # reported by start(), not lost in a thread
            self._startup_error = error
            raise
            self._ready.set()

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        await self._listen()
        self._ready.set()
        await self._stop.wait()
        if self._server is not None:
            self._server.close()
        for pair in list(self._pairs):
            pair.finish()
        if self._handlers:
            await asyncio.wait(self._handlers, timeout=STOP_TIMEOUT)
        # asyncio.run cancels whatever is left.

    async def _listen(self) -> None:
        self._server = await asyncio.start_server(
            self._handle, sock=_bound_socket(self.port, listen=True)
        )

    async def _apply(self, fault: Fault) -> None:
        was_refusing = isinstance(self._fault, Refuse)
        self._fault = fault
        if isinstance(fault, Refuse) and not was_refusing:
            if self._server is not None:
                self._server.close()
                self._server = None
            for pair in list(self._pairs):
                pair.finish()
            # Closed before set_fault returns, so a pooled connection is seen
            # closed by the client's very next request.
            if self._handlers:
                await asyncio.wait(set(self._handlers), timeout=CALL_TIMEOUT / 2)
        elif was_refusing and not isinstance(fault, Refuse):
            await self._listen()

    async def _handle(
        self, client_reader: asyncio.StreamReader, client: asyncio.StreamWriter
    ) -> None:
        task = asyncio.current_task()
        if task is not None:  # always, inside asyncio.start_server's handler
            self._handlers.add(task)
        pair = _Pair(client=client, client_reader=client_reader)
        with self._lock:
            self._accepted += 1
            self._pairs.add(pair)
        pumps: list[asyncio.Task[None]] = []
        try:
            if isinstance(self._fault, Refuse):
                return  # accepted just before the listener closed
            host, port = self._upstream
            try:
                async with asyncio.timeout(CONNECT_TIMEOUT):
                    upstream_reader, upstream = await asyncio.open_connection(
                        host, port
                    )
            except (OSError, TimeoutError):
                return
            pair.upstream = upstream
            pumps = [
                asyncio.create_task(self._pump_up(pair, upstream)),
                asyncio.create_task(self._pump_down(pair, upstream_reader)),
            ]
            await pair.done.wait()
        finally:
            for pump in pumps:
                pump.cancel()
            if pumps:
                await asyncio.wait(pumps)
            _close(client, reset=pair.reset)
            if pair.upstream is not None:
                _close(pair.upstream, reset=False)
            with self._lock:
                self._pairs.discard(pair)
                self._lock.notify_all()
            if task is not None:
                self._handlers.discard(task)

    async def _pump_up(self, pair: _Pair, upstream: asyncio.StreamWriter) -> None:
        """Client to server."""
        try:
            while data := await pair.client_reader.read(CHUNK):
                fault = self._fault
                if isinstance(fault, Reset):
                    pair.finish(reset=True)
                    return
                if isinstance(fault, Blackhole | Refuse):
                    continue
                await self._send(upstream, data, fault, up=True)
        except OSError:
            pass
        pair.finish()

    async def _pump_down(self, pair: _Pair, upstream: asyncio.StreamReader) -> None:
        """Server to client."""
        try:
            while data := await upstream.read(CHUNK):
                fault = self._fault
                if isinstance(fault, Mix):
                    end = await self._mix(pair, data, fault)
                    if end is None:
                        continue
                    if end.kind == "hold":
                        return  # the client's side stays open until the client leaves
                    if end.delay:
                        await _CLOCK.sleep(end.delay)
                    pair.finish(reset=end.kind == "reset")
                    return
                if pair.answers is not None:
                    held, pair.answers = pair.answers.flush(), None
                    await self._send(pair.client, held, fault, up=False)
                if isinstance(fault, Reset):
                    pair.finish(reset=True)
                    return
                if isinstance(fault, Blackhole | Refuse):
                    continue
                if isinstance(fault, Latency):
                    await _CLOCK.sleep(self._latency(fault))
                if isinstance(fault, CloseMidBody):
                    if pair.cut_fault is not fault:
                        pair.cut_fault, pair.cut_sent = fault, 0
                    left = fault.after_bytes - pair.cut_sent
                    if len(data) >= left:
                        await self._send(pair.client, data[:left], fault, up=False)
                        pair.finish()
                        return
                    pair.cut_sent += len(data)
                if isinstance(fault, Drip):
                    for index in range(len(data)):
                        await self._write(
                            pair.client, data[index : index + 1], up=False
                        )
                        await _CLOCK.sleep(fault.seconds)
                    continue
                await self._send(pair.client, data, fault, up=False)
        except OSError:
            pass
        if pair.answers is not None:
            with contextlib.suppress(OSError):
                await self._send(
                    pair.client, pair.answers.flush(), self._fault, up=False
                )
        fault = self._fault
        if isinstance(fault, Blackhole):
            return  # the client's side stays open until the client leaves
        if isinstance(fault, SlowClose):
            await _CLOCK.sleep(fault.seconds)
        pair.finish()

    async def _mix(self, pair: _Pair, data: bytes, fault: Mix) -> _End | None:
        """Forward what the answers in `data` ask for; how the connection ends."""
        header = fault.header.encode()
        if pair.answers is None or pair.answers.header != header:
            pair.answers = _Answers(header)
        forward, end = pair.answers.feed(data)
        await self._send(pair.client, forward, fault, up=False)
        return end

    async def _send(
        self, writer: asyncio.StreamWriter, data: bytes, fault: Fault, *, up: bool
    ) -> None:
        if not data:
            return
        if isinstance(fault, BandwidthCap):
            rate = fault.bytes_per_second
            step = max(1, int(rate * PACING_SLICE))
            for start in range(0, len(data), step):
                piece = data[start : start + step]
                await self._write(writer, piece, up=up)
                await _CLOCK.sleep(len(piece) / rate)
            return
        await self._write(writer, data, up=up)

    async def _write(
        self, writer: asyncio.StreamWriter, data: bytes, *, up: bool
    ) -> None:
        writer.write(data)
        await writer.drain()
        with self._lock:
            if up:
                self._bytes_up += len(data)
            else:
                self._bytes_down += len(data)

    def _latency(self, fault: Latency) -> float:
        spread = self._random.uniform(-fault.jitter, fault.jitter)
        return max(0.0, fault.seconds + spread)


def _bound_socket(port: int, *, listen: bool = False) -> socket.socket:
    # IPPROTO_TCP, not the default 0: asyncio sets TCP_NODELAY only on sockets
    # that say they are TCP (accepted ones inherit it), and without it answers
    # after a connection's first wait ~40 ms (Nagle against delayed ACK).
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind((HOST, port))
        if listen:
            sock.listen(128)
            sock.setblocking(False)
    except BaseException:
        sock.close()
        raise
    return sock


def _close(writer: asyncio.StreamWriter, *, reset: bool) -> None:
    if reset:
        sock = writer.get_extra_info("socket")
        if sock is not None:
            # Linger on, timeout 0: closing sends RST instead of FIN.
            linger = struct.pack("ii", 1, 0)
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, linger)
        writer.transport.abort()
    else:
        # close(), not abort(): what is already written is still delivered.
        writer.close()


@contextmanager
def proxy_faults(
    upstream_url: str, *, seed: int = DEFAULT_SEED
) -> Generator[FaultProxy, None, None]:
    """Run a fault proxy in front of `upstream_url`; stop it on exit.

    Example:
        >>> with proxy_faults("http://127.0.0.1:8000") as proxy:  # doctest: +SKIP
        ...     proxy.set_fault(Latency(0.1, jitter=0.02))
        ...     httpx.get(proxy.url + "/healthy")

    Raises:
        ValueError: the URL has no host or port.
        RuntimeError: the proxy did not start, or its thread outlived the stop.
    """
    parts = urlsplit(upstream_url)
    if parts.hostname is None or parts.port is None:
        raise ValueError(f"fault proxy: {upstream_url!r} needs a host and a port")
    proxy = FaultProxy((parts.hostname, parts.port), scheme=parts.scheme, seed=seed)
    try:
        proxy.start()
        yield proxy
    finally:
        proxy.close()


class MakeProxy(Protocol):
    """What the `fault_proxy` fixture hands out: a factory of started proxies."""

    def __call__(self, upstream_url: str, *, seed: int = DEFAULT_SEED) -> FaultProxy:
        """A proxy in front of `upstream_url`, closed when the test ends."""
        ...


@pytest.fixture
def fault_proxy() -> Iterator[MakeProxy]:
    """A factory of proxies, ``make(upstream_url, seed=...)``, all closed after."""
    with contextlib.ExitStack() as stack:

        def make(upstream_url: str, *, seed: int = DEFAULT_SEED) -> FaultProxy:
            return stack.enter_context(proxy_faults(upstream_url, seed=seed))

        yield make
