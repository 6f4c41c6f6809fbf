"""Your own failure classification: statuses, predicates, methods, backoff.

The retry and the breaker each take a set of statuses and an optional
predicate over an attempt's outcome (a response or an exception) that answers
True, False, or None to leave it to the set. A cancellation is never shown to
a predicate, nor is an error the client caused itself or a refusal in this
process.
"""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

from http_resilience import (
    BreakerEvent,
    BrokenCircuitError,
    HttpEvent,
    HttpResilienceOptions,
    ResiliencePipeline,
    ResilientTransport,
    RetryOptions,
)
from http_resilience._core.classify import Outcome
from http_resilience._core.config_values import read_methods, read_status_codes
from http_resilience.testing import EventRecorder, FakeClock
from tests.http_resilience._support.scripted import (
    URL,
    Reply,
    async_transport,
    no_jitter,
    script,
    sync_transport,
)

pytestmark = pytest.mark.anyio


def get(transport: httpx.BaseTransport, method: str = "GET") -> httpx.Response:
    return transport.handle_request(httpx.Request(method, URL))


# --- the sets ----------------------------------------------------------------------


def test_statuses_read_from_ints_ranges_and_strings() -> None:
    assert read_status_codes("429, 500-502") == {429, 500, 501, 502}
    assert read_status_codes([408, range(503, 505), "418"]) == {408, 418, 503, 504}
    assert read_status_codes(503) == {503}
    assert read_status_codes([]) == frozenset()
    with pytest.raises(ValueError, match="600 is not an HTTP status"):
        read_status_codes("599-600")
    with pytest.raises(ValueError, match="runs backwards"):
        read_status_codes("504-500")


def test_methods_read_in_upper_case() -> None:
    assert read_methods("get, Put") == {"GET", "PUT"}
    with pytest.raises(ValueError, match="is not an HTTP method"):
        read_methods(["GE T"])


def test_the_defaults_are_todays_rule() -> None:
    options = HttpResilienceOptions()
    assert options.retry_on_status == options.breaker_on_status
    assert {408, 429, 500, 502, 503, 504, 599} <= options.retry_on_status
    assert not {200, 404, 501, 505} & options.retry_on_status
    assert options.retry_methods == {"GET", "HEAD", "OPTIONS", "TRACE", "PUT", "DELETE"}


def test_configuration_and_environment_bind_the_plain_data() -> None:
    options = HttpResilienceOptions.from_config(
        {"resilience": {"http": {"retry_on_status": [429, "500-503"]}}},
        client="pay",
        environ={
            "RESILIENCE__HTTP__CLIENTS__PAY__BREAKER_ON_STATUS": "500-599",
            "RESILIENCE__HTTP__RETRY_METHODS": "GET, POST",
            "RESILIENCE__HTTP__BACKOFF": "linear",
            "RESILIENCE__HTTP__MAX_DELAY": "10s",
        },
    )
    assert options.retry_on_status == {429, 500, 501, 502, 503}
    assert options.breaker_on_status == set(range(500, 600))
    assert options.retry_methods == {"GET", "POST"}
    assert (options.backoff, options.max_delay.total_seconds()) == ("linear", 10.0)


# --- the retry -----------------------------------------------------------------------


def test_only_the_statuses_you_name_are_retried() -> None:
    clock = FakeClock()
    server = script(500, 200)
    assert (
        get(sync_transport(server, clock, retry_on_status="502-504")).status_code == 500
    )
    assert server.hits == 1
    teapot = script(418, 200)
    assert get(sync_transport(teapot, clock, retry_on_status=[418])).status_code == 200
    assert teapot.hits == 2


def test_a_predicate_decides_first_and_none_leaves_it_to_the_set() -> None:
    seen: list[Outcome] = []

    def should_retry(outcome: Outcome) -> bool | None:
        seen.append(outcome)
        if isinstance(outcome, httpx.Response):
            if outcome.status_code == 200 and outcome.headers.get("x-stale"):
                return True  # a 200 with a stale copy: try again
            if outcome.status_code == 503:
                return False  # this one's 503s are final
        return None

    clock = FakeClock()
    server = script(Reply(200, {"x-stale": "1"}), 200)  # the first is stale
    transport = sync_transport(server, clock, should_retry=should_retry)
    assert get(transport).status_code == 200
    assert server.hits == 2
    unavailable = script(503, 200)
    transport = sync_transport(unavailable, clock, should_retry=should_retry)
    assert get(transport).status_code == 503
    assert unavailable.hits == 1
    bad_gateway = script(502, 200)  # None: the set retries it
    transport = sync_transport(bad_gateway, clock, should_retry=should_retry)
    assert get(transport).status_code == 200
    assert all(isinstance(outcome, httpx.Response) for outcome in seen)


class Flaky(Exception):
    """An exception of the user's own inner transport."""


def test_a_predicate_may_retry_your_own_exception_and_refuse_a_transport_error() -> (
    None
):
    def should_retry(outcome: Outcome) -> bool | None:
        if isinstance(outcome, Flaky):
            return True
        if isinstance(outcome, httpx.ConnectError):
            return False
        return None

    clock = FakeClock()
    server = script(Flaky("try again"), 200)
    assert (
        get(sync_transport(server, clock, should_retry=should_retry)).status_code == 200
    )
    assert server.hits == 2
    refused = script(httpx.ConnectError("refused"), 200)
    with pytest.raises(httpx.ConnectError):
        get(sync_transport(refused, clock, should_retry=should_retry))
    assert refused.hits == 1
    # Without a predicate an exception of your own ends the call, as today.
    plain = script(Flaky("no"), 200)
    with pytest.raises(Flaky):
        get(sync_transport(plain, clock))


