"""A real HTTP server that fails on request: a small ASGI app under uvicorn.

One server runs for the whole test session, on 127.0.0.1 and a free port, in a
background thread (fixture `fault_server`). Every route answers every method;
`?key=NAME` picks the counter a request is counted under (default: the path),
so tests sharing the server stay apart by using their own keys.

| route | answer |
| --- | --- |
| `/status/{code}` | always `code` |
| `/flaky/{failures}/{code}` | the key's first `failures` hits `code`, then 200 |
| `/retry-after/{code}/{value}` | first hit `code` with `Retry-After: value`, then 200 |
| `/sleep/{seconds}` | 200 after `seconds` |
| `/hedge/{first_sleep}` | first hit 200 after `first_sleep`, later hits at once |
| `/healthy` | 200 |
| `/quota/{limit}/{reset}` | hit n: 200 (429 past `limit`), publishing r=limit-n |
| `/legacy-quota/{limit}/{reset}` | the same in the legacy `X-RateLimit-*` triple |

The quota routes publish `RateLimit-Policy: "window";q=limit;w=60` and
`RateLimit: "window";r=limit-n;t=reset` (or the triple), never resetting.
Codes are 200-599, durations seconds (a float, at most `MAX_SLEEP`). A route
that does not parse answers 404 and counts nothing. Every counted answer has a
small JSON body, `{"key": ..., "hit": n, "status": code}`, and the header
`x-fault-hit: n`, n being the request's hit number for its key (from 1).

A request is "aborted" when its client goes away, or its task is cancelled,
before its answer is complete: while a sleep runs the server watches for the
disconnect, so a client that times out or is cancelled is seen at once.
Counters move on the server's thread: `wait_idle(key)` waits until the server
has finished every request of the key that it has begun, before reading them.
"""

from __future__ import annotations

import asyncio
import json
import math
import socket
import threading
from collections import Counter
from collections.abc import Awaitable, Callable, Generator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs

import anyio.to_thread
import pytest
import uvicorn

__all__ = [
    "ASGIApp",
    "FaultServer",
    "Message",
    "Receive",
    "Send",
    "fault_server",
    "free_port",
    "read_body",
    "run_lifespan",
    "serve_app",
    "serve_faults",
    "stayed",
]

HOST = "127.0.0.1"
MAX_SLEEP = 600.0
# A request still sleeping when the server stops is cancelled after this long.
GRACEFUL_SHUTDOWN = 1  # seconds; uvicorn takes an int
STARTUP_TIMEOUT = 20.0
JOIN_TIMEOUT = 10.0

Message = dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]


@dataclass(frozen=True)
class _Answer:
    status: int
    delay: float = 0.0
    headers: tuple[tuple[bytes, bytes], ...] = ()


OK = _Answer(200)
Route = Callable[[int], _Answer]


def _status(text: str) -> int | None:
    if not text.isascii() or not text.isdigit():
        return None
    code = int(text)
    return code if 200 <= code <= 599 else None


def _seconds(text: str) -> float | None:
    try:
        seconds = float(text)
    except ValueError:
        return None
    return seconds if math.isfinite(seconds) and 0 <= seconds <= MAX_SLEEP else None


def _route(path: str) -> Route | None:
    """What the path asks for, as a function of the hit number; None if nothing."""
    name, _, rest = path.strip("/").partition("/")
    parts = rest.split("/")
    if name == "healthy" and not rest:
        return lambda hit: OK
    if name == "status" and len(parts) == 1 and (code := _status(parts[0])):
        answer = _Answer(code)
        return lambda hit: answer
    if name == "flaky" and len(parts) == 2:
        failures, code = parts[0], _status(parts[1])
        if failures.isascii() and failures.isdigit() and code:
            answer, limit = _Answer(code), int(failures)
            return lambda hit: answer if hit <= limit else OK
    if name == "retry-after" and len(parts) >= 2:
        code, value = _status(parts[0]), rest.partition("/")[2]
        # What h11 would refuse to send: control characters, outer whitespace.
        if code and value and value.isprintable() and value == value.strip():
            header = ((b"retry-after", value.encode()),)
            answer = _Answer(code, headers=header)
            return lambda hit: answer if hit == 1 else OK
    if name in ("quota", "legacy-quota") and len(parts) == 2:
        allowed, reset = parts
        if all(part.isascii() and part.isdigit() for part in parts):
            return _quota(int(allowed), reset, legacy=name == "legacy-quota")
    if name in ("sleep", "hedge") and len(parts) == 1:
        seconds = _seconds(parts[0])
        if seconds is None:
            return None
        sleep = _Answer(200, delay=seconds)
        if name == "sleep":
            return lambda hit: sleep
        return lambda hit: sleep if hit == 1 else OK
    return None


