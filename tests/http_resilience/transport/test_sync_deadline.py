"""The sync attempt's deadline, held at every socket operation (`_sync_deadline`).

The streams here are recording fakes under a deadline set in the thread-local
by hand, far in the future or already passed: nothing waits. The real slow
server is in tests/integration/test_sync_deadline.py.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from httpcore import NetworkBackend, NetworkStream

from http_resilience import HttpResilienceOptions, ResilientTransport
from http_resilience._core.clock import attempt_deadline, real_time
from http_resilience._transport.sync_deadline import (
    WRITE_PIECE,
    DeadlineBackend,
    DeadlineStream,
    hold_deadlines,
)
from http_resilience.testing import FakeClock
from tests.http_resilience._support.scripted import URL

FAR = 3600.0


def options(**values: Any) -> HttpResilienceOptions:
    return HttpResilienceOptions.model_validate(values)


class RecordingStream(NetworkStream):
    """A network stream that records each operation's timeout."""

    def __init__(self) -> None:
        self.reads: list[float | None] = []
        self.writes: list[tuple[bytes, float | None]] = []
        self.handshakes: list[float | None] = []
        self.closed = False

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        self.reads.append(timeout)
        return b"x"

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self.writes.append((buffer, timeout))

    def close(self) -> None:
        self.closed = True

    def start_tls(
        self,
        ssl_context: Any,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> RecordingStream:
        self.handshakes.append(timeout)
        return self

    def get_extra_info(self, info: str) -> Any:
        return f"info {info}"


class RecordingBackend(NetworkBackend):
    """A network backend that records each connection's timeout."""

    def __init__(self) -> None:
        self.stream = RecordingStream()
        self.connects: list[tuple[str, float | None]] = []
        self.slept: list[float] = []

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Any = None,
    ) -> RecordingStream:
        self.connects.append((f"{host}:{port}", timeout))
        return self.stream

    def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Any = None
    ) -> RecordingStream:
        self.connects.append((path, timeout))
        return self.stream

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)


@pytest.fixture
def deadline() -> Iterator[None]:
    """Leave the thread-local as it was, whatever the test set."""
    yield
    attempt_deadline().when = None


def test_without_a_deadline_every_operation_passes_unchanged() -> None:
    backend = RecordingBackend()
    stream = DeadlineBackend(backend).connect_tcp("api.example", 80, timeout=5.0)
    stream.write(b"x" * (3 * WRITE_PIECE), timeout=4.0)
    assert stream.read(10, timeout=3.0) == b"x"
    stream.start_tls(None, "api.example", timeout=2.0)
    DeadlineBackend(backend).connect_unix_socket("/run/api.sock", timeout=None)
    assert backend.connects == [("api.example:80", 5.0), ("/run/api.sock", None)]
    assert backend.stream.writes == [(b"x" * (3 * WRITE_PIECE), 4.0)]
    assert (backend.stream.reads, backend.stream.handshakes) == ([3.0], [2.0])


def test_each_operation_waits_at_most_for_the_time_left(deadline: None) -> None:
    attempt_deadline().when = real_time() + 0.5
    backend = RecordingBackend()
    stream = DeadlineBackend(backend).connect_tcp("api.example", 80, timeout=5.0)
    stream.read(10, timeout=None)
    stream.write(b"GET", timeout=5.0)
    tls = stream.start_tls(None, "api.example", timeout=5.0)
    DeadlineBackend(backend).connect_unix_socket("/run/api.sock", timeout=None)
    timeouts = [
        backend.connects[0][1],
        backend.stream.reads[0],
        backend.stream.writes[0][1],
        backend.stream.handshakes[0],
        backend.connects[1][1],
    ]
    assert all(t is not None and 0.4 < t <= 0.5 for t in timeouts), timeouts
    # The TLS stream is held to the deadline as well.
    assert isinstance(tls, DeadlineStream)


def test_a_shorter_httpx_timeout_is_kept(deadline: None) -> None:
    attempt_deadline().when = real_time() + FAR
    inner = RecordingStream()
    DeadlineStream(inner).read(10, timeout=0.25)
    assert inner.reads == [0.25]


