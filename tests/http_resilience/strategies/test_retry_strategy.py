"""The retry of `AsyncResilientTransport`: every rule, on a fake clock."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime, timedelta

import httpx
import pytest
from anyio.lowlevel import checkpoint

from http_resilience import AttemptEvent, HttpEvent, RetryEvent
from http_resilience._core.clock import utc_now
from http_resilience._core.send import LAYER_MARK
from http_resilience.testing import EventRecorder, FakeClock
from tests.http_resilience._support.scripted import (
    URL,
    Reply,
    async_transport,
    script,
    sync_transport,
)

pytestmark = pytest.mark.anyio


async def send(
    transport: httpx.AsyncBaseTransport, method: str = "GET", **kwargs: object
) -> httpx.Response:
    async with httpx.AsyncClient(transport=transport) as client:
        return await client.request(method, URL, **kwargs)  # type: ignore[arg-type]


# --- attempts, delays, what is returned -------------------------------------------


async def test_an_endpoint_that_always_fails_gets_four_attempts_and_its_503() -> None:
    clock, server, events = FakeClock(), script(503), EventRecorder[HttpEvent]()
    transport = async_transport(server, clock, events=events)
    response = await send(transport)
    assert response.status_code == 503
    assert server.hits == 4
    assert clock.sleeps == [1.0, 2.0, 4.0]  # 2 s base, doubling, jitter factor 0.5
    assert [event.attempt for event in events.of(RetryEvent)] == [1, 2, 3]
    assert [event.reason for event in events.of(RetryEvent)] == ["503"] * 3
    assert [event.outcome for event in events.of(AttemptEvent)] == ["503"] * 4
    assert response.json() == {"attempt": 4}


async def test_two_failures_then_success_takes_three_attempts() -> None:
    clock, server = FakeClock(), script(503, 500, 200)
    response = await send(async_transport(server, clock, base_delay="100ms"))
    assert response.status_code == 200
    assert server.hits == 3
    assert clock.sleeps == [0.05, 0.1]


async def test_the_jitter_keeps_each_delay_in_its_half_open_range() -> None:
    clock, server = FakeClock(), script(503)
    transport = async_transport(server, clock)
    transport = type(transport)(
        httpx.MockTransport(server), options=transport.options, clock=clock
    )
    await send(transport)
    for retry, delay in enumerate(clock.sleeps, start=1):
        full = 2.0 * 2 ** (retry - 1)
        assert full / 2 <= delay < full


@pytest.mark.parametrize("status", [408, 429, 500, 502, 503, 504, 599])
async def test_each_failure_status_is_retried(status: int) -> None:
    server = script(status, 200)
    response = await send(async_transport(server, FakeClock()))
    assert (response.status_code, server.hits) == (200, 2)


@pytest.mark.parametrize("status", [200, 204, 301, 400, 401, 404, 409, 501, 505])
async def test_other_statuses_are_returned_at_once(status: int) -> None:
    clock, server = FakeClock(), script(status)
    response = await send(async_transport(server, clock))
    assert (response.status_code, server.hits, clock.sleeps) == (status, 1, [])


async def test_retries_off_means_one_attempt() -> None:
    server = script(503)
    response = await send(async_transport(server, FakeClock(), max_retry_attempts=0))
    assert (response.status_code, server.hits) == (503, 1)


async def test_a_transport_failure_is_retried_and_the_last_one_raised() -> None:
    failures = [httpx.ConnectError(f"refused {n}") for n in range(4)]
    server = script(*failures)
    with pytest.raises(httpx.ConnectError) as raised:
        await send(async_transport(server, FakeClock()))
    assert raised.value is failures[-1]
    assert server.hits == 4


async def test_a_transport_failure_then_success_returns_the_success() -> None:
    server = script(httpx.ReadError("reset"), httpx.RemoteProtocolError("eof"), 200)
    response = await send(async_transport(server, FakeClock()))
    assert (response.status_code, server.hits) == (200, 3)


async def test_an_exception_that_is_not_a_failure_ends_the_call_at_once() -> None:
    server = script(ValueError("a bug in a custom transport"), 200)
    with pytest.raises(ValueError, match="a bug"):
        await send(async_transport(server, FakeClock()))
    assert server.hits == 1


# --- Retry-After and the deadline ---------------------------------------------------


async def test_retry_after_on_429_is_honoured_over_the_backoff() -> None:
    clock, server = FakeClock(), script(Reply(429, {"Retry-After": "2"}), 200)
    response = await send(async_transport(server, clock, base_delay="100ms"))
    assert response.status_code == 200
    assert clock.sleeps == [2.0]


async def test_retry_after_as_a_date_on_503_is_read_against_the_date_header() -> None:
    sent = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)
    headers = {
        "Date": f"{sent:%a, %d %b %Y %H:%M:%S GMT}",
        "Retry-After": f"{sent + timedelta(seconds=7):%a, %d %b %Y %H:%M:%S GMT}",
    }
    clock, server = FakeClock(), script(Reply(503, headers), 200)
    await send(async_transport(server, clock))
    assert clock.sleeps == [7.0]


async def test_retry_after_as_a_date_without_a_date_header_uses_the_wall_clock() -> (
    None
):
    # No sleep: the wait asked for is read, and the fake clock takes it.
    soon = utc_now() + timedelta(seconds=20)
    headers = {"Retry-After": f"{soon:%a, %d %b %Y %H:%M:%S GMT}"}
    clock, server = FakeClock(), script(Reply(503, headers), 200)
    await send(async_transport(server, clock))
    assert len(clock.sleeps) == 1
    assert 17.0 <= clock.sleeps[0] <= 20.0


@pytest.mark.parametrize("status", [500, 502, 408])
async def test_retry_after_on_other_statuses_is_not_read(status: int) -> None:
    clock, server = FakeClock(), script(Reply(status, {"Retry-After": "9"}), 200)
    await send(async_transport(server, clock))
    assert clock.sleeps == [1.0]


@pytest.mark.parametrize("value", ["-1", "+5", "1.5", "nan", "1" * 10, "soon"])
async def test_a_malformed_retry_after_falls_back_to_the_backoff(value: str) -> None:
    clock, server = FakeClock(), script(Reply(429, {"Retry-After": value}), 200)
    response = await send(async_transport(server, clock))
    assert response.status_code == 200
    assert clock.sleeps == [1.0]


async def test_a_repeated_retry_after_falls_back_to_the_backoff() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        if handler.calls:  # type: ignore[attr-defined]
            return httpx.Response(200)
        handler.calls += 1  # type: ignore[attr-defined]
        return httpx.Response(503, headers=[("Retry-After", "3"), ("Retry-After", "3")])

    handler.calls = 0  # type: ignore[attr-defined]
    clock = FakeClock()
    await send(async_transport(handler, clock))
    assert clock.sleeps == [1.0]


async def test_a_retry_after_past_the_deadline_ends_the_call_at_once() -> None:
    clock, server = FakeClock(), script(Reply(429, {"Retry-After": "60"}), 200)
    response = await send(async_transport(server, clock))
    assert response.status_code == 429
    assert response.headers["Retry-After"] == "60"
    assert server.hits == 1
    assert clock.sleeps == []
    assert not server.streams[0].closed or response.is_closed  # it was read, whole
    assert response.json() == {"attempt": 1}


async def test_a_backoff_that_would_reach_the_deadline_ends_the_call() -> None:
    # Waits of 10 s then 20 s: the second would end at 30 s, the deadline.
    clock, server = FakeClock(), script(503)
    response = await send(async_transport(server, clock, base_delay=20, max_delay=60))
    assert response.status_code == 503
    assert server.hits == 2
    assert clock.sleeps == [10.0]


async def test_a_transport_failure_whose_wait_passes_the_deadline_is_raised() -> None:
    failure = httpx.ConnectError("refused")
    clock, server = FakeClock(), script(failure)
    with pytest.raises(httpx.ConnectError) as raised:
        await send(async_transport(server, clock, base_delay=70, max_delay=70))
    assert raised.value is failure
    assert (server.hits, clock.sleeps) == (1, [])


# --- methods ------------------------------------------------------------------------


async def test_a_post_is_not_retried() -> None:
    server = script(503, 503, 200)
    response = await send(
        async_transport(server, FakeClock()), "POST", json={"item": "book"}
    )
    assert (response.status_code, server.hits) == (503, 1)


@pytest.mark.parametrize("method", ["POST", "PATCH"])
async def test_unsafe_methods_are_retried_when_allowed(method: str) -> None:
    server = script(503, 503, 200)
    transport = async_transport(server, FakeClock(), retry_unsafe_methods=True)
    response = await send(transport, method, json={"item": "book"})
    assert (response.status_code, server.hits) == (200, 3)
    assert server.bodies == [b'{"item":"book"}'] * 3


async def test_a_post_with_an_idempotency_key_is_retried() -> None:
    server = script(503, 503, 200)
    response = await send(
        async_transport(server, FakeClock()),
        "POST",
        json={"item": "book"},
        headers={"Idempotency-Key": "order-7"},
    )
    assert (response.status_code, server.hits) == (200, 3)
    assert [r.headers["idempotency-key"] for r in server.requests] == ["order-7"] * 3


@pytest.mark.parametrize("method", ["PUT", "DELETE", "HEAD", "OPTIONS", "TRACE"])
async def test_idempotent_methods_are_retried(method: str) -> None:
    server = script(503, 200)
    response = await send(async_transport(server, FakeClock()), method)
    assert (response.status_code, server.hits) == (200, 2)


def test_will_retry_answers_per_request() -> None:
    transport = async_transport(script(200), FakeClock())
    assert transport.will_retry(httpx.Request("GET", URL))
    assert not transport.will_retry(httpx.Request("POST", URL))
    assert transport.will_retry(
        httpx.Request("POST", URL, headers={"Idempotency-Key": "k"})
    )
    assert not transport.will_retry(httpx.Request("PUT", URL, content=iter([b"x"])))
    off = async_transport(script(200), FakeClock(), max_retry_attempts=0)
    assert not off.will_retry(httpx.Request("GET", URL))
    unsafe = async_transport(script(200), FakeClock(), retry_unsafe_methods=True)
    assert unsafe.will_retry(httpx.Request("PATCH", URL, json={}))


# --- bodies, fresh requests, superseded responses -------------------------------------


async def test_a_replayable_body_is_sent_whole_on_every_attempt() -> None:
    server = script(503, 503, 200)
    response = await send(
        async_transport(server, FakeClock()),
        "PUT",
        files={"report": ("report.csv", b"a,b\n1,2\n")},
    )
    assert response.status_code == 200
    assert len(set(server.bodies)) == 1
    assert b"a,b\n1,2\n" in server.bodies[0]


def test_a_one_shot_generator_body_is_sent_once_and_not_retried() -> None:
    def chunks() -> Iterator[bytes]:
        yield b"part one, "
        yield b"part two"

    server = script(503, 200)
    transport = sync_transport(server, FakeClock(), retry_unsafe_methods=True)
    with httpx.Client(transport=transport) as client:
        response = client.put(URL, content=chunks())
    assert (response.status_code, server.hits) == (503, 1)
    assert server.bodies == [b"part one, part two"]


async def test_a_one_shot_async_body_is_sent_once_and_not_retried() -> None:
    async def chunks() -> AsyncIterator[bytes]:
        yield b"streamed"

    server = script(httpx.ReadError("reset"), 200)
    transport = async_transport(server, FakeClock())
    with pytest.raises(httpx.ReadError):
        await send(transport, "PUT", content=chunks())
    assert server.hits == 1
    assert server.bodies == [b"streamed"]


async def test_every_attempt_is_a_fresh_request_and_the_callers_is_untouched() -> None:
    server = script(503, 503, 200)
    transport = async_transport(server, FakeClock())
    request = httpx.Request("GET", URL, headers={"X-Trace": "t"}, extensions={"a": 1})
    own_extensions, own_headers = request.extensions, request.headers
    response = await transport.handle_async_request(request)
    assert response.status_code == 200
    assert len({id(sent) for sent in server.requests}) == 3
    assert all(sent is not request for sent in server.requests)
    assert len({id(sent.headers) for sent in server.requests}) == 3
    assert all(sent.headers is not own_headers for sent in server.requests)
    assert all(sent.headers["x-trace"] == "t" for sent in server.requests)
    # Extensions of its own: the caller's, the timeouts, the mark.
    assert all(seen["a"] == 1 for seen in server.extensions)
    assert all(seen["timeout"]["read"] == 10.0 for seen in server.extensions)
    assert all(LAYER_MARK in seen for seen in server.extensions)
    assert request.extensions is own_extensions
    assert request.extensions == {"a": 1}
    assert list(request.headers.items()) == [("host", "api.example"), ("x-trace", "t")]


@pytest.mark.asyncio_only("the test itself uses asyncio.Event, asyncio.create_task")
async def test_one_request_object_sent_twice_at_once_is_not_taken_for_a_layer() -> None:
    release = asyncio.Event()
    seen: list[dict[str, object]] = []

    async def handler(request: httpx.Request) -> httpx.Response:
        seen.append(dict(request.extensions))
        await release.wait()
        return httpx.Response(200)

    transport = async_transport(handler, FakeClock())
    request = httpx.Request("GET", URL)
    first = asyncio.create_task(transport.handle_async_request(request))
    await checkpoint()
    second = asyncio.create_task(transport.handle_async_request(request))
    await checkpoint()
    release.set()
    assert [r.status_code for r in await asyncio.gather(first, second)] == [200, 200]
    assert seen[0][LAYER_MARK] is first
    assert seen[1][LAYER_MARK] is second
    assert request.extensions == {}


async def test_responses_superseded_by_a_retry_are_closed_before_the_next_attempt() -> (
    None
):
    server = script(503, 502, 200)
    transport = async_transport(server, FakeClock())
    response = await transport.handle_async_request(httpx.Request("GET", URL))
    assert server.closed_before == [[], [True], [True, True]]
    assert not server.streams[-1].closed  # the caller's to read
    assert response.status_code == 200
    await response.aclose()
    assert server.streams[-1].closed


async def test_the_last_failing_response_is_returned_unread_and_open() -> None:
    server = script(503)
    transport = async_transport(server, FakeClock(), max_retry_attempts=1)
    response = await transport.handle_async_request(httpx.Request("GET", URL))
    assert [stream.closed for stream in server.streams] == [True, False]
    assert response.status_code == 503
    assert await response.aread() == b'{"attempt": 2}'


async def test_a_response_that_fails_to_close_does_not_fail_the_call() -> None:
    class Broken(httpx.AsyncByteStream):
        async def __aiter__(self) -> AsyncIterator[bytes]:
            yield b""

        async def aclose(self) -> None:
            raise httpx.ReadError("connection already broken")

    answers = [httpx.Response(503, stream=Broken()), httpx.Response(200)]

    def handler(request: httpx.Request) -> httpx.Response:
        return answers.pop(0)

    transport = async_transport(handler, FakeClock())
    assert (await send(transport)).status_code == 200


# --- the pipeline owns time ---------------------------------------------------------


async def test_each_attempt_carries_the_attempt_timeout_as_its_httpx_timeouts() -> None:
    server = script(200)
    transport = async_transport(server, FakeClock())
    async with httpx.AsyncClient(transport=transport, timeout=5.0) as client:
        await client.get(URL)
    assert server.extensions[0]["timeout"] == dict.fromkeys(
        ("connect", "read", "write"), 10.0
    ) | {"pool": 9.9}


async def test_near_the_total_deadline_the_httpx_timeouts_shrink_to_what_is_left() -> (
    None
):
    # The second attempt starts at 29 s: one second is left of the 30.
    clock, server = FakeClock(), script(503, 200)
    transport = async_transport(server, clock, base_delay=58, max_delay=58)
    await send(transport)
    assert server.extensions[1]["timeout"]["read"] == pytest.approx(1.0)


async def test_without_owning_time_the_clients_timeouts_are_left_alone() -> None:
    server = script(200)
    transport = async_transport(server, FakeClock(), own_transport_timeout=False)
    async with httpx.AsyncClient(transport=transport, timeout=5.0) as client:
        await client.get(URL)
    assert server.extensions[0]["timeout"]["read"] == 5.0


# --- reporting ----------------------------------------------------------------------


async def test_retries_are_logged_as_warnings_with_the_reason_only(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="http_resilience")
    server = script(httpx.ConnectError("refused by 10.0.0.7"), 503, 200)
    await send(async_transport(server, FakeClock(), name="billing"))
    retries = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert [r.getMessage() for r in retries] == [
        "GET http://api.example:80 (client 'billing'): attempt 1 failed with "
        "ConnectError; retrying in 1.000 s",
        "GET http://api.example:80 (client 'billing'): attempt 2 failed with 503; "
        "retrying in 2.000 s",
    ]
    attempts = [r.getMessage() for r in caplog.records if r.levelno == logging.DEBUG]
    assert len(attempts) == 3
    assert all(r.name == "http_resilience" for r in caplog.records)
    assert "10.0.0.7" not in caplog.text


async def test_attempt_events_carry_the_outcome_and_the_duration() -> None:
    clock, events = FakeClock(), EventRecorder[HttpEvent]()

    async def slow(request: httpx.Request) -> httpx.Response:
        await clock.sleep(0.25)
        return httpx.Response(200)

    await send(async_transport(slow, clock, events=events))
    assert events.of(AttemptEvent) == [
        AttemptEvent("orders", "GET", "http://api.example:80", 1, "200", 0.25)
    ]


async def test_a_listener_that_raises_is_logged_and_does_not_break_the_call(
    caplog: pytest.LogCaptureFixture,
) -> None:
    def broken(event: object) -> None:
        raise RuntimeError("listener bug")

    transport = async_transport(script(503, 200), FakeClock())
    transport = type(transport)(
        httpx.MockTransport(script(503, 200)),
        options=transport.options,
        clock=FakeClock(),
        listeners=[broken],
    )
    assert (await send(transport)).status_code == 200
    assert "an http_resilience event listener raised on AttemptEvent" in caplog.text