def _quota(limit: int, reset: str, *, legacy: bool) -> Route:
    """A quota of `limit` hits, each answer publishing what is left of it."""

    def answer(hit: int) -> _Answer:
        left = str(max(limit - hit, 0)).encode()
        headers: tuple[tuple[bytes, bytes], ...]
        if legacy:
            headers = (
                (b"x-ratelimit-limit", str(limit).encode()),
                (b"x-ratelimit-remaining", left),
                (b"x-ratelimit-reset", reset.encode()),
            )
        else:
            headers = (
                (b"ratelimit-policy", f'"window";q={limit};w=60'.encode()),
                (b"ratelimit", b'"window";r=' + left + b";t=" + reset.encode()),
            )
        return _Answer(200 if hit <= limit else 429, headers=headers)

    return answer


def _key(scope: Message) -> str:
    query = parse_qs(scope["query_string"].decode("latin-1"))
    keys = query.get("key")
    return keys[0] if keys else str(scope["path"])


async def read_body(receive: Receive) -> bool:
    """Drain the request body; False if the client went away first."""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return False
        if not message.get("more_body", False):
            return True


async def stayed(receive: Receive, seconds: float) -> bool:
    """Wait `seconds`; False as soon as the client disconnects instead."""
    try:
        async with asyncio.timeout(seconds):
            while (await receive())["type"] != "http.disconnect":
                pass
    except TimeoutError:
        return True
    return False


async def run_lifespan(receive: Receive, send: Send, started: threading.Event) -> None:
    """Answer uvicorn's lifespan messages; set `started` once it starts."""
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            started.set()
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return


async def _respond(
    send: Send, answer: _Answer, body: bytes, headers: list[tuple[bytes, bytes]]
) -> None:
    headers = [*headers, *answer.headers]
    if answer.status in (204, 304):
        body = b""
    else:
        headers += [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
        ]
    start = {"type": "http.response.start", "status": answer.status}
    await send({**start, "headers": headers})
    await send({"type": "http.response.body", "body": body})


@dataclass
class _Counts:
    """Per-key counters, written on the server's thread and read on the tests'."""

    changed: threading.Condition = field(default_factory=threading.Condition)
    hits: Counter[str] = field(default_factory=Counter[str])
    aborted: Counter[str] = field(default_factory=Counter[str])
    in_flight: Counter[str] = field(default_factory=Counter[str])
    max_in_flight: Counter[str] = field(default_factory=Counter[str])

    def enter(self, key: str) -> int:
        with self.changed:
            self.hits[key] += 1
            self.in_flight[key] += 1
            peak = max(self.max_in_flight[key], self.in_flight[key])
            self.max_in_flight[key] = peak
            self.changed.notify_all()
            return self.hits[key]

    def leave(self, key: str, *, aborted: bool) -> None:
        with self.changed:
            self.in_flight[key] -= 1
            if aborted:
                self.aborted[key] += 1
            self.changed.notify_all()

    def wait_idle(self, key: str, timeout: float) -> None:
        with self.changed:
            if not self.changed.wait_for(lambda: not self.in_flight[key], timeout):
                raise TimeoutError(
                    f"fault server: {self.in_flight[key]} request(s) of key "
                    f"{key!r} still in flight after {timeout} s"
                )

    def reset(self) -> None:
        # In-flight counts stay: the requests they count will still leave.
        with self.changed:
            self.hits.clear()
            self.aborted.clear()
            self.max_in_flight.clear()


