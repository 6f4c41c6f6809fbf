"""`ResiliencePipeline`: strategies in the order added, first outermost."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest
from anyio.lowlevel import checkpoint
from pydantic import ValidationError

from http_resilience import (
    AsyncResilientTransport,
    AttemptTimeoutError,
    BreakerOptions,
    BrokenCircuitError,
    ConcurrencyLimiterOptions,
    HttpEvent,
    HttpResilienceOptions,
    RateLimitedError,
    ResilienceLayerError,
    ResiliencePipeline,
    ResilientTransport,
    RetryOptions,
    TimeoutEvent,
    TotalTimeoutError,
    create_async_client,
    create_client,
)
from http_resilience._core.builder import placements
from http_resilience._pipelines.standard import standard_steps
from http_resilience._strategies.breaker.strategy import SyncBreaker
from http_resilience._strategies.retry.drive_sync import SyncRetry
from http_resilience._strategies.timeout.options import TimeoutOptions
from http_resilience._strategies.timeout.strategy import AsyncTimeout
from http_resilience.testing import EventRecorder, FakeClock
from tests.http_resilience._support.scripted import URL, script

pytestmark = pytest.mark.anyio


class Taking:
    """A handler whose attempts take the given fake seconds (the last repeats)."""

    def __init__(self, clock: FakeClock, *seconds: float) -> None:
        self.clock = clock
        self.seconds = seconds
        self.arrived: list[float] = []

    async def __call__(self, request: httpx.Request) -> httpx.Response:
        self.arrived.append(self.clock.monotonic())
        index = min(len(self.arrived), len(self.seconds)) - 1
        await self.clock.sleep(self.seconds[index])
        return httpx.Response(200)


def transport(
    handler: Any,
    pipeline: ResiliencePipeline,
    clock: FakeClock,
    events: EventRecorder[HttpEvent] | None = None,
) -> AsyncResilientTransport:
    return AsyncResilientTransport(
        httpx.MockTransport(handler),
        pipeline=pipeline,
        name="orders",
        clock=clock,
        listeners=[events] if events is not None else [],
        random=lambda: 0.0,
    )


async def get(transport: httpx.AsyncBaseTransport) -> httpx.Response:
    return await transport.handle_async_request(httpx.Request("GET", URL))


# --- order --------------------------------------------------------------------------

OUTER_THEN_INNER = (
    ResiliencePipeline()
    .add_timeout(1)
    .add_retry(max_retry_attempts=5, base_delay=0)
    .add_timeout("300ms")
)


async def test_the_outer_timeout_caps_the_sequence_and_the_inner_each_attempt() -> None:
    clock, events = FakeClock(), EventRecorder[HttpEvent]()
    handler = Taking(clock, 0.4)  # every attempt outlasts the inner 300 ms
    with pytest.raises(
        TotalTimeoutError, match=r"timed out after 1\.2 s \(total timeout 1 s\)"
    ):
        await get(transport(handler, OUTER_THEN_INNER, clock, events))
    # Attempts 1 and 2 time out at 300 ms and are retried; attempt 3 runs into
    # the outer second at 1.0 s: 3 attempts of the 6 the retry allows.
    assert handler.arrived == [0.0, 0.4, 0.8]
    assert [(e.kind, e.after) for e in events.of(TimeoutEvent)] == [
        ("attempt", 0.3),
        ("attempt", 0.3),
        ("total", 1.0),
    ]


async def test_the_inner_timeout_lets_a_quick_attempt_through() -> None:
    clock = FakeClock()
    handler = Taking(clock, 0.4, 0.1)
    response = await get(transport(handler, OUTER_THEN_INNER, clock))
    assert response.status_code == 200
    assert handler.arrived == [0.0, 0.4]
    assert clock.monotonic() == pytest.approx(0.5)


async def test_the_other_order_gives_the_whole_call_300_ms() -> None:
    clock, events = FakeClock(), EventRecorder[HttpEvent]()
    pipeline = (
        ResiliencePipeline()
        .add_timeout("300ms")
        .add_retry(max_retry_attempts=5, base_delay=0)
        .add_timeout(1)
    )
    handler = Taking(clock, 0.4)
    with pytest.raises(
        TotalTimeoutError, match=r"timed out after 0\.4 s \(total timeout 0\.3 s\)"
    ):
        await get(transport(handler, pipeline, clock, events))
    assert handler.arrived == [0.0]
    assert [e.kind for e in events.of(TimeoutEvent)] == ["total"]


async def test_a_timeout_with_nothing_repeating_inside_is_an_attempt_timeout() -> None:
    clock = FakeClock()
    pipeline = ResiliencePipeline().add_timeout(1)
    with pytest.raises(
        AttemptTimeoutError,
        match=r"attempt 1 timed out after 2 s \(attempt timeout 1 s\)",
    ):
        await get(transport(Taking(clock, 2), pipeline, clock))


async def test_the_innermost_timeout_sets_the_attempts_httpx_timeouts() -> None:
    clock, server = FakeClock(), script(200)
    pipeline = ResiliencePipeline().add_timeout(5).add_retry().add_timeout(2)
    await get(transport(server, pipeline, clock))
    assert server.extensions[0]["timeout"] == dict.fromkeys(
        ("connect", "read", "write"), 2.0
    ) | {"pool": 1.9}


async def test_without_a_timeout_the_clients_httpx_timeouts_apply() -> None:
    clock, server = FakeClock(), script(503, 200)
    pipeline = ResiliencePipeline().add_retry(base_delay="100ms")
    response = await get(transport(server, pipeline, clock))
    assert response.status_code == 200
    assert clock.sleeps == [0.05]
    assert "timeout" not in server.extensions[0]


async def test_an_empty_pipeline_sends_once() -> None:
    clock, server = FakeClock(), script(503)
    response = await get(transport(server, ResiliencePipeline(), clock))
    assert (response.status_code, server.hits) == (503, 1)


async def test_a_breaker_and_a_limiter_in_a_pipeline_of_your_own() -> None:
    clock, server = FakeClock(), script(503)
    pipeline = (
        ResiliencePipeline()
        .add_limiter(ConcurrencyLimiterOptions(concurrency_limit=1))
        .add_breaker(BreakerOptions(minimum_throughput=2, failure_ratio=0.5))
    )
    resilient = transport(server, pipeline, clock)
    assert (await get(resilient)).status_code == 503
    assert (await get(resilient)).status_code == 503
    with pytest.raises(BrokenCircuitError):
        await get(resilient)
    assert server.hits == 2


@pytest.mark.asyncio_only("the test itself uses asyncio.Event, asyncio.create_task")
async def test_the_limiter_of_a_pipeline_refuses_beyond_its_permits() -> None:
    clock = FakeClock()
    release = asyncio.Event()

    async def slow(request: httpx.Request) -> httpx.Response:
        await release.wait()
        return httpx.Response(200)

    resilient = transport(
        slow, ResiliencePipeline().add_limiter(concurrency_limit=1), clock
    )
    first = asyncio.create_task(get(resilient))
    await checkpoint()
    with pytest.raises(RateLimitedError):
        await get(resilient)
    release.set()
    assert (await first).status_code == 200


def test_the_sync_transport_runs_a_pipeline_of_its_own() -> None:
    clock, server = FakeClock(), script(503, 503, 200)
    pipeline = ResiliencePipeline().add_timeout(30).add_retry(RetryOptions())
    with create_client(
        "orders", pipeline=pipeline, transport=httpx.MockTransport(server), clock=clock
    ) as client:
        assert client.get(URL).status_code == 200
    assert server.hits == 3
    resilient = ResilientTransport(httpx.MockTransport(server), pipeline=pipeline)
    assert resilient.pipeline is pipeline
    assert resilient.options is None


async def test_create_async_client_takes_a_pipeline() -> None:
    clock, server = FakeClock(), script(503, 200)
    async with create_async_client(
        "orders",
        pipeline=ResiliencePipeline().add_retry(),
        transport=httpx.MockTransport(server),
        clock=clock,
    ) as client:
        assert (await client.get(URL)).status_code == 200
    assert server.hits == 2


def test_will_retry_follows_the_pipelines_retry() -> None:
    get_request = httpx.Request("GET", URL)
    post = httpx.Request("POST", URL)
    with_retry = ResilientTransport(pipeline=ResiliencePipeline().add_retry())
    assert with_retry.will_retry(get_request) is True
    assert with_retry.will_retry(post) is False
    unsafe = ResiliencePipeline().add_retry(retry_unsafe_methods=True)
    assert ResilientTransport(pipeline=unsafe).will_retry(post) is True
    bare = ResilientTransport(pipeline=ResiliencePipeline().add_timeout(1))
    assert bare.will_retry(get_request) is False


# --- refusals -----------------------------------------------------------------------


def test_options_and_a_pipeline_together_are_refused() -> None:
    pipeline = ResiliencePipeline().add_retry()
    with pytest.raises(TypeError, match=r"options= .* or pipeline= .*, not both"):
        AsyncResilientTransport(options=HttpResilienceOptions(), pipeline=pipeline)
    with pytest.raises(TypeError, match="not both"):
        create_async_client("orders", HttpResilienceOptions(), pipeline=pipeline)
    with pytest.raises(TypeError, match="not both"):
        create_client("orders", HttpResilienceOptions(), pipeline=pipeline)
    with pytest.raises(TypeError, match="config= configures the standard pipeline"):
        ResilientTransport(config={}, pipeline=pipeline)
    with pytest.raises(TypeError, match="pipeline must be a ResiliencePipeline"):
        ResilientTransport(pipeline=[pipeline])  # type: ignore[arg-type]


def test_a_second_layer_stays_refused_with_a_pipeline() -> None:
    pipeline = ResiliencePipeline().add_retry()
    inner = AsyncResilientTransport(name="inner", pipeline=pipeline)
    with pytest.raises(ResilienceLayerError, match="one resilience layer per client"):
        AsyncResilientTransport(inner, pipeline=pipeline, name="outer")
    with pytest.raises(ResilienceLayerError):
        create_async_client("outer", pipeline=pipeline, transport=inner)


# --- the builder itself -------------------------------------------------------------


def test_each_add_returns_a_new_pipeline() -> None:
    base = ResiliencePipeline().add_timeout(1)
    longer = base.add_retry()
    assert repr(base) == "ResiliencePipeline(timeout 1 s)"
    assert repr(longer) == "ResiliencePipeline(timeout 1 s, retry)"
    assert longer == ResiliencePipeline().add_timeout("1s").add_retry(RetryOptions())
    assert hash(longer) == hash(ResiliencePipeline().add_timeout(1).add_retry())
    assert longer != base
    assert [type(step).__name__ for step in longer.steps] == [
        "TimeoutOptions",
        "RetryOptions",
    ]
    assert (ResiliencePipeline() == "pipeline") is False


def test_options_are_validated_when_added_naming_the_field() -> None:
    with pytest.raises(ValidationError, match="timeout"):
        ResiliencePipeline().add_timeout(0)
    with pytest.raises(ValidationError, match="is not a duration"):
        ResiliencePipeline().add_timeout("soon")
    with pytest.raises(ValidationError, match="max_retry_attempts"):
        ResiliencePipeline().add_retry(max_retry_attempts=-1)
    with pytest.raises(ValidationError, match="failure_ratio"):
        ResiliencePipeline().add_breaker(failure_ratio=2)
    with pytest.raises(ValidationError, match="queue_limit"):
        ResiliencePipeline().add_limiter(queue_limit=-1)
    with pytest.raises(ValidationError, match="retries"):
        ResiliencePipeline().add_retry(retries=2)


def test_an_options_object_and_fields_together_are_refused() -> None:
    with pytest.raises(TypeError, match="add_retry: give a RetryOptions or its"):
        ResiliencePipeline().add_retry(RetryOptions(), base_delay=1)
    with pytest.raises(TypeError, match="options must be ConcurrencyLimiterOptions"):
        ResiliencePipeline().add_limiter(RetryOptions())  # type: ignore[arg-type]


def test_the_strategy_options_defaults_match_the_standard_pipeline() -> None:
    retry, breaker, limiter = (
        RetryOptions(),
        BreakerOptions(),
        ConcurrencyLimiterOptions(),
    )
    assert (retry.max_retry_attempts, retry.base_delay.total_seconds()) == (3, 2.0)
    assert retry.retry_unsafe_methods is False
    assert (breaker.failure_ratio, breaker.minimum_throughput) == (0.1, 100)
    assert breaker.sampling_duration.total_seconds() == 30.0
    assert breaker.break_duration.total_seconds() == 5.0
    assert (breaker.breaker_per_host, breaker.maximum_hosts) == (True, 1024)
    assert (limiter.concurrency_limit, limiter.queue_limit) == (1000, 0)


# --- the builder's rules ------------------------------------------------------------


def places(pipeline: ResiliencePipeline) -> list[tuple[bool, bool, bool]]:
    return [(p.repeated, p.cut, p.owns_time) for p in placements(pipeline.steps)]


def test_a_timeout_with_an_inner_timeout_and_no_wait_between_does_not_cut() -> None:
    # timeout, retry, breaker, timeout: only the inner one cuts, and owns time.
    assert places(
        ResiliencePipeline().add_timeout(1).add_retry().add_breaker().add_timeout(0.3)
    ) == [
        (True, False, False),
        (False, False, False),
        (False, False, False),
        (False, True, True),
    ]


def test_a_queue_or_hedging_between_two_timeouts_makes_both_cut() -> None:
    queued = ResiliencePipeline().add_timeout(1).add_limiter(queue_limit=1)
    assert places(queued.add_timeout(0.3))[0] == (False, True, False)
    no_queue = ResiliencePipeline().add_timeout(1).add_limiter(queue_limit=0)
    assert places(no_queue.add_timeout(0.3))[0] == (False, False, False)
    hedged = ResiliencePipeline().add_timeout(1).add_hedging().add_timeout(0.3)
    assert places(hedged)[0] == (True, True, False)


def test_the_standard_pipeline_is_the_builders_preset() -> None:
    options = HttpResilienceOptions(own_transport_timeout=False, queue_limit=3)
    steps = standard_steps(options)
    assert [step.label for step in steps] == [
        "limiter",
        "timeout 30 s",
        "retry budget",
        "retry",
        "quota",
        "breaker",
        "timeout 10 s",
    ]
    assert [(p.repeated, p.cut, p.owns_time) for p in placements(steps)] == [
        (True, False, False),
        (True, False, False),
        (True, False, False),
        (False, False, False),
        (False, False, False),
        (False, False, False),
        (False, True, True),
    ]
    attempt = steps[-1]
    assert isinstance(attempt, TimeoutOptions)
    assert attempt.own_transport_timeout is False
    bare = standard_steps(
        HttpResilienceOptions(retry_budget_ratio=None, quota_reserve=None)
    )
    assert [step.label for step in bare] == [
        "limiter",
        "timeout 30 s",
        "retry",
        "breaker",
        "timeout 10 s",
    ]


async def test_every_cutting_timeout_of_a_transport_shares_one_timer() -> None:
    # A queue between them: both timeouts cut, on the transport's one timer.
    pipeline = (
        ResiliencePipeline().add_timeout(1).add_limiter(queue_limit=1).add_timeout(0.3)
    )
    subject = transport(script(200), pipeline, FakeClock())
    built = subject._built  # pyright: ignore[reportPrivateUsage]
    timeouts = [s for s in built.strategies if isinstance(s, AsyncTimeout)]
    assert len(timeouts) == 2
    timers = {id(t._timer) for t in timeouts}  # pyright: ignore[reportPrivateUsage]
    assert len(timers) == 1
    assert (await get(subject)).status_code == 200


def test_the_built_pipeline_finds_its_strategies_by_type() -> None:
    subject = ResilientTransport(
        httpx.MockTransport(lambda request: httpx.Response(200)),
        pipeline=ResiliencePipeline().add_breaker().add_timeout(1),
    )
    built = subject._built  # pyright: ignore[reportPrivateUsage]
    breaker = built.find(SyncBreaker)
    assert breaker is not None
    assert breaker.strategy.registry is not None
    assert built.find(SyncRetry) is None


def test_will_retry_asks_every_repeating_step_and_only_them() -> None:
    get_request = httpx.Request("GET", URL)
    post = httpx.Request("POST", URL)
    pipeline = (
        ResiliencePipeline()
        .add_limiter()
        .add_timeout(1)
        .add_retry(max_retry_attempts=0)  # retries nothing: hedging still may
        .add_hedging()
        .add_breaker()
    )
    subject = AsyncResilientTransport(pipeline=pipeline)
    assert subject.will_retry(get_request) is True
    assert subject.will_retry(post) is False
    quiet = [step for step in pipeline.steps if not step.repeats]
    assert [step.label for step in quiet] == ["limiter", "timeout 1 s", "breaker"]
    assert not any(step.will_repeat(get_request) for step in quiet)