def test_a_long_write_goes_out_in_pieces_each_held_to_the_deadline(
    deadline: None,
) -> None:
    attempt_deadline().when = real_time() + FAR
    inner = RecordingStream()
    body = bytes(range(256)) * (WRITE_PIECE // 128) + b"end"
    DeadlineStream(inner).write(body, timeout=None)
    pieces = [piece for piece, _ in inner.writes]
    assert [len(piece) for piece in pieces] == [WRITE_PIECE, WRITE_PIECE, 3]
    assert b"".join(pieces) == body
    assert all(timeout is not None for _, timeout in inner.writes)


Operation = Callable[[DeadlineStream, DeadlineBackend], object]

PAST_THE_DEADLINE: list[tuple[Operation, type[Exception]]] = [
    (lambda stream, backend: stream.read(10, timeout=5.0), httpx.ReadTimeout),
    (lambda stream, backend: stream.write(b"x", timeout=5.0), httpx.WriteTimeout),
    (
        lambda stream, backend: stream.write(b"x" * (WRITE_PIECE + 1)),
        httpx.WriteTimeout,
    ),
    (
        lambda stream, backend: stream.start_tls(None, "api.example", 5.0),
        httpx.ConnectTimeout,
    ),
    (
        lambda stream, backend: backend.connect_tcp("api.example", 80, 5.0),
        httpx.ConnectTimeout,
    ),
    (
        lambda stream, backend: backend.connect_unix_socket("/run/api.sock"),
        httpx.ConnectTimeout,
    ),
]


@pytest.mark.parametrize(
    ("operation", "error"),
    PAST_THE_DEADLINE,
    ids=["read", "write", "long write", "tls", "connect", "unix socket"],
)
def test_once_the_deadline_has_passed_nothing_is_attempted(
    deadline: None, operation: Operation, error: type[Exception]
) -> None:
    recording = RecordingBackend()
    backend = DeadlineBackend(recording)
    stream = DeadlineStream(recording.stream)
    attempt_deadline().when = real_time() - 0.001
    with pytest.raises(error, match="the attempt's deadline passed"):
        operation(stream, backend)
    assert recording.connects == []
    assert recording.stream.reads == []
    assert recording.stream.writes == []
    assert recording.stream.handshakes == []


def test_close_extra_info_and_sleep_pass_through() -> None:
    backend = RecordingBackend()
    held = DeadlineBackend(backend)
    stream = held.connect_tcp("api.example", 80)
    held.sleep(0.5)
    assert stream.get_extra_info("socket") == "info socket"
    stream.close()
    assert (backend.stream.closed, backend.slept) == (True, [0.5])


def test_an_httpx_transport_gets_the_backend_once() -> None:
    transport = httpx.HTTPTransport()
    assert hold_deadlines(transport) is True
    backend = transport._pool._network_backend  # pyright: ignore[reportPrivateUsage]
    assert isinstance(backend, DeadlineBackend)
    assert hold_deadlines(transport) is True
    assert transport._pool._network_backend is backend  # pyright: ignore[reportPrivateUsage]
    transport.close()


def test_a_proxied_httpx_transport_gets_it_too() -> None:
    transport = httpx.HTTPTransport(proxy="http://127.0.0.1:3128")
    assert hold_deadlines(transport) is True
    backend = transport._pool._network_backend  # pyright: ignore[reportPrivateUsage]
    assert isinstance(backend, DeadlineBackend)
    transport.close()


def test_other_transports_are_left_alone() -> None:
    mock = httpx.MockTransport(lambda request: httpx.Response(200))
    assert hold_deadlines(mock) is False
    assert vars(mock) == vars(httpx.MockTransport(mock.handler))


def test_a_resilient_transport_holds_its_inner_httpx_transport() -> None:
    inner = httpx.HTTPTransport()
    with ResilientTransport(inner):
        backend = inner._pool._network_backend  # pyright: ignore[reportPrivateUsage]
        assert isinstance(backend, DeadlineBackend)


def seen_deadlines(
    timing: HttpResilienceOptions,
    clock: FakeClock | None = None,
    statuses: tuple[int, ...] = (200,),
) -> tuple[list[float | None], float, float]:
    """The deadline each attempt saw, and the real time around the call."""
    seen: list[float | None] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(attempt_deadline().when)
        return httpx.Response(statuses[len(seen) - 1])

    transport = ResilientTransport(
        httpx.MockTransport(handler), options=timing, clock=clock
    )
    before = real_time()
    transport.handle_request(httpx.Request("GET", URL))
    after = real_time()
    return seen, before, after


def test_an_attempt_runs_under_its_deadline_and_restores_none_after() -> None:
    timing = options(attempt_timeout=2, total_request_timeout=30)
    [when], before, after = seen_deadlines(timing)
    assert when is not None
    assert before + 2 <= when <= after + 2
    assert attempt_deadline().when is None


def test_on_another_clock_the_time_left_is_held_from_now() -> None:
    clock = FakeClock(start=1_000_000.0)
    [when], before, after = seen_deadlines(options(attempt_timeout=2), clock)
    assert when is not None
    assert before + 2 <= when <= after + 2


def test_the_total_deadline_is_held_when_it_comes_first() -> None:
    clock = FakeClock()
    timing = options(attempt_timeout=2, total_request_timeout=3, base_delay=2)
    seen, before, after = seen_deadlines(timing, clock, statuses=(503, 200))
    [waited] = clock.sleeps
    left = 3 - waited  # on the fake clock, after the retry's wait
    assert 1 <= left < 2
    assert seen[1] is not None
    assert before + left <= seen[1] <= after + left


def test_an_earlier_deadline_of_an_attempt_around_this_one_is_kept(
    deadline: None,
) -> None:
    outer = real_time() + 0.75
    attempt_deadline().when = outer
    [when], _, _ = seen_deadlines(options(attempt_timeout=2))
    assert when == outer
    assert attempt_deadline().when == outer


def test_each_thread_has_its_own_deadline(deadline: None) -> None:
    attempt_deadline().when = real_time() + 1
    elsewhere: list[float | None] = []
    thread = threading.Thread(target=lambda: elsewhere.append(attempt_deadline().when))
    thread.start()
    thread.join()
    assert elsewhere == [None]


def test_an_httpx_transport_whose_pool_has_no_backend_is_left_alone() -> None:
    transport = httpx.HTTPTransport()
    pool = transport._pool  # pyright: ignore[reportPrivateUsage]
    transport._pool = object()  # type: ignore[assignment]  # pyright: ignore[reportPrivateUsage, reportAttributeAccessIssue]
    assert hold_deadlines(transport) is False
    pool.close()


def test_an_httpx_timeout_before_the_deadline_is_a_transport_failure() -> None:
    # Without own_transport_timeout the client's httpx timeouts are its own:
    # one that runs out well before the attempt's deadline is not the deadline.
    failure = httpx.ReadTimeout("timed out")

    def handler(request: httpx.Request) -> httpx.Response:
        raise failure

    timing = options(max_retry_attempts=0, own_transport_timeout=False)
    transport = ResilientTransport(httpx.MockTransport(handler), options=timing)
    with pytest.raises(httpx.ReadTimeout) as raised:
        transport.handle_request(httpx.Request("GET", URL))
    assert raised.value is failure
    assert attempt_deadline().when is None
