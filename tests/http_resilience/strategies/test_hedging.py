"""Hedging on a `FakeClock`: when a hedge is sent, who wins, what is cancelled.

A `FakeClock` moves only when someone sleeps, so a handler that "took" time
with ``clock.sleep`` would not hold the hedge back: the handlers here wait on
events the test controls, and the fake clock times the hedge's delay.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import httpx
import pytest
from anyio.lowlevel import checkpoint
from pydantic import ValidationError

from http_resilience import (
    AsyncResilientTransport,
    AttemptEvent,
    HedgeEvent,
    HedgingOptions,
    HttpEvent,
    ResilienceLayerError,
    ResiliencePipeline,
    ResilientTransport,
    TotalTimeoutError,
    create_client,
)
from http_resilience._core.builder import BuildContext, SyncStepOptions, build_sync
from http_resilience._core.send import SyncSend
from http_resilience._core.telemetry import Telemetry
from http_resilience.testing import EventRecorder, FakeClock
from tests.http_resilience._support.scripted import URL, TrackedStream

pytestmark = pytest.mark.anyio


@dataclass
class Hedged:
    """A server whose answers are scripted per request; `None` hangs until released.

    Records when (on the fake clock) each request arrived, how many were in
    flight at once, which were cancelled, and the bodies it handed out; each
    answer names its attempt in ``x-attempt``.
    """

    clock: FakeClock
    answers: list[int | Exception | None]
    arrived: list[float] = field(default_factory=list[float])
    cancelled: list[int] = field(default_factory=list[int])
    streams: list[TrackedStream] = field(default_factory=list[TrackedStream])
    release: asyncio.Event = field(default_factory=asyncio.Event)
    in_flight: int = 0
    peak: int = 0

    async def __call__(self, request: httpx.Request) -> httpx.Response:
        number = len(self.arrived) + 1
        self.arrived.append(self.clock.monotonic())
        answer = self.answers[min(number, len(self.answers)) - 1]
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)
        try:
            if answer is None:
                await self.release.wait()
                answer = 200
            if isinstance(answer, Exception):
                raise answer
        except asyncio.CancelledError:
            self.cancelled.append(number)
            raise
        finally:
            self.in_flight -= 1
        stream = TrackedStream(f'{{"attempt": {number}}}'.encode())
        self.streams.append(stream)
        headers = {"x-attempt": str(number)}
        return httpx.Response(answer, headers=headers, stream=stream)


def hedging(
    server: Hedged, *, events: EventRecorder[HttpEvent] | None = None, **values: Any
) -> AsyncResilientTransport:
    pipeline = ResiliencePipeline().add_hedging(**values)
    return AsyncResilientTransport(
        httpx.MockTransport(server),
        pipeline=pipeline,
        name="catalog",
        clock=server.clock,
        listeners=[events] if events is not None else [],
    )


async def get(
    transport: httpx.AsyncBaseTransport, method: str = "GET"
) -> httpx.Response:
    return await transport.handle_async_request(httpx.Request(method, URL))


# --- the options --------------------------------------------------------------------


def test_the_defaults_are_a_2_second_delay_and_one_hedge() -> None:
    options = HedgingOptions()
    assert options.delay.total_seconds() == 2.0
    assert options.max_hedged_attempts == 1
    assert (
        HedgingOptions(delay=timedelta(milliseconds=200)).delay.total_seconds() == 0.2
    )
    assert HedgingOptions.model_validate({"delay": "200ms"}).delay == timedelta(
        milliseconds=200
    )


def test_invalid_hedging_options_name_the_field() -> None:
    with pytest.raises(ValidationError) as raised:
        HedgingOptions(delay=timedelta(0), max_hedged_attempts=0)
    fields = {error["loc"][0] for error in raised.value.errors()}
    assert fields == {"delay", "max_hedged_attempts"}
    with pytest.raises(ValidationError, match="Extra inputs are not permitted"):
        HedgingOptions.model_validate({"hedges": 2})
    with pytest.raises(ValidationError, match="max_hedged_attempts"):
        ResiliencePipeline().add_hedging(max_hedged_attempts=-1)


def test_the_options_are_frozen() -> None:
    options = HedgingOptions()
    with pytest.raises(ValidationError):
        options.max_hedged_attempts = 2


# --- when a hedge goes --------------------------------------------------------------


@pytest.mark.asyncio_only("its helpers use asyncio.CancelledError, asyncio.Event")
async def test_a_hedge_is_sent_after_the_delay_and_its_answer_wins() -> None:
    server, events = Hedged(FakeClock(), [None, 200]), EventRecorder[HttpEvent]()
    response = await get(hedging(server, events=events, delay="200ms"))
    assert response.headers["x-attempt"] == "2"
    assert server.arrived == [0.0, 0.2]  # the hedge after the delay, not before
    assert server.clock.sleeps == [0.2]
    assert server.cancelled == [1]  # the slow first attempt is cancelled
    assert server.in_flight == 0
    assert events.of(HedgeEvent) == [
        HedgeEvent("catalog", "GET", "http://api.example:80", 2, 0.2, "delay")
    ]
    assert [(e.attempt, e.outcome) for e in events.of(AttemptEvent)] == [(2, "200")]


async def test_an_attempt_that_answers_before_the_delay_is_not_hedged() -> None:
    server = Hedged(FakeClock(), [200])
    response = await get(hedging(server))
    assert response.headers["x-attempt"] == "1"
    assert server.arrived == [0.0]
    assert server.clock.sleeps == []  # no timer was even armed


@pytest.mark.asyncio_only("the test itself uses asyncio.create_task")
async def test_the_first_attempt_wins_when_it_answers_after_the_hedge_went() -> None:
    server = Hedged(FakeClock(), [None, None])
    call = asyncio.create_task(get(hedging(server, max_hedged_attempts=1)))
    while len(server.arrived) < 2:
        await checkpoint()
    server.release.set()  # both answer in the same turn of the loop
    response = await call
    assert response.headers["x-attempt"] == "1"  # the earlier attempt is preferred
    # The loser answered too: its response is closed, the winner's is not.
    assert [stream.closed for stream in server.streams] == [False, True]


async def test_an_answer_before_the_delay_cancels_the_armed_timer() -> None:
    # The common case, on the real clock: the first attempt answers well within
    # the delay, and the timer armed for it is cancelled, not waited out.
    async def quick(request: httpx.Request) -> httpx.Response:
        for _ in range(3):
            await checkpoint()
        return httpx.Response(200)

    events = EventRecorder[HttpEvent]()
    transport = AsyncResilientTransport(
        httpx.MockTransport(quick),
        pipeline=ResiliencePipeline().add_hedging(delay=60),
        listeners=[events],
    )
    assert (await get(transport)).status_code == 200
    assert events.of(HedgeEvent) == []
    assert [e.attempt for e in events.of(AttemptEvent)] == [1]


@pytest.mark.asyncio_only("the test itself uses asyncio.create_task")
async def test_a_failed_hedge_leaves_the_first_attempt_to_answer() -> None:
    server = Hedged(FakeClock(), [None, 503])
    call = asyncio.create_task(get(hedging(server)))
    while len(server.streams) < 1:  # the hedge's 503 is in
        await checkpoint()
    for _ in range(5):
        await checkpoint()
    assert not call.done()  # the slow first may still answer well
    server.release.set()
    response = await call
    assert response.headers["x-attempt"] == "1"
    assert [s.closed for s in server.streams] == [True, False]


def test_hedging_has_no_sync_strategy_by_its_type() -> None:
    options = HedgingOptions(delay=1.0)
    assert not isinstance(options, SyncStepOptions)
    with pytest.raises(TypeError, match="hedging has no sync strategy"):
        build_sync(
            [options],
            SyncSend(httpx.MockTransport(lambda request: httpx.Response(200))),
            BuildContext(FakeClock(), Telemetry("catalog")),
        )


@pytest.mark.asyncio_only("the test itself uses asyncio.create_task")
async def test_at_most_max_hedged_attempts_plus_one_are_in_flight() -> None:
    server = Hedged(FakeClock(), [None, None, None, 200])
    events = EventRecorder[HttpEvent]()
    call = asyncio.create_task(
        get(hedging(server, events=events, delay=1, max_hedged_attempts=2))
    )
    for _ in range(20):
        await checkpoint()
    assert server.arrived == [0.0, 1.0, 2.0]  # no fourth: two hedges at most
    assert server.peak == 3
    server.release.set()
    response = await call
    assert response.headers["x-attempt"] == "1"
    assert [s.closed for s in server.streams] == [False, True, True]
    assert [e.attempt for e in events.of(HedgeEvent)] == [2, 3]
    assert server.in_flight == 0


async def test_a_failure_sends_the_next_hedge_at_once_and_is_closed() -> None:
    server, events = Hedged(FakeClock(), [503, 200]), EventRecorder[HttpEvent]()
    response = await get(hedging(server, events=events))
    assert response.headers["x-attempt"] == "2"
    assert server.arrived == [0.0, 0.0]  # no waiting out the delay after a 503
    assert server.clock.sleeps == []
    assert [s.closed for s in server.streams] == [True, False]
    assert [e.reason for e in events.of(HedgeEvent)] == ["503"]


async def test_when_every_attempt_fails_the_last_response_is_returned() -> None:
    server = Hedged(FakeClock(), [503, 500])
    response = await get(hedging(server))
    assert response.status_code == 500
    assert [s.closed for s in server.streams] == [True, False]


async def test_when_every_attempt_fails_in_transport_the_last_error_is_raised() -> None:
    refused = [httpx.ConnectError("first"), httpx.ConnectError("second")]
    server = Hedged(FakeClock(), [*refused])
    with pytest.raises(httpx.ConnectError, match="second"):
        await get(hedging(server))
    assert len(server.arrived) == 2


@pytest.mark.asyncio_only("its helpers use asyncio.CancelledError, asyncio.Event")
async def test_an_error_that_is_not_a_failure_ends_the_call_and_cancels_the_rest() -> (
    None
):
    server = Hedged(FakeClock(), [None, ValueError("a bug")])
    with pytest.raises(ValueError, match="a bug"):
        await get(hedging(server))
    assert server.cancelled == [1]
    assert server.in_flight == 0


@pytest.mark.asyncio_only(
    "the test itself uses asyncio.CancelledError, asyncio.create_task"
)
async def test_a_cancelled_call_cancels_every_attempt() -> None:
    server = Hedged(FakeClock(), [None])
    call = asyncio.create_task(get(hedging(server)))
    while len(server.arrived) < 2:
        await checkpoint()
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call
    assert sorted(server.cancelled) == [1, 2]
    assert server.in_flight == 0


@pytest.mark.asyncio_only("its helpers use asyncio.CancelledError, asyncio.Event")
async def test_an_outer_timeout_ends_a_hedged_call_and_cancels_every_attempt() -> None:
    server = Hedged(FakeClock(), [None])
    pipeline = ResiliencePipeline().add_timeout("5ms").add_hedging(delay=1)
    transport = AsyncResilientTransport(
        httpx.MockTransport(server), pipeline=pipeline, clock=server.clock
    )
    with pytest.raises(TotalTimeoutError, match=r"\(total timeout 0\.005 s\)"):
        await get(transport)
    assert sorted(server.cancelled) == [1, 2]


async def test_an_inner_attempt_timeout_is_a_failure_that_is_hedged_at_once() -> None:
    clock, events = FakeClock(), EventRecorder[HttpEvent]()
    took = [11.0, 0.0]

    async def handler(request: httpx.Request) -> httpx.Response:
        await clock.sleep(took.pop(0))
        return httpx.Response(200)

    pipeline = ResiliencePipeline().add_hedging(delay=30).add_timeout(5)
    transport = AsyncResilientTransport(
        httpx.MockTransport(handler),
        pipeline=pipeline,
        clock=clock,
        listeners=[events],
    )
    assert (await get(transport)).status_code == 200
    (hedge,) = events.of(HedgeEvent)
    assert (hedge.attempt, hedge.reason) == (2, "AttemptTimeoutError")
    assert took == []


# --- what is not hedged -------------------------------------------------------------


@pytest.mark.parametrize("method", ["POST", "PATCH", "PUT", "DELETE"])
async def test_a_method_that_is_not_safe_is_sent_once(method: str) -> None:
    server = Hedged(FakeClock(), [503])
    transport = hedging(server)
    response = await get(transport, method)
    assert response.status_code == 503
    assert len(server.arrived) == 1
    assert server.clock.sleeps == []
    assert transport.will_retry(httpx.Request(method, URL)) is False


@pytest.mark.asyncio_only("its helpers use asyncio.CancelledError, asyncio.Event")
@pytest.mark.parametrize("method", ["GET", "HEAD", "OPTIONS", "TRACE"])
async def test_every_safe_method_is_hedged(method: str) -> None:
    server = Hedged(FakeClock(), [None, 200])
    transport = hedging(server)
    assert (await get(transport, method)).status_code == 200
    assert len(server.arrived) == 2
    assert transport.will_retry(httpx.Request(method, URL)) is True


async def test_a_one_shot_body_is_sent_once() -> None:
    server = Hedged(FakeClock(), [503])

    async def body() -> AsyncIterator[bytes]:
        yield b"x"

    request = httpx.Request("GET", URL, content=body())
    transport = hedging(server)
    assert transport.will_retry(request) is False
    assert (await transport.handle_async_request(request)).status_code == 503
    assert len(server.arrived) == 1


# --- sync, and one layer ------------------------------------------------------------


def test_the_sync_transport_refuses_hedging() -> None:
    pipeline = ResiliencePipeline().add_hedging()
    with pytest.raises(TypeError, match="hedging needs an async client"):
        ResilientTransport(
            httpx.MockTransport(lambda r: httpx.Response(200)), pipeline=pipeline
        )
    with pytest.raises(TypeError, match="a sync attempt cannot be cancelled"):
        create_client("catalog", pipeline=pipeline)


async def test_a_second_layer_inside_a_hedged_attempt_is_refused() -> None:
    clock = FakeClock()
    inner = AsyncResilientTransport(
        httpx.MockTransport(lambda request: httpx.Response(200)), name="inner"
    )

    class Wrapper(httpx.AsyncBaseTransport):
        async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
            return await inner.handle_async_request(request)

    outer = AsyncResilientTransport(
        Wrapper(), pipeline=ResiliencePipeline().add_hedging(), clock=clock
    )
    with pytest.raises(ResilienceLayerError, match="one resilience layer"):
        await get(outer)


async def test_a_failure_its_service_already_retried_is_not_hedged_again() -> None:
    sent: list[httpx.Request] = []

    def gave_up(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        return httpx.Response(503, headers={"X-Retry-Exhausted": "1"})

    transport = AsyncResilientTransport(
        httpx.MockTransport(gave_up),
        pipeline=ResiliencePipeline().add_hedging(),
        clock=FakeClock(),
    )
    assert (await get(transport)).status_code == 503
    assert len(sent) == 1
