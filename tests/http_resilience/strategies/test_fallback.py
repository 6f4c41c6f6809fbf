"""The fallback: a function answers only when the call has given up, marked degraded.

Called only on a failure that may degrade, after the retries; never on a
success, a bug or a status no attempt changes; None lets the failure
through; one that raises keeps both failures; its answer is marked and the
`RequestEvent` and the metrics say so; checked when added; sync and async.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Iterator

import httpx
import pytest

from http_resilience import (
    AsyncResilientTransport,
    BrokenCircuitError,
    Degradation,
    HttpClientFactory,
    HttpEvent,
    HttpEventListener,
    RequestEvent,
    ResiliencePipeline,
    ResilientTransport,
    TotalTimeoutError,
    create_client,
    degradation,
    suppressed_failure,
)
from http_resilience._strategies.fallback.strategy import Failure
from http_resilience.otel import HttpMetrics, HttpTracing
from http_resilience.testing import EventRecorder, FakeClock
from tests.http_resilience._support.scripted import Reply, Script, script
from tests.support.otel import Recorded, recorded

pytestmark = pytest.mark.anyio

URL = "http://inventory.example/items/1"
RETRY = {"max_retry_attempts": 2, "base_delay": 0.1}


class Offline:
    """A fallback that records what it was handed and answers an offline list."""

    def __init__(self, answer: bool = True) -> None:
        self.answer = answer
        self.calls: list[tuple[str, Failure]] = []

    def __call__(
        self, request: httpx.Request, failure: Failure
    ) -> httpx.Response | None:
        self.calls.append((request.url.path, failure))
        if not self.answer:
            return None
        return httpx.Response(200, json={"items": [], "offline": True})


def async_transport(
    server: Script,
    pipeline: ResiliencePipeline,
    events: EventRecorder[HttpEvent] | None = None,
    metrics: HttpMetrics | None = None,
) -> AsyncResilientTransport:
    listeners: list[HttpEventListener] = []
    if events is not None:
        listeners.append(events)
    if metrics is not None:
        listeners.append(metrics)
    return AsyncResilientTransport(
        httpx.MockTransport(server),
        pipeline=pipeline,
        name="inventory",
        clock=FakeClock(),
        listeners=listeners,
        random=lambda: 0.0,
    )


def sync_transport(
    server: Script,
    pipeline: ResiliencePipeline,
    events: EventRecorder[HttpEvent] | None = None,
) -> ResilientTransport:
    return ResilientTransport(
        httpx.MockTransport(server),
        pipeline=pipeline,
        name="inventory",
        clock=FakeClock(),
        listeners=[events] if events is not None else [],
        random=lambda: 0.0,
    )


@pytest.fixture
def otel() -> Iterator[Recorded]:
    with recorded() as found:
        yield found


# --- when it is called ----------------------------------------------------------------


async def test_it_is_not_called_while_the_host_answers() -> None:
    fallback = Offline()
    server = script(200, 404, 501)
    pipeline = ResiliencePipeline().add_fallback(fallback).add_retry(**RETRY)
    async with httpx.AsyncClient(transport=async_transport(server, pipeline)) as client:
        statuses = [(await client.get(URL)).status_code for _ in range(3)]
    assert statuses == [200, 404, 501]
    assert fallback.calls == []


async def test_it_answers_once_after_the_retries_marked_degraded() -> None:
    fallback = Offline()
    events: EventRecorder[HttpEvent] = EventRecorder()
    server = script(503)
    pipeline = ResiliencePipeline().add_retry(**RETRY).add_fallback(fallback)
    transport = async_transport(server, pipeline, events)
    async with httpx.AsyncClient(transport=transport) as client:
        answer = await client.get(URL)
    assert server.hits == 3  # the retries came first, though added before it
    assert len(fallback.calls) == 1
    path, failure = fallback.calls[0]
    assert path == "/items/1"
    assert isinstance(failure, httpx.Response)
    assert failure.status_code == 503
    assert answer.json() == {"items": [], "offline": True}
    assert degradation(answer) == Degradation("fallback", "503", None)
    assert [stream.closed for stream in server.streams] == [True, True, True]
    (end,) = events.of(RequestEvent)
    assert (end.outcome, end.degraded, end.rejected) == ("200", "fallback", False)


async def test_it_is_handed_the_exception_the_call_would_raise() -> None:
    fallback = Offline()
    server = script(httpx.ConnectError("refused"))
    pipeline = ResiliencePipeline().add_fallback(fallback).add_retry(**RETRY)
    async with httpx.AsyncClient(transport=async_transport(server, pipeline)) as client:
        answer = await client.get(URL)
    ((_, failure),) = fallback.calls
    assert isinstance(failure, httpx.ConnectError)
    assert degradation(answer) == Degradation("fallback", "ConnectError", None)


async def test_an_open_breaker_is_handed_to_it() -> None:
    fallback = Offline()
    server = script(503)
    pipeline = (
        ResiliencePipeline()
        .add_fallback(fallback)
        .add_breaker(failure_ratio=0.5, minimum_throughput=2, break_duration=30)
    )
    async with httpx.AsyncClient(transport=async_transport(server, pipeline)) as client:
        for _ in range(3):
            await client.get(URL)
    assert isinstance(fallback.calls[-1][1], BrokenCircuitError)
    assert server.hits == 2


async def test_a_deadline_that_ran_out_is_handed_to_it() -> None:
    clock = FakeClock()
    fallback = Offline()

    async def slow(request: httpx.Request) -> httpx.Response:
        await clock.sleep(2)
        return httpx.Response(200)

    pipeline = (
        ResiliencePipeline()
        .add_fallback(fallback)
        .add_timeout("1s")
        .add_retry(max_retry_attempts=3, base_delay=0)
    )
    transport = AsyncResilientTransport(
        httpx.MockTransport(slow), pipeline=pipeline, clock=clock
    )
    async with httpx.AsyncClient(transport=transport) as client:
        answer = await client.get(URL)
    assert degradation(answer) == Degradation("fallback", "TotalTimeoutError", None)
    assert isinstance(fallback.calls[0][1], TotalTimeoutError)


async def test_none_lets_the_failure_through() -> None:
    fallback = Offline(answer=False)
    failing = script(503)
    refused = script(httpx.ConnectError("refused"))
    pipeline = ResiliencePipeline().add_fallback(fallback)
    async with httpx.AsyncClient(
        transport=async_transport(failing, pipeline)
    ) as client:
        answer = await client.get(URL)
    assert answer.status_code == 503
    assert degradation(answer) is None
    assert answer.json() == {"attempt": 1}  # the host's own answer
    async with httpx.AsyncClient(
        transport=async_transport(refused, pipeline)
    ) as client:
        with pytest.raises(httpx.ConnectError):
            await client.get(URL)
    assert len(fallback.calls) == 2


@pytest.mark.parametrize(
    "outcome",
    [ValueError("a bug"), httpx.UnsupportedProtocol("ftp")],
    ids=["bug", "self-caused"],
)
async def test_a_mistake_is_never_hidden(outcome: Exception) -> None:
    fallback = Offline()
    pipeline = ResiliencePipeline().add_fallback(fallback)
    transport = async_transport(script(outcome), pipeline)
    async with httpx.AsyncClient(transport=transport) as client:
        with pytest.raises(type(outcome)):
            await client.get(URL)
    assert fallback.calls == []


# --- a fallback that fails ------------------------------------------------------------


async def test_a_fallback_that_raises_keeps_both_failures() -> None:
    def broken(request: httpx.Request, failure: Failure) -> httpx.Response:
        raise KeyError("no offline copy")

    pipeline = ResiliencePipeline().add_fallback(broken)
    transport = async_transport(script(httpx.ConnectError("refused")), pipeline)
    async with httpx.AsyncClient(transport=transport) as client:
        with pytest.raises(httpx.ConnectError) as raised:
            await client.get(URL)
    kept = suppressed_failure(raised.value)
    assert isinstance(kept, KeyError)
    assert any(
        "the fallback raised KeyError" in note for note in raised.value.__notes__
    )


async def test_a_fallback_that_raises_on_a_response_leaves_it_and_logs(
    caplog: pytest.LogCaptureFixture,
) -> None:
    def broken(request: httpx.Request, failure: Failure) -> httpx.Response:
        raise KeyError("secret detail")

    pipeline = ResiliencePipeline().add_fallback(broken)
    transport = async_transport(script(Reply(503)), pipeline)
    with caplog.at_level(logging.ERROR, logger="http_resilience"):
        async with httpx.AsyncClient(transport=transport) as client:
            answer = await client.get(URL)
    assert answer.status_code == 503
    assert degradation(answer) is None
    (record,) = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert "the fallback raised KeyError in place of status 503" in record.getMessage()
    assert "secret detail" not in record.getMessage()


async def test_a_fallback_that_returns_no_response_is_a_failing_fallback() -> None:
    def wrong(request: httpx.Request, failure: Failure) -> httpx.Response:
        return "offline"  # type: ignore[return-value]

    pipeline = ResiliencePipeline().add_fallback(wrong)
    transport = async_transport(script(httpx.ConnectError("refused")), pipeline)
    async with httpx.AsyncClient(transport=transport) as client:
        with pytest.raises(httpx.ConnectError) as raised:
            await client.get(URL)
    kept = suppressed_failure(raised.value)
    assert isinstance(kept, TypeError)
    assert "returned str; it must return an httpx.Response or None" in str(kept)


# --- async functions ------------------------------------------------------------------


async def test_an_async_fallback_is_awaited() -> None:
    async def offline(request: httpx.Request, failure: Failure) -> httpx.Response:
        return httpx.Response(200, text="offline")

    pipeline = ResiliencePipeline().add_fallback(offline)
    assert pipeline.async_only
    transport = async_transport(script(503), pipeline)
    async with httpx.AsyncClient(transport=transport) as client:
        answer = await client.get(URL)
    assert answer.text == "offline"
    assert degradation(answer) == Degradation("fallback", "503", None)


def test_an_async_fallback_is_refused_by_a_sync_client() -> None:
    async def offline(request: httpx.Request, failure: Failure) -> None:
        return None

    pipeline = ResiliencePipeline().add_fallback(offline)
    with pytest.raises(TypeError, match="the pipeline's fallback is async; a sync"):
        ResilientTransport(httpx.MockTransport(script(200)), pipeline=pipeline)
    with pytest.raises(TypeError, match="fallback is async"):
        create_client(name="inventory", pipeline=pipeline)
    factory = HttpClientFactory()
    factory.add(
        "inventory", pipeline=pipeline, transport=httpx.MockTransport(script(200))
    )
    with pytest.raises(TypeError, match="its pipeline's fallback is async"):
        factory.client("inventory")


def test_an_object_with_an_async_call_is_seen_as_async() -> None:
    class Offline:
        async def __call__(self, request: httpx.Request, failure: Failure) -> None:
            return None

    assert ResiliencePipeline().add_fallback(Offline()).async_only


def test_a_partial_of_an_async_fallback_is_seen_as_async() -> None:
    async def offline(request: httpx.Request, failure: Failure, *, source: str) -> None:
        return None

    wrapped = functools.partial(offline, source="cache")
    assert ResiliencePipeline().add_fallback(wrapped).async_only


# --- checked when added ---------------------------------------------------------------


def test_a_fallback_that_cannot_be_called_so_is_refused_when_added() -> None:
    def one(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200)

    with pytest.raises(TypeError, match=r"called as fn\(request, failure\), but one"):
        ResiliencePipeline().add_fallback(one)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="must be a function of the request and the"):
        ResiliencePipeline().add_fallback("offline")  # type: ignore[arg-type]


def test_fallbacks_go_outermost_in_the_order_added() -> None:
    first, second = Offline(), Offline()
    pipeline = (
        ResiliencePipeline()
        .add_timeout(5)
        .add_fallback(first)
        .add_retry()
        .add_fallback(second)
    )
    assert (
        repr(pipeline) == "ResiliencePipeline(fallback, fallback, timeout 5 s, retry)"
    )
    assert pipeline.steps[0].function is first  # type: ignore[attr-defined]


# --- with the stale cache, and in telemetry ------------------------------------------


async def test_the_stale_cache_answers_first_the_fallback_when_it_has_nothing() -> None:
    fallback = Offline()
    server = script(200, 503)
    pipeline = ResiliencePipeline().add_fallback(fallback).add_stale_cache(max_stale=60)
    async with httpx.AsyncClient(transport=async_transport(server, pipeline)) as client:
        await client.get(URL)
        stale = await client.get(URL)
        other = await client.get("http://inventory.example/items/2")
    found = degradation(stale)
    assert found is not None
    assert found.source == "stale-cache"
    assert degradation(other) == Degradation("fallback", "503", None)
    assert [path for path, _ in fallback.calls] == ["/items/2"]


async def test_the_metrics_count_a_degraded_call_apart(otel: Recorded) -> None:
    server = script(200, 503)
    pipeline = (
        ResiliencePipeline().add_fallback(Offline()).add_stale_cache(max_stale=60)
    )
    metrics = HttpMetrics(meter_provider=otel.meter_provider)
    transport = async_transport(server, pipeline, metrics=metrics)
    async with httpx.AsyncClient(transport=transport) as client:
        await client.get(URL)
        await client.get(URL)
        await client.get("http://inventory.example/items/2")
    assert otel.total("http_resilience.requests") == 3
    assert (
        otel.total("http_resilience.requests", {"http_resilience.outcome": "2xx"}) == 3
    )
    assert otel.total("http_resilience.degraded") == 2
    assert (
        otel.total(
            "http_resilience.degraded", {"http_resilience.degraded.source": "fallback"}
        )
        == 1
    )
    assert (
        otel.total(
            "http_resilience.degraded",
            {"http_resilience.degraded.source": "stale-cache"},
        )
        == 1
    )


async def test_the_call_span_says_it_degraded(otel: Recorded) -> None:
    pipeline = ResiliencePipeline().add_fallback(Offline())
    transport = AsyncResilientTransport(
        httpx.MockTransport(script(200, 503)),
        pipeline=pipeline,
        clock=FakeClock(),
        listeners=[HttpTracing(tracer_provider=otel.tracer_provider)],
    )
    async with httpx.AsyncClient(transport=transport) as client:
        await client.get(URL)
        await client.get(URL)
    fresh, degraded = otel.spans()
    assert "http_resilience.degraded.source" not in (fresh.attributes or {})
    attributes = degraded.attributes or {}
    assert attributes["http_resilience.degraded.source"] == "fallback"
    assert attributes["http_resilience.outcome"] == "2xx"


async def test_a_degraded_answer_is_logged_by_source_and_reason(
    caplog: pytest.LogCaptureFixture,
) -> None:
    pipeline = ResiliencePipeline().add_fallback(Offline())
    with caplog.at_level(logging.WARNING, logger="http_resilience"):
        async with httpx.AsyncClient(
            transport=async_transport(script(503), pipeline)
        ) as client:
            await client.get(URL)
    (record,) = caplog.records
    assert record.getMessage().endswith("answered from the fallback in place of 503")
    assert record.__dict__["resilience_source"] == "fallback"
    assert record.__dict__["resilience_event"] == "degraded"


# --- sync -----------------------------------------------------------------------------


def test_sync_it_answers_only_after_the_retries() -> None:
    fallback = Offline()
    events: EventRecorder[HttpEvent] = EventRecorder()
    server = script(200, httpx.ConnectError("refused"))
    pipeline = ResiliencePipeline().add_fallback(fallback).add_retry(**RETRY)
    with httpx.Client(transport=sync_transport(server, pipeline, events)) as client:
        assert client.get(URL).json() == {"attempt": 1}
        answer = client.get(URL)
    assert server.hits == 4
    assert len(fallback.calls) == 1
    assert degradation(answer) == Degradation("fallback", "ConnectError", None)
    assert [end.degraded for end in events.of(RequestEvent)] == [None, "fallback"]


def test_sync_a_fallback_that_raises_keeps_both_failures() -> None:
    def broken(request: httpx.Request, failure: Failure) -> httpx.Response:
        raise KeyError("no offline copy")

    pipeline = ResiliencePipeline().add_fallback(broken)
    server = script(httpx.ReadTimeout("slow"))
    with (
        httpx.Client(transport=sync_transport(server, pipeline)) as client,
        pytest.raises(httpx.ReadTimeout) as raised,
    ):
        client.get(URL)
    assert isinstance(suppressed_failure(raised.value), KeyError)


def test_sync_a_failing_response_is_closed_when_replaced() -> None:
    server = script(503)
    pipeline = ResiliencePipeline().add_fallback(Offline())
    with httpx.Client(transport=sync_transport(server, pipeline)) as client:
        answer = client.get(URL)
    assert answer.json()["offline"] is True
    assert server.streams[0].closed


def test_sync_an_async_call_it_did_not_see_is_a_failing_fallback() -> None:
    class Sneaky:
        def __call__(self, request: httpx.Request, failure: Failure) -> object:
            async def later() -> None:
                return None

            return later()

    pipeline = ResiliencePipeline().add_fallback(Sneaky())  # type: ignore[arg-type]
    with (
        httpx.Client(
            transport=sync_transport(script(httpx.ConnectError("x")), pipeline)
        ) as client,
        pytest.raises(httpx.ConnectError) as raised,
    ):
        client.get(URL)
    kept = suppressed_failure(raised.value)
    assert isinstance(kept, TypeError)
    assert "a sync client needs a sync fallback" in str(kept)


def test_sync_it_is_not_called_for_a_bug_and_none_lets_a_response_through() -> None:
    fallback = Offline(answer=False)
    pipeline = ResiliencePipeline().add_fallback(fallback)
    with (
        httpx.Client(
            transport=sync_transport(script(ValueError("a bug")), pipeline)
        ) as client,
        pytest.raises(ValueError, match="a bug"),
    ):
        client.get(URL)
    assert fallback.calls == []
    with httpx.Client(transport=sync_transport(script(503), pipeline)) as client:
        assert client.get(URL).status_code == 503
    with (
        httpx.Client(
            transport=sync_transport(script(httpx.ConnectError("x")), pipeline)
        ) as client,
        pytest.raises(httpx.ConnectError),
    ):
        client.get(URL)
    assert len(fallback.calls) == 2
