"""The adaptive limiter in a pipeline: refusals, the queue, samples, options."""

from __future__ import annotations

import anyio
import httpx
import pydantic
import pytest

from http_resilience import (
    AdaptiveLimiterOptions,
    AsyncResilientTransport,
    HttpEvent,
    HttpResilienceOptions,
    RateLimitedError,
    RejectionEvent,
    ResiliencePipeline,
    ResilientTransport,
    RetryEvent,
)
from http_resilience._pipelines.standard import standard_steps
from http_resilience._strategies.adaptive.limit import AdaptiveLimit
from http_resilience._strategies.adaptive.strategy import (
    AsyncAdaptiveLimiter,
    SyncAdaptiveLimiter,
)
from http_resilience.testing import EventRecorder, FakeClock

pytestmark = pytest.mark.anyio

URL = "http://api.example/orders/1"
OTHER = "http://other.example/orders/1"
ONE = ResiliencePipeline().add_adaptive_limiter(
    min_limit=1, initial_limit=1, max_limit=1
)


def limit_of(
    transport: ResilientTransport | AsyncResilientTransport, host: str
) -> AdaptiveLimit:
    for strategy in transport.strategies:
        if isinstance(strategy, AsyncAdaptiveLimiter | SyncAdaptiveLimiter):
            return strategy.strategy.limit_of(host)
    raise AssertionError("no adaptive limiter")  # pragma: no cover


def test_beyond_the_limit_a_request_is_refused_at_once() -> None:
    events = EventRecorder[HttpEvent]()
    refusals: list[RateLimitedError] = []
    hits: list[str] = []

    def server(request: httpx.Request) -> httpx.Response:
        hits.append(request.url.host)
        if request.url.host == "api.example" and len(hits) == 1:
            for url in (URL, OTHER):  # the same host is full; another is not
                try:
                    transport.handle_request(httpx.Request("GET", url))
                except RateLimitedError as exc:
                    refusals.append(exc)
        return httpx.Response(200)

    transport = ResilientTransport(
        httpx.MockTransport(server),
        pipeline=ONE.add_retry(base_delay=0),
        listeners=[events],
    )
    assert transport.handle_request(httpx.Request("GET", URL)).status_code == 200
    assert [exc.reason for exc in refusals] == ["concurrency_limit"]
    assert "adaptive concurrency limit" in str(refusals[0])
    assert hits == ["api.example", "other.example"]
    rejections = events.of(RejectionEvent)
    assert [(e.reason, e.host) for e in rejections] == [
        ("concurrency_limit", "http://api.example:80")
    ]
    assert events.of(RetryEvent) == []  # a local refusal is never retried


async def test_beyond_the_limit_an_async_request_is_refused_at_once() -> None:
    events = EventRecorder[HttpEvent]()
    refusals: list[RateLimitedError] = []

    async def server(request: httpx.Request) -> httpx.Response:
        if not refusals:
            with pytest.raises(RateLimitedError) as refused:
                await transport.handle_async_request(httpx.Request("GET", URL))
            refusals.append(refused.value)
        return httpx.Response(200)

    transport = AsyncResilientTransport(
        httpx.MockTransport(server),
        pipeline=ResiliencePipeline()
        .add_retry(base_delay=0)
        .add_adaptive_limiter(min_limit=1, initial_limit=1, max_limit=1),
        listeners=[events],
    )
    response = await transport.handle_async_request(httpx.Request("GET", URL))
    assert response.status_code == 200
    assert refusals[0].reason == "concurrency_limit"
    assert [e.reason for e in events.of(RejectionEvent)] == ["concurrency_limit"]
    assert events.of(RetryEvent) == []


async def test_a_queued_request_gets_the_permit_given_back() -> None:
    release = anyio.Event()
    order: list[str] = []

    async def server(request: httpx.Request) -> httpx.Response:
        name = request.url.path
        order.append(f"in {name}")
        if name == "/first":
            await release.wait()
        return httpx.Response(200)

    transport = AsyncResilientTransport(
        httpx.MockTransport(server),
        pipeline=ResiliencePipeline().add_adaptive_limiter(
            min_limit=1, initial_limit=1, max_limit=1, queue_limit=1
        ),
    )

    async def get(path: str) -> None:
        await transport.handle_async_request(
            httpx.Request("GET", f"http://api.example{path}")
        )
        order.append(f"out {path}")

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(get, "/first")
        await anyio.wait_all_tasks_blocked()
        tasks.start_soon(get, "/queued")
        await anyio.wait_all_tasks_blocked()
        with pytest.raises(RateLimitedError):
            await get("/refused")
        during = limit_of(transport, "http://api.example:80")
        assert (during.in_use, during.queued) == (1, 1)
        release.set()
    assert order == ["in /first", "out /first", "in /queued", "out /queued"]
    after = limit_of(transport, "http://api.example:80")
    assert (after.in_use, after.queued) == (0, 0)


