"""Deadlines for a block of work: `deadline_scope`, `remaining_time`, and the header.

Every call made inside a scope is cut to the time it leaves (no attempt and
no wait past it), scopes nest with the earliest deadline kept, and each
attempt carries the milliseconds it has left in ``X-Request-Timeout-Ms``.
All on `FakeClock`s: the scope's and the pipeline's may even differ.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import httpx
import pytest

from http_resilience import (
    AsyncResilientTransport,
    ResiliencePipeline,
    ResilientTransport,
    TotalTimeoutError,
    create_client,
    deadline_scope,
    remaining_time,
)
from http_resilience.testing import FakeClock
from tests.http_resilience._support.scripted import (
    URL,
    no_jitter,
    script,
    sync_transport,
)

pytestmark = pytest.mark.anyio


def get(transport: httpx.BaseTransport) -> httpx.Response:
    return transport.handle_request(httpx.Request("GET", URL))


# --- the scope ---------------------------------------------------------------------


def test_remaining_time_is_none_outside_and_counts_down_inside() -> None:
    clock = FakeClock()
    assert remaining_time() is None
    with deadline_scope(5, clock=clock):
        assert remaining_time() == 5.0
        clock.advance(2)
        assert remaining_time() == 3.0
        clock.advance(10)
        assert remaining_time() == 0.0  # never negative
    assert remaining_time() is None


def test_scopes_nest_and_the_earliest_deadline_wins() -> None:
    clock = FakeClock()
    with deadline_scope(timedelta(seconds=3), clock=clock):
        with deadline_scope(10, clock=clock):
            assert remaining_time() == 3.0  # the outer one is earlier
        with deadline_scope(1, clock=clock):
            assert remaining_time() == 1.0
        assert remaining_time() == 3.0


@pytest.mark.asyncio_only("the test itself uses asyncio.create_task")
async def test_a_task_started_inside_a_scope_keeps_it() -> None:
    clock = FakeClock()

    async def later() -> float | None:
        return remaining_time()

    with deadline_scope(4, clock=clock):
        task = asyncio.create_task(later())
    assert await task == 4.0


@pytest.mark.parametrize(
    ("seconds", "error"),
    [(-1, ValueError), (float("nan"), ValueError), (float("inf"), ValueError)],
)
def test_a_scope_refuses_a_time_that_is_no_deadline(
    seconds: float, error: type[Exception]
) -> None:
    with (
        pytest.raises(error, match="finite time of 0 or more"),
        deadline_scope(seconds),
    ):
        pass


@pytest.mark.parametrize("seconds", ["2s", None, True])
def test_a_scope_takes_seconds_or_a_timedelta(seconds: Any) -> None:
    with (
        pytest.raises(TypeError, match="seconds or a timedelta"),
        deadline_scope(seconds),
    ):
        pass


# --- calls inside a scope ------------------------------------------------------------


def test_a_call_inside_a_scope_stops_retrying_at_its_deadline() -> None:
    clock = FakeClock()
    server = script(503)
    transport = sync_transport(server, clock)
    with deadline_scope(3, clock=clock):
        # Waits of 1 s and then 2 s: the second would end at the deadline.
        assert get(transport).status_code == 503
    assert (server.hits, clock.sleeps) == (2, [1.0])
    outside = script(503)
    get(sync_transport(outside, FakeClock()))
    assert outside.hits == 4


def test_a_call_with_no_time_left_sends_nothing() -> None:
    clock = FakeClock()
    server = script(200)
    transport = sync_transport(server, clock)
    with deadline_scope(1, clock=clock):
        clock.advance(1)
        with pytest.raises(TotalTimeoutError):
            get(transport)
    assert server.hits == 0


async def test_the_async_transport_keeps_the_scope_too() -> None:
    clock = FakeClock()
    server = script(503)
    transport = AsyncResilientTransport(
        httpx.MockTransport(server), clock=clock, random=no_jitter
    )
    with deadline_scope(3, clock=clock):
        response = await transport.handle_async_request(httpx.Request("GET", URL))
    assert response.status_code == 503
    assert (server.hits, clock.sleeps) == (2, [1.0])
    with deadline_scope(0, clock=clock), pytest.raises(TotalTimeoutError):
        await transport.handle_async_request(httpx.Request("GET", URL))
    assert server.hits == 2


# --- the header ----------------------------------------------------------------------


def test_each_attempt_tells_the_server_its_time_left() -> None:
    clock = FakeClock()
    server = script(503, 503, 200)
    transport = sync_transport(server, clock)
    get(transport)
    sent = [request.headers["x-request-timeout-ms"] for request in server.requests]
    # Each attempt has its 10 s; the third starts at 3 s, 27 s before the total.
    assert sent == ["10000", "10000", "10000"]
    server = script(200)
    transport = sync_transport(server, clock)
    with deadline_scope(2.5, clock=clock):
        get(transport)
    assert server.requests[0].headers["x-request-timeout-ms"] == "2500"


def test_a_stale_value_is_replaced_and_the_header_may_be_renamed_or_dropped() -> None:
    server = script(200)
    transport = sync_transport(server, FakeClock())
    transport.handle_request(
        httpx.Request("GET", URL, headers={"X-Request-Timeout-Ms": "999999"})
    )
    assert server.requests[0].headers.get_list("x-request-timeout-ms") == ["10000"]

    def build(**values: Any) -> tuple[ResilientTransport, Any]:
        recorded = script(200)
        return ResilientTransport(
            httpx.MockTransport(recorded), clock=FakeClock(), random=no_jitter, **values
        ), recorded

    renamed, recorded = build(deadline_header="Grpc-Timeout-Ms")
    get(renamed)
    assert recorded.requests[0].headers["grpc-timeout-ms"] == "10000"
    assert "x-request-timeout-ms" not in recorded.requests[0].headers
    silent, recorded = build(deadline_header=None)
    get(silent)
    assert "x-request-timeout-ms" not in recorded.requests[0].headers
    with pytest.raises(ValueError, match="is not an HTTP header name"):
        build(deadline_header="X Timeout")
    with pytest.raises(TypeError, match="deadline_header must be a header name"):
        build(deadline_header=3)


def test_without_any_deadline_no_header_is_sent() -> None:
    server = script(200)
    transport = ResilientTransport(
        httpx.MockTransport(server), pipeline=ResiliencePipeline().add_retry()
    )
    get(transport)
    assert "x-request-timeout-ms" not in server.requests[0].headers


def test_the_clients_take_the_header_name_too() -> None:
    server = script(200)
    with create_client(
        "geo",
        transport=httpx.MockTransport(server),
        clock=FakeClock(),
        deadline_header="Grpc-Timeout-Ms",
    ) as client:
        client.get(URL)
    assert server.requests[0].headers["grpc-timeout-ms"] == "10000"
    quiet = script(200)
    with create_client(
        "geo", transport=httpx.MockTransport(quiet), deadline_header=None
    ) as client:
        client.get(URL)
    assert "x-request-timeout-ms" not in quiet.requests[0].headers
