"""Attempt and total timeouts: one deadline, cut by one timer, read on the clock.

Attempts that "take" time do it on the fake clock (`await clock.sleep(...)`);
the few that hang for real are cut by a timer that has a millisecond left.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from typing import Any

import httpx
import pytest
from anyio.lowlevel import checkpoint

from http_resilience import (
    AttemptTimeoutError,
    BreakerEvent,
    BrokenCircuitError,
    HttpEvent,
    TimeoutEvent,
    TotalTimeoutError,
)
from http_resilience._core.call import Call
from http_resilience._core.telemetry import Telemetry
from http_resilience._strategies.timeout.deadline import Deadline
from http_resilience._strategies.timeout.strategy import (
    AsyncTimeout,
    Narrowing,
    SyncTimeout,
)
from http_resilience._strategies.timeout.timer import DeadlineTimer
from http_resilience.testing import EventRecorder, FakeClock
from tests.http_resilience._support.scripted import URL, async_transport, script

pytestmark = pytest.mark.anyio


def taking(clock: FakeClock, seconds: float, status: int = 200) -> Any:
    """A handler whose attempts take `seconds` on the fake clock."""
    calls: list[httpx.Request] = []

    async def handler(request: httpx.Request) -> httpx.Response:
        calls.append(request)
        await clock.sleep(seconds)
        return httpx.Response(status)

    handler.calls = calls  # type: ignore[attr-defined]
    return handler


class Hanging:
    """A handler that never answers; it records how each attempt ended."""

    def __init__(self, answer_first: int = 0) -> None:
        self.started = 0
        self.cancelled = 0
        self.answer_first = answer_first

    async def __call__(self, request: httpx.Request) -> httpx.Response:
        self.started += 1
        if self.started <= self.answer_first:
            return httpx.Response(503)
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        raise AssertionError("unreachable")  # pragma: no cover


async def get(transport: httpx.AsyncBaseTransport) -> httpx.Response:
    return await transport.handle_async_request(httpx.Request("GET", URL))


async def test_an_attempt_past_its_timeout_on_the_clock_is_a_timeout() -> None:
    clock, events = FakeClock(), EventRecorder[HttpEvent]()
    handler = taking(clock, 11)
    transport = async_transport(handler, clock, events=events, max_retry_attempts=0)
    with pytest.raises(AttemptTimeoutError) as raised:
        await get(transport)
    # The time it took on the clock, not the timeout in its place.
    assert str(raised.value) == (
        "GET http://api.example:80 (client 'orders'): attempt 1 timed out after "
        "11 s (attempt timeout 10 s)"
    )
    assert (raised.value.elapsed, raised.value.timeout) == (11.0, 10.0)
    assert events.of(TimeoutEvent) == [
        TimeoutEvent("orders", "GET", "http://api.example:80", "attempt", 10.0)
    ]


async def test_a_timed_out_attempt_is_retried_like_a_503() -> None:
    clock = FakeClock()
    slow_then_fast = [11.0, 0.0]

    async def handler(request: httpx.Request) -> httpx.Response:
        await clock.sleep(slow_then_fast.pop(0))
        return httpx.Response(200)

    response = await get(async_transport(handler, clock))
    assert response.status_code == 200
    assert clock.sleeps == [11.0, 1.0, 0.0]


async def test_the_late_response_of_a_timed_out_attempt_is_closed() -> None:
    clock = FakeClock()
    server = script(200)

    async def late(request: httpx.Request) -> httpx.Response:
        await clock.sleep(10.5)
        return server(request)

    with pytest.raises(AttemptTimeoutError):
        await get(async_transport(late, clock, max_retry_attempts=0))
    assert server.streams[0].closed


@pytest.mark.asyncio_only("its helpers use asyncio.CancelledError, asyncio.Event")
async def test_an_attempt_that_hangs_is_cut_at_its_deadline() -> None:
    handler = Hanging()
    transport = async_transport(
        handler,
        FakeClock(),
        attempt_timeout="1ms",
        max_retry_attempts=2,
        base_delay=0,
    )
    with pytest.raises(
        AttemptTimeoutError,
        match=r"attempt 3 timed out after [\d.]+ s \(attempt timeout 0\.001 s\)",
    ):
        await get(transport)
    assert (handler.started, handler.cancelled) == (3, 3)


@pytest.mark.asyncio_only("its helpers use asyncio.CancelledError, asyncio.Event")
async def test_an_attempt_cut_by_the_total_deadline_is_a_total_timeout() -> None:
    # The first attempt fails at once; the wait (half of 59.998 s) ends 1 ms
    # before the total deadline, so the second attempt has a millisecond.
    clock, events = FakeClock(), EventRecorder[HttpEvent]()
    handler = Hanging(answer_first=1)
    transport = async_transport(
        handler,
        clock,
        events=events,
        base_delay=59.998,
        max_delay=59.998,
        failure_ratio=0.01,
        minimum_throughput=1,
    )
    with pytest.raises(TotalTimeoutError) as raised:
        await get(transport)
    # Measured on the pipeline's clock, which stood at 29.999 s while the
    # loop's timer cut the last millisecond.
    assert str(raised.value) == (
        "GET http://api.example:80 (client 'orders'): no response, timed out after "
        "29.999 s (total timeout 30 s)"
    )
    assert (handler.started, handler.cancelled) == (2, 1)
    assert events.of(TimeoutEvent)[-1].kind == "total"
    # The first 503 opened the breaker (minimum 1); the second attempt was its
    # probe, and a total timeout says nothing about the host: no verdict.
    assert [(e.previous, e.current) for e in events.of(BreakerEvent)] == [
        ("closed", "open"),
        ("open", "half_open"),
    ]


async def test_a_timed_out_attempt_counts_against_the_breaker() -> None:
    clock, events = FakeClock(), EventRecorder[HttpEvent]()
    handler = taking(clock, 10.5)
    transport = async_transport(
        handler, clock, events=events, max_retry_attempts=0, minimum_throughput=1
    )
    with pytest.raises(AttemptTimeoutError):
        await get(transport)
    assert [e.current for e in events.of(BreakerEvent)] == ["open"]


@pytest.mark.asyncio_only(
    "the test itself uses asyncio.CancelledError, asyncio.create_task"
)
async def test_a_cancelled_caller_is_not_turned_into_a_timeout() -> None:
    handler = Hanging()
    transport = async_transport(handler, FakeClock())
    task = asyncio.create_task(get(transport))
    for _ in range(5):
        await checkpoint()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert handler.cancelled == 1


@pytest.mark.asyncio_only("the test itself uses asyncio.CancelledError, asyncio.Event")
async def test_a_cancellation_at_the_moment_of_the_cut_still_cancels_the_caller() -> (
    None
):
    loop = asyncio.get_running_loop()

    async def hanging(request: httpx.Request) -> httpx.Response:
        task = asyncio.current_task()
        assert task is not None
        # Due with the cut (1 ms): both may land in one pass of the loop.
        loop.call_later(0.001, task.cancel)
        await asyncio.Event().wait()
        raise AssertionError("unreachable")  # pragma: no cover

    transport = async_transport(
        hanging, FakeClock(), attempt_timeout="1ms", base_delay=0
    )
    with pytest.raises(asyncio.CancelledError):
        await asyncio.create_task(get(transport))


@pytest.mark.asyncio_only("the test itself uses asyncio.CancelledError, asyncio.Event")
async def test_an_attempt_that_swallows_the_cut_and_answers_late_times_out() -> None:
    server = script(200)

    async def stubborn(request: httpx.Request) -> httpx.Response:
        with contextlib.suppress(asyncio.CancelledError):  # a badly behaved transport
            await asyncio.Event().wait()
        return server(request)

    transport = async_transport(
        stubborn, FakeClock(), attempt_timeout="1ms", max_retry_attempts=0
    )
    with pytest.raises(AttemptTimeoutError):
        await get(transport)
    assert server.streams[0].closed
    # The task's cancellation count is back to zero: later awaits run normally.
    current = asyncio.current_task()
    assert current is not None
    assert current.cancelling() == 0
    await checkpoint()


async def test_an_httpx_timeout_before_the_deadline_stays_httpx_s_own() -> None:
    # The pipeline owns time, but this timeout came before its deadline: the
    # transport's own. It is retried as a transport failure, and raised as it
    # was, each attempt noting itself on it.
    failure = httpx.ReadTimeout("timed out")
    server = script(failure)
    transport = async_transport(server, FakeClock(), max_retry_attempts=1)
    with pytest.raises(httpx.ReadTimeout) as raised:
        await get(transport)
    assert raised.value is failure
    assert server.hits == 2
    # The time spent is the sockets' clock on trio (anyio's), so a busy
    # machine may show a millisecond where FakeClock shows none.
    notes = [note.split(": ", 1)[1] for note in failure.__notes__]
    assert [re.sub(r"after [0-9.]+ s", "after T s", note) for note in notes] == [
        f"attempt {n} raised it after T s, before its attempt timeout of 10 s "
        "passed (the wrapped transport's own timeout)"
        for n in (1, 2)
    ]
    assert all(float(note.split()[5]) < 1 for note in notes)


async def test_an_httpx_timeout_is_a_transport_failure_when_it_does_not() -> None:
    failure = httpx.ReadTimeout("timed out")
    server = script(failure)
    transport = async_transport(
        server, FakeClock(), max_retry_attempts=1, own_transport_timeout=False
    )
    with pytest.raises(httpx.ReadTimeout) as raised:
        await get(transport)
    assert raised.value is failure
    assert server.hits == 2


@pytest.mark.asyncio_only("the test itself uses asyncio.CancelledError, asyncio.Event")
async def test_a_cut_attempt_that_raises_something_else_is_still_a_timeout() -> None:
    async def converts(request: httpx.Request) -> httpx.Response:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            raise httpx.ReadError("closed while cancelled") from None
        raise AssertionError("unreachable")  # pragma: no cover

    transport = async_transport(
        converts, FakeClock(), attempt_timeout="1ms", max_retry_attempts=0
    )
    with pytest.raises(AttemptTimeoutError) as raised:
        await get(transport)
    assert isinstance(raised.value.__cause__, httpx.ReadError)


async def test_a_breaker_rejection_is_not_an_attempt_timeout() -> None:
    clock = FakeClock()
    transport = async_transport(
        taking(clock, 11), clock, max_retry_attempts=0, minimum_throughput=1
    )
    with pytest.raises(AttemptTimeoutError):
        await get(transport)
    with pytest.raises(BrokenCircuitError):
        await get(transport)


# --- the strategy alone ---------------------------------------------------------------


class Answer:
    def __init__(self) -> None:
        self.deadlines: list[tuple[float, str, float | None]] = []

    async def handle(self, request: httpx.Request, call: Call) -> httpx.Response:
        self.deadlines.append((call.deadline, call.deadline_kind, call.phase_timeout))
        return httpx.Response(200)

    def handle_sync(self, request: httpx.Request, call: Call) -> httpx.Response:
        self.deadlines.append((call.deadline, call.deadline_kind, call.phase_timeout))
        return httpx.Response(200)


def strategy(inner: Answer, clock: FakeClock, seconds: float, *, cut: bool) -> Any:
    """The timeout's async handler around `inner`: cutting, or only narrowing."""
    deadline = Deadline(
        seconds=seconds,
        kind="attempt",
        clock=clock,
        telemetry=Telemetry("c"),
        own_time=cut,
    )
    if not cut:
        return Narrowing(inner, deadline)
    return AsyncTimeout(inner, deadline, DeadlineTimer())