@dataclass
class FaultApp:
    """The ASGI app; counts every routed request under its key."""

    counts: _Counts = field(default_factory=_Counts)
    started: threading.Event = field(default_factory=threading.Event)

    async def __call__(self, scope: Message, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await run_lifespan(receive, send, self.started)
            return
        route = _route(scope["path"])
        if route is None:
            body = f"fault server: no route {scope['path']}".encode()
            await _respond(send, _Answer(404), body, [])
            return
        key = _key(scope)
        hit = self.counts.enter(key)
        answered = False
        try:
            answer = route(hit)
            if not await read_body(receive):
                return
            if answer.delay and not await stayed(receive, answer.delay):
                return
            document = {"key": key, "hit": hit, "status": answer.status}
            body = json.dumps(document).encode()
            await _respond(send, answer, body, [(b"x-fault-hit", str(hit).encode())])
            answered = True
        finally:
            self.counts.leave(key, aborted=not answered)


@dataclass(frozen=True)
class FaultServer:
    """A running fault server, as the `fault_server` fixture hands it out.

    Attributes:
        url: The base URL, ``http://127.0.0.1:PORT``.
        refused_url: A base URL whose port is held, bound but not listening, for
            as long as the server runs: connecting to it is refused.
    """

    url: str
    refused_url: str
    app: FaultApp

    def hits(self, key: str) -> int:
        """Requests counted under `key`, including those still in flight."""
        with self.app.counts.changed:
            return self.app.counts.hits[key]

    def aborted(self, key: str) -> int:
        """Requests of `key` whose client left, or that were cancelled, unanswered."""
        with self.app.counts.changed:
            return self.app.counts.aborted[key]

    def max_in_flight(self, key: str) -> int:
        """The most requests of `key` handled at once since the last reset."""
        with self.app.counts.changed:
            return self.app.counts.max_in_flight[key]

    def reset(self) -> None:
        """Forget every key's hits, aborts and peak concurrency."""
        self.app.counts.reset()

    async def wait_idle(self, key: str, *, limit: float = 5.0) -> None:
        """Wait until the server has finished every request of `key` it has begun.

        Its socket closes on the test's event loop, so that loop must keep
        running while the server notices: this waits in a worker thread.

        Raises:
            TimeoutError: some are still in flight after `limit` seconds.
        """
        await anyio.to_thread.run_sync(self.wait_idle_sync, key, limit)

    def wait_idle_sync(self, key: str, limit: float = 5.0) -> None:
        """`wait_idle` for sync tests (it blocks the calling thread)."""
        self.app.counts.wait_idle(key, limit)


def free_port() -> int:
    """A port on 127.0.0.1 with nothing listening (until someone binds it)."""
    with socket.socket() as probe:
        probe.bind((HOST, 0))
        port: int = probe.getsockname()[1]
        return port


ASGIApp = Callable[[Message, Receive, Send], Awaitable[None]]


@contextmanager
def serve_app(
    app: ASGIApp,
    ready: threading.Event,
    *,
    graceful_shutdown: int = GRACEFUL_SHUTDOWN,
    date_header: bool = True,
    name: str = "fault server",
) -> Generator[str, None, None]:
    """Run `app` under uvicorn on 127.0.0.1 in a thread; yield its base URL.

    `ready` is the event the app sets when its lifespan starts. On exit the
    server is stopped and its thread joined. `date_header=False` leaves the
    ``Date`` header to the app; `name` names the thread and the errors.

    Raises:
        RuntimeError: uvicorn did not start, or its thread outlived the stop.
    """
    # IPPROTO_TCP, not the default 0: asyncio sets TCP_NODELAY only on sockets
    # that say they are TCP, and without it every answer after a connection's
    # first waits ~40 ms (Nagle's algorithm against the client's delayed ACK).
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        # As uvicorn binds its own: the connections it closed (TIME_WAIT)
        # then do not keep a test from holding the port once it stops.
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((HOST, 0))
        # Listening before uvicorn serves: an early connection waits in the
        # backlog instead of being refused.
        listener.listen()
        config = uvicorn.Config(
            app,
            lifespan="on",
            log_config=None,
            access_log=False,
            http="h11",
            ws="none",
            loop="asyncio",
            timeout_graceful_shutdown=graceful_shutdown,
            date_header=date_header,
        )
        runner = uvicorn.Server(config)
        stopped = threading.Event()

        def run() -> None:
            # A failed startup (the app answered its lifespan as failed) ends
            # uvicorn's run with SystemExit: the server did not start.
            try:
                runner.run(sockets=[listener])
            except SystemExit:
                pass
            finally:
                stopped.set()

        thread = threading.Thread(target=run, name=name.replace(" ", "-"), daemon=True)
        thread.start()
        try:
            waited = 0.0
            while not ready.wait(timeout=0.05):
                waited += 0.05
                if stopped.is_set() or waited >= STARTUP_TIMEOUT:
                    raise RuntimeError(f"{name}: uvicorn did not start")
            yield f"http://{HOST}:{listener.getsockname()[1]}"
        finally:
            runner.should_exit = True
            thread.join(timeout=JOIN_TIMEOUT)
        if thread.is_alive():
            raise RuntimeError(f"{name}: still running after {JOIN_TIMEOUT} s")
    finally:
        listener.close()


@contextmanager
def serve_faults(
    *, graceful_shutdown: int = GRACEFUL_SHUTDOWN
) -> Generator[FaultServer, None, None]:
    """Run a fault server in a thread; stop it and join the thread on exit.

    Raises:
        RuntimeError: uvicorn did not start, or its thread outlived the stop.
    """
    app = FaultApp()
    # Bound, never listening: connections to this port are refused.
    refused = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        refused.bind((HOST, 0))
        with serve_app(app, app.started, graceful_shutdown=graceful_shutdown) as url:
            yield FaultServer(
                url=url,
                refused_url=f"http://{HOST}:{refused.getsockname()[1]}",
                app=app,
            )
    finally:
        refused.close()


@pytest.fixture(scope="session")
def fault_server() -> Iterator[FaultServer]:
    """The session's fault server; tests keep apart by using their own keys."""
    with serve_faults() as server:
        yield server