def test_self_caused_errors_are_never_retried_whatever_the_predicate_says() -> None:
    clock = FakeClock()
    server = script(httpx.UnsupportedProtocol("ftp"), 200)
    asked: list[Outcome] = []

    def always(outcome: Outcome) -> bool:
        asked.append(outcome)
        return True

    with pytest.raises(httpx.UnsupportedProtocol):
        get(sync_transport(server, clock, should_retry=always))
    assert (server.hits, asked) == (1, [])


@pytest.mark.asyncio_only("the test itself uses asyncio.CancelledError, asyncio.Event")
async def test_a_cancellation_is_never_classified() -> None:
    asked: list[Outcome] = []

    def always(outcome: Outcome) -> bool:
        asked.append(outcome)
        return True

    started = asyncio.Event()

    async def hang(request: httpx.Request) -> httpx.Response:
        started.set()
        await asyncio.Event().wait()
        raise AssertionError("never answered")  # pragma: no cover

    transport = async_transport(
        hang, FakeClock(), should_retry=always, should_break=always
    )
    call = asyncio.ensure_future(
        transport.handle_async_request(httpx.Request("GET", URL))
    )
    await started.wait()
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call
    assert asked == []


def test_methods_you_name_are_retried_without_a_key() -> None:
    clock = FakeClock()
    server = script(503, 201)
    transport = sync_transport(server, clock, retry_methods=["GET", "POST"])
    assert get(transport, "POST").status_code == 201
    put = script(503, 200)
    transport = sync_transport(put, clock, retry_methods=["GET", "POST"])
    assert get(transport, "PUT").status_code == 503  # no longer in the list
    assert put.hits == 1


@pytest.mark.parametrize(
    ("backoff", "expected"),
    [
        ("exponential", [1.0, 2.0, 4.0]),
        ("linear", [1.0, 2.0, 3.0]),
        ("constant", [1.0, 1.0, 1.0]),
    ],
)
def test_the_backoff_shape(backoff: str, expected: list[float]) -> None:
    # base 2 s, jitter at its lowest (x0.5): the curve halved.
    clock = FakeClock()
    transport = sync_transport(script(503), clock, backoff=backoff)
    get(transport)
    assert clock.sleeps == expected


def test_max_delay_caps_the_backoff_but_not_a_retry_after() -> None:
    clock = FakeClock()
    transport = sync_transport(
        script(503),
        clock,
        base_delay=4,
        max_delay=6,
        total_request_timeout=60,
        sampling_duration=60,
    )
    get(transport)
    assert clock.sleeps == [2.0, 3.0, 3.0]  # 4, 8 -> 6, 16 -> 6, halved
    asked = Reply(503, {"Retry-After": "20"})
    clock = FakeClock()
    transport = sync_transport(
        script(asked, 200),
        clock,
        max_delay=6,
        total_request_timeout=60,
        sampling_duration=60,
    )
    assert get(transport).status_code == 200
    assert clock.sleeps == [20.0]


def test_base_delay_above_max_delay_names_both() -> None:
    with pytest.raises(
        ValueError, match=r"base_delay \(40 s\) must not exceed max_delay \(30 s\)"
    ):
        HttpResilienceOptions(base_delay=40)
    with pytest.raises(ValueError, match="must not exceed max_delay"):
        RetryOptions(base_delay=3, max_delay=2)


# --- the breaker ---------------------------------------------------------------------


def breaker_transport(
    server: Any, events: EventRecorder[HttpEvent], **values: Any
) -> ResilientTransport:
    pipeline = ResiliencePipeline().add_breaker(
        minimum_throughput=2, failure_ratio=0.5, break_duration=60, **values
    )
    return ResilientTransport(
        httpx.MockTransport(server),
        pipeline=pipeline,
        clock=FakeClock(),
        listeners=[events],
        random=no_jitter,
    )


def test_the_breaker_counts_only_the_statuses_you_name() -> None:
    events = EventRecorder[HttpEvent]()
    transport = breaker_transport(script(500), events, breaker_on_status=[503])
    for _ in range(5):
        assert get(transport).status_code == 500
    assert events.of(BreakerEvent) == []
    events = EventRecorder[HttpEvent]()
    transport = breaker_transport(script(404), events, breaker_on_status="404")
    get(transport)
    get(transport)
    with pytest.raises(BrokenCircuitError):
        get(transport)


def test_should_break_decides_first() -> None:
    events = EventRecorder[HttpEvent]()

    def slow_answers_count(outcome: Outcome) -> bool | None:
        if isinstance(outcome, httpx.Response) and "x-degraded" in outcome.headers:
            return True
        return None

    reply = Reply(200, {"x-degraded": "1"})
    transport = breaker_transport(
        script(reply), events, should_break=slow_answers_count
    )
    get(transport)
    get(transport)
    with pytest.raises(BrokenCircuitError):
        get(transport)
    transitions = [(e.previous, e.current) for e in events.of(BreakerEvent)]
    assert transitions == [("closed", "open")]


async def test_the_async_breaker_takes_the_same_options() -> None:
    events = EventRecorder[HttpEvent]()
    server = script(500)
    transport = async_transport(
        server,
        FakeClock(),
        events=events,
        max_retry_attempts=0,
        minimum_throughput=2,
        failure_ratio=0.5,
        breaker_on_status=[503],
    )
    for _ in range(4):
        response = await transport.handle_async_request(httpx.Request("GET", URL))
        assert response.status_code == 500
    assert events.of(BreakerEvent) == []