def test_a_narrowing_never_owns_the_transports_time() -> None:
    # Built only around another deadline, so never the innermost one.
    deadline = Deadline(
        seconds=1.0,
        kind="total",
        clock=FakeClock(),
        telemetry=Telemetry("c"),
        own_time=True,
    )
    with pytest.raises(ValueError, match="innermost deadline"):
        Narrowing(Answer(), deadline)


def sync_strategy(inner: Answer, clock: FakeClock, seconds: float) -> SyncTimeout:
    """The timeout's sync handler around `inner`, cutting."""
    deadline = Deadline(
        seconds=seconds,
        kind="attempt",
        clock=clock,
        telemetry=Telemetry("c"),
        own_time=True,
    )
    return SyncTimeout(inner, deadline)


async def test_a_deadline_already_passed_sends_nothing() -> None:
    clock, inner = FakeClock(), Answer()
    call = Call("c", "GET", "http://h:80")
    call.deadline, call.deadline_kind, call.deadline_span = 0.0, "total", 30.0
    with pytest.raises(TotalTimeoutError):
        await strategy(inner, clock, 10, cut=True).handle(
            httpx.Request("GET", URL), call
        )
    with pytest.raises(TotalTimeoutError):
        sync_strategy(inner, clock, 10).handle_sync(httpx.Request("GET", URL), call)
    assert inner.deadlines == []


async def test_a_timeout_narrows_the_deadline_inside_and_restores_it_after() -> None:
    clock, inner = FakeClock(start=100.0), Answer()
    call = Call("c", "GET", "http://h:80")
    call.deadline, call.deadline_kind, call.deadline_span = 105.0, "total", 30.0
    await strategy(inner, clock, 10, cut=True).handle(httpx.Request("GET", URL), call)
    await strategy(inner, clock, 2, cut=True).handle(httpx.Request("GET", URL), call)
    await strategy(inner, clock, 2, cut=False).handle(httpx.Request("GET", URL), call)
    assert inner.deadlines == [
        (105.0, "total", 5.0),
        (102.0, "attempt", 2.0),
        (102.0, "attempt", None),
    ]
    assert (call.deadline, call.deadline_kind, call.phase_timeout) == (
        105.0,
        "total",
        None,
    )
