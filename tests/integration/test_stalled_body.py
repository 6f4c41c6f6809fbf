"""A body that stops arriving ends in `AttemptStalledError`, not a hang.

A real server on 127.0.0.1 sends the head and half the body of its answer,
then nothing. The client's attempt has 0.5 s: the read that waits for the
rest gives up after that much, and the caller sees `AttemptStalledError`
(not the `TotalTimeoutError` of the call's 5 s, which an uncut stall would
run into; the bound asserted is generous, for a busy machine). A body that keeps
arriving, slowly, is never cut; and with `buffer_responses` the stalled body
is one more failed attempt, retried, and the call succeeds.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest

from http_resilience import (
    AttemptStalledError,
    HttpResilienceOptions,
    SystemClock,
    create_async_client,
    create_client,
)
from tests.support.fault_server import Message, Receive, Send, run_lifespan, serve_app

pytestmark = pytest.mark.anyio

ATTEMPT = 0.5
OPTIONS = {
    "attempt_timeout": ATTEMPT,
    "total_request_timeout": 5,
    "sampling_duration": 2,
    "base_delay": 0.01,
}
CLOCK = SystemClock()  # real time: the sockets' read timeouts are under test
GENEROUS = 3.0
"""Seconds a cut stall may take on a busy machine: well past the 0.5 s
attempt, well before the 5 s total, which the stall would run into uncut."""
MORE = {"type": "http.response.body", "more_body": True}


@dataclass
class StallingApp:
    """``/stall``: half a body, then silence; ``/drip``: a chunk every 0.1 s.

    ``/stall-once``: the first answer stalls, the next ones arrive whole.
    """

    started: threading.Event = field(default_factory=threading.Event)
    stalled: int = 0

    async def __call__(self, scope: Message, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await run_lifespan(receive, send, self.started)
            return
        path = scope["path"]
        head = [(b"content-length", b"20")]
        await send({"type": "http.response.start", "status": 200, "headers": head})
        if path == "/drip":
            for _ in range(10):  # 10 x 2 bytes over a second: two attempts' time
                await send({**MORE, "body": b".."})
                await CLOCK.sleep(0.1)
            await send({"type": "http.response.body", "body": b""})
            return
        if path == "/stall" or (path == "/stall-once" and self.stalled == 0):
            self.stalled += 1
            await send({**MORE, "body": b"0123456789"})
            while (await receive())["type"] != "http.disconnect":
                pass  # silence, until the client leaves
            return
        await send({"type": "http.response.body", "body": b"01234567890123456789"})


@pytest.fixture(scope="module")
def server() -> Iterator[tuple[str, StallingApp]]:
    app = StallingApp()
    with serve_app(app, app.started, name="stalling server") as url:
        yield url, app


def test_a_stalled_body_ends_in_attempt_stalled_error_within_the_attempt(
    server: tuple[str, StallingApp],
) -> None:
    url, _ = server
    options = HttpResilienceOptions.model_validate(OPTIONS)
    with create_client("files", options, base_url=url) as client:
        started = CLOCK.monotonic()
        with pytest.raises(AttemptStalledError, match="stopped arriving"):
            client.get("/stall")
        took = CLOCK.monotonic() - started
    assert took < GENEROUS


async def test_the_async_client_says_the_same(server: tuple[str, StallingApp]) -> None:
    url, _ = server
    options = HttpResilienceOptions.model_validate(OPTIONS)
    async with create_async_client("files", options, base_url=url) as client:
        started = CLOCK.monotonic()
        with pytest.raises(AttemptStalledError):
            await client.get("/stall")
        took = CLOCK.monotonic() - started
    assert took < GENEROUS


def test_a_slow_body_that_keeps_arriving_is_never_cut(
    server: tuple[str, StallingApp],
) -> None:
    url, _ = server
    options = HttpResilienceOptions.model_validate(OPTIONS)
    with create_client("files", options, base_url=url) as client:
        response = client.get("/drip")  # a second in all, 0.1 s between reads
    assert response.content == b".." * 10


def test_buffered_a_stalled_body_is_retried_and_the_call_succeeds(
    server: tuple[str, StallingApp],
) -> None:
    url, app = server
    app.stalled = 0
    options = HttpResilienceOptions.model_validate(
        {**OPTIONS, "buffer_responses": True}
    )
    with create_client("files", options, base_url=url) as client:
        response = client.get("/stall-once")
    assert response.content == b"01234567890123456789"
    assert app.stalled == 1