def test_only_first_attempt_successes_are_rtt_samples() -> None:
    clock = FakeClock()
    statuses = iter([200] * 12 + [503] * 24)

    def server(request: httpx.Request) -> httpx.Response:
        clock.advance(0.1)
        return httpx.Response(next(statuses))

    transport = ResilientTransport(
        httpx.MockTransport(server),
        pipeline=ResiliencePipeline().add_adaptive_limiter(),
        clock=clock,
        # Windows of exactly 1 s: a drawn one may be up to 1.25 s, and then
        # 12 calls of 0.1 s would not close it.
        random=lambda: 0.5,
    )
    for _ in range(12):
        transport.handle_request(httpx.Request("GET", URL))
    limit = limit_of(transport, "http://api.example:80")
    assert limit.baseline_rtt == pytest.approx(0.1)  # a window closed
    clock_before = limit.baseline_rtt
    for _ in range(24):  # a failing host, slowly: 503s teach nothing
        clock.advance(1.0)
        transport.handle_request(httpx.Request("GET", URL))
    assert limit.baseline_rtt == clock_before
    assert limit.limit == 20  # a host used one call at a time is not grown


def test_one_limit_shared_by_every_host_unless_per_host() -> None:
    shared = ResilientTransport(
        httpx.MockTransport(lambda request: httpx.Response(200)),
        pipeline=ResiliencePipeline().add_adaptive_limiter(per_host=False),
    )
    assert limit_of(shared, URL) is limit_of(shared, OTHER)
    own = ResilientTransport(
        httpx.MockTransport(lambda request: httpx.Response(200)),
        pipeline=ResiliencePipeline().add_adaptive_limiter(maximum_hosts=1),
    )
    first = limit_of(own, "http://a:80")
    assert limit_of(own, "http://b:80") is not first
    assert limit_of(own, "http://a:80") is not first  # forgotten: bounded


def test_the_defaults_and_the_label() -> None:
    options = AdaptiveLimiterOptions()
    assert options.model_dump() == {
        "min_limit": 1,
        "max_limit": 1000,
        "initial_limit": 20,
        "per_host": True,
        "queue_limit": 0,
        "maximum_hosts": 1024,
    }
    assert repr(ResiliencePipeline().add_adaptive_limiter(options)) == (
        "ResiliencePipeline(adaptive limiter)"
    )
    assert not options.waits_outside_attempts
    assert AdaptiveLimiterOptions(queue_limit=2).waits_outside_attempts


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"min_limit": 0}, "min_limit\n  Input should be greater than or equal to 1"),
        ({"max_limit": 0}, "max_limit\n  Input should be greater than or equal to 1"),
        (
            {"queue_limit": -1},
            "queue_limit\n  Input should be greater than or equal to 0",
        ),
        (
            {"min_limit": 5, "max_limit": 4},
            "min_limit (5) must be at most max_limit (4)",
        ),
        (
            {"initial_limit": 2000},
            "initial_limit (2000) must be within min_limit (1) and max_limit (1000)",
        ),
        (
            {"min_limit": 30},
            "initial_limit (20) must be within min_limit (30) and max_limit (1000)",
        ),
        (
            {"min_limit": True},
            "min_limit\n  Value error, give a number, not true or false",
        ),
        ({"limit": 3}, "limit\n  Extra inputs are not permitted"),
    ],
)
def test_invalid_options_are_refused_naming_the_fields(
    values: dict[str, object], message: str
) -> None:
    with pytest.raises(
        pydantic.ValidationError, match=message.replace("(", r"\(").replace(")", r"\)")
    ):
        AdaptiveLimiterOptions.model_validate(values)
    with pytest.raises(pydantic.ValidationError):
        ResiliencePipeline().add_adaptive_limiter(**values)


def test_add_adaptive_limiter_takes_options_or_fields_not_both() -> None:
    with pytest.raises(TypeError, match="not both"):
        ResiliencePipeline().add_adaptive_limiter(AdaptiveLimiterOptions(), max_limit=5)
    with pytest.raises(TypeError, match="must be AdaptiveLimiterOptions"):
        ResiliencePipeline().add_adaptive_limiter(HttpResilienceOptions())  # type: ignore[arg-type]


def test_the_standard_pipeline_swaps_its_limiter_when_asked() -> None:
    assert not isinstance(
        standard_steps(HttpResilienceOptions())[0], AdaptiveLimiterOptions
    )
    steps = standard_steps(
        HttpResilienceOptions(
            adaptive_concurrency=True, concurrency_limit=8, queue_limit=3
        )
    )
    assert steps[0] == AdaptiveLimiterOptions(
        max_limit=8, initial_limit=8, queue_limit=3, per_host=True
    )
    big = standard_steps(HttpResilienceOptions(adaptive_concurrency=True))[0]
    assert big == AdaptiveLimiterOptions(max_limit=1000, initial_limit=20)
    transport = ResilientTransport(
        httpx.MockTransport(lambda request: httpx.Response(200)),
        options=HttpResilienceOptions(adaptive_concurrency=True),
    )
    assert transport.handle_request(httpx.Request("GET", URL)).status_code == 200
    assert limit_of(transport, "http://api.example:80").in_use == 0
