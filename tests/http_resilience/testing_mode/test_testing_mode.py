"""`http_resilience.testing`: testing mode, the recorder, the scripted transport."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Iterator

import httpx
import pytest

from http_resilience import (
    AsyncResilientTransport,
    HttpEvent,
    HttpResilienceOptions,
    ResilientTransport,
    RetryEvent,
    StreamRetryContext,
    StreamRetryOptions,
    correlation_id,
    with_retry,
    with_retry_sync,
)
from http_resilience.testing import (
    EventRecorder,
    FakeClock,
    ScriptedTransport,
    TestingScope,
    is_testing,
    set_testing,
)

pytestmark = pytest.mark.anyio

URL = "http://api.example/orders/1"
FAILING_THRICE = (503, 503, 503, 200)


def no_jitter() -> float:
    return 0.0


def async_transport(
    server: ScriptedTransport, clock: FakeClock, events: EventRecorder[HttpEvent]
) -> AsyncResilientTransport:
    return AsyncResilientTransport(
        server,
        options=HttpResilienceOptions(base_delay="1s"),
        clock=clock,
        listeners=[events],
        random=no_jitter,
    )


async def get(transport: httpx.AsyncBaseTransport) -> httpx.Response:
    async with httpx.AsyncClient(transport=transport) as client:
        return await client.get(URL)


# --- the switch ---------------------------------------------------------------------


def test_testing_mode_is_off_until_turned_on_and_a_with_block_restores_it() -> None:
    assert not is_testing()
    with set_testing(True, attempts=2):
        assert is_testing()
        with set_testing(False):
            assert not is_testing()
        assert is_testing()
    assert not is_testing()


def test_a_plain_call_keeps_the_mode_until_the_next() -> None:
    scope = set_testing(True)
    try:
        assert isinstance(scope, TestingScope)
        assert is_testing()
        assert repr(scope) == "TestingScope(restores testing=False, attempts=None)"
    finally:
        set_testing(False)
    assert not is_testing()


@pytest.mark.parametrize(
    ("testing", "attempts", "error", "message"),
    [
        (True, 0, ValueError, "attempts must be at least 1, got 0"),
        (True, True, TypeError, "attempts must be an int or None, got bool"),
        (True, 1.5, TypeError, "attempts must be an int or None, got float"),
        (False, 2, ValueError, "attempts caps the attempts only with testing=True"),
    ],
)
def test_bad_attempts_are_refused_and_change_nothing(
    testing: bool, attempts: object, error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        set_testing(testing, attempts=attempts)  # type: ignore[arg-type]
    assert not is_testing()


# --- the transport retry --------------------------------------------------------------


async def test_testing_mode_makes_four_attempts_wait_nothing() -> None:
    clock, events = FakeClock(), EventRecorder[HttpEvent]()
    server = ScriptedTransport(*FAILING_THRICE)
    with set_testing(True):
        response = await get(async_transport(server, clock, events))
    assert response.status_code == 200
    assert server.hits == 4
    # Asked to sleep, but for nothing: the clock never moved.
    assert clock.sleeps == [0.0, 0.0, 0.0]
    assert clock.now == 0.0
    # What the policy chose is still reported.
    assert [event.delay for event in events.of(RetryEvent)] == [0.5, 1.0, 2.0]


async def test_without_testing_mode_the_same_call_waits_its_backoff() -> None:
    clock, events = FakeClock(), EventRecorder[HttpEvent]()
    server = ScriptedTransport(*FAILING_THRICE)
    await get(async_transport(server, clock, events))
    assert clock.sleeps == [0.5, 1.0, 2.0]


@pytest.mark.parametrize(("attempts", "hits"), [(1, 1), (2, 2), (10, 4)])
async def test_attempts_caps_the_attempts_never_raises_them(
    attempts: int, hits: int
) -> None:
    clock, events = FakeClock(), EventRecorder[HttpEvent]()
    server = ScriptedTransport(503)
    with set_testing(True, attempts=attempts):
        response = await get(async_transport(server, clock, events))
    assert response.status_code == 503
    assert server.hits == hits
    assert len(events.of(RetryEvent)) == hits - 1


def test_the_sync_transport_waits_nothing_either() -> None:
    clock = FakeClock()
    server = ScriptedTransport(*FAILING_THRICE)
    transport = ResilientTransport(server, clock=clock, random=no_jitter)
    with set_testing(True, attempts=3), httpx.Client(transport=transport) as client:
        assert client.get(URL).status_code == 503
    assert server.hits == 3
    assert clock.sleeps == [0.0, 0.0]


# --- stream retry -------------------------------------------------------------------


async def test_stream_retries_wait_nothing_and_obey_the_cap() -> None:
    clock = FakeClock()
    calls: list[int] = []

    async def source(context: StreamRetryContext) -> AsyncIterator[int]:
        calls.append(context.attempt_number)
        if context.attempt_number < 4:
            raise ConnectionResetError("reset")
        yield 1

    options = StreamRetryOptions(clock=clock)
    with set_testing(True):
        assert [item async for item in with_retry(source, options)] == [1]
    assert calls == [1, 2, 3, 4]
    assert clock.sleeps == [0.0, 0.0, 0.0]

    calls.clear()
    with set_testing(True, attempts=2), pytest.raises(ConnectionResetError):
        [item async for item in with_retry(source, options)]
    assert calls == [1, 2]


def test_sync_stream_retries_wait_nothing() -> None:
    clock = FakeClock()

    def source(context: StreamRetryContext) -> Iterator[int]:
        if context.attempt_number < 3:
            raise ConnectionResetError("reset")
        yield context.attempt_number

    with set_testing(True):
        options = StreamRetryOptions(clock=clock)
        assert list(with_retry_sync(source, options)) == [3]
    assert clock.sleeps == [0.0, 0.0]


# --- the helpers ----------------------------------------------------------------------


def test_the_recorder_keeps_every_event_in_order() -> None:
    recorder = EventRecorder[object]()
    recorder("a")
    recorder(1)
    assert recorder.events == ["a", 1]
    assert recorder.of(int) == [1]
    assert repr(recorder) == "EventRecorder(events=2)"
    recorder.clear()
    assert recorder.events == []


async def test_the_scripted_transport_answers_in_order_and_repeats_the_last() -> None:
    failure = httpx.ConnectError("refused")
    server = ScriptedTransport(failure, 503, httpx.Response(200, json={"ok": True}))
    async with httpx.AsyncClient(transport=server) as client:
        with pytest.raises(httpx.ConnectError):
            await client.get(URL)
        assert (await client.get(URL)).status_code == 503
        first, again = await client.get(URL), await client.get(URL)
    assert first.json() == again.json() == {"ok": True}
    assert server.hits == 4
    assert [str(request.url) for request in server.requests] == [URL] * 4
    assert repr(server) == "ScriptedTransport(answers=3, hits=4)"


def test_the_scripted_transport_refuses_what_it_cannot_answer() -> None:
    with pytest.raises(ValueError, match="at least one answer"):
        ScriptedTransport()
    with pytest.raises(TypeError, match="got str"):
        ScriptedTransport("200")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="got bool"):
        ScriptedTransport(True)


# --- log records ----------------------------------------------------------------------


async def test_a_retry_log_record_carries_the_structured_extras(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock, events = FakeClock(), EventRecorder[HttpEvent]()
    server = ScriptedTransport(httpx.ConnectError("refused by 10.0.0.7"), 200)
    with (
        caplog.at_level(logging.WARNING, logger="http_resilience"),
        correlation_id("order-42"),
    ):
        await get(async_transport(server, clock, events))
    (record,) = caplog.records
    assert record.getMessage() == (
        "GET http://api.example:80 (client 'default'): attempt 1 failed with "
        "ConnectError; retrying in 0.500 s"
    )
    extras = {
        key: value
        for key, value in vars(record).items()
        if key.startswith("resilience_") or key == "correlation_id"
    }
    assert extras == {
        "resilience_event": "retry",
        "resilience_client": "default",
        "resilience_method": "GET",
        "resilience_host": "http://api.example:80",
        "resilience_attempt": 1,
        "resilience_delay_s": 0.5,
        "resilience_reason": "ConnectError",
        "correlation_id": "order-42",
    }
    assert "10.0.0.7" not in caplog.text
