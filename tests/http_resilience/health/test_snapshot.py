"""`health` and `HttpClientFactory.health`: breakers, limiters and budgets read live."""

from __future__ import annotations

from collections.abc import Callable

import anyio
import httpx
import pytest

from http_resilience import (
    AsyncResilientTransport,
    BudgetHealth,
    ClientHealth,
    HostHealth,
    HttpClientFactory,
    LimiterHealth,
    ResiliencePipeline,
    create_async_client,
    create_client,
    health,
)
from http_resilience.testing import FakeClock
from tests.http_resilience._support.scripted import (
    async_transport,
    options,
    sync_transport,
)
from tests.http_resilience.health.support import BREAKS, HOST, URL, Upstream, get

pytestmark = pytest.mark.anyio


async def test_a_breaker_read_through_open_half_open_and_closed() -> None:
    clock, upstream = FakeClock(), Upstream(503)
    transport = async_transport(upstream, clock, **BREAKS)
    assert health(transport).hosts == ()
    for _ in range(5):
        await get(transport)
    assert health(transport).hosts == (HostHealth(HOST, "open", 3.0),)
    clock.advance(1.0)
    assert health(transport).hosts == (HostHealth(HOST, "open", 2.0),)
    assert health(transport).refusing == (HostHealth(HOST, "open", 2.0),)
    clock.advance(2.5)
    # The break is over: still open, but the next call is its probe.
    assert health(transport).hosts == (HostHealth(HOST, "open", 0.0),)
    assert health(transport).refusing == ()

    upstream.status, upstream.hold = 200, True
    async with anyio.create_task_group() as group:
        group.start_soon(get, transport)
        await upstream.entered.wait()
        assert health(transport).hosts == (HostHealth(HOST, "half_open"),)
        assert health(transport).refusing == ()
        upstream.release.set()
    assert health(transport).hosts == (HostHealth(HOST, "closed"),)


def test_the_sync_transport_reads_the_same_states() -> None:
    clock, upstream = FakeClock(), Upstream(503)
    seen: list[tuple[HostHealth, ...]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(health(transport).hosts)
        return upstream.answer(request)

    transport = sync_transport(handler, clock, **BREAKS)
    with httpx.Client(transport=transport) as client:
        for _ in range(5):
            client.get(URL)
        report = health(transport)
        assert report.sync
        assert report.hosts == (HostHealth(HOST, "open", 3.0),)
        clock.advance(3.0)
        upstream.status = 200
        client.get(URL)
    # Read inside the probe's attempt: the breaker was half-open then.
    assert seen[-1] == (HostHealth(HOST, "half_open"),)
    assert health(transport).hosts == (HostHealth(HOST, "closed"),)


async def test_hosts_are_sorted_and_never_carry_credentials_paths_or_queries() -> None:
    transport = async_transport(Upstream(), FakeClock())
    for url in (
        "https://user:secret@b.example/a/path?token=abc",
        "HTTP://A.Example.:8080/x?y=1#z",
    ):
        await get(transport, url)
    report = health(transport)
    assert [host.host for host in report.hosts] == [
        "http://a.example:8080",
        "https://b.example:443",
    ]
    for text in ("secret", "user", "token", "path", "y=1"):
        assert text not in repr(report)


async def test_the_limiter_reports_permits_in_use_and_the_queue() -> None:
    upstream = Upstream()
    upstream.hold = True
    transport = async_transport(
        upstream, FakeClock(), concurrency_limit=2, queue_limit=1
    )
    assert health(transport).limiters == (LimiterHealth(0, 2, 0, 1),)
    async with anyio.create_task_group() as group:
        for _ in range(3):
            group.start_soon(get, transport)
        await upstream.entered.wait()
        await anyio.wait_all_tasks_blocked()
        assert health(transport).limiters == (LimiterHealth(2, 2, 1, 1),)
        upstream.release.set()
    assert health(transport).limiters == (LimiterHealth(0, 2, 0, 1),)


def test_the_sync_limiter_reports_its_use() -> None:
    readings: list[tuple[LimiterHealth, ...]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        readings.append(health(transport).limiters)
        return httpx.Response(200)

    transport = sync_transport(handler, FakeClock(), concurrency_limit=3)
    transport.handle_request(httpx.Request("GET", URL))
    assert readings == [(LimiterHealth(1, 3, 0, 0),)]


async def test_the_retry_budget_reports_calls_retries_and_what_it_allows() -> None:
    clock = FakeClock()
    transport = async_transport(
        Upstream(503),
        clock,
        max_retry_attempts=1,
        base_delay=0.1,
        minimum_throughput=1000,
        retry_budget_ratio=0.5,
        retry_budget_min_per_second=0,
    )
    for _ in range(4):
        await get(transport)
    # A retry goes while retries stay within half the calls: calls 2 and 4.
    assert health(transport).budgets == (BudgetHealth(HOST, 4, 2, 2),)
    clock.advance(60)
    assert health(transport).budgets == (BudgetHealth(HOST, 0, 0, 0),)


def test_a_shared_budget_and_breaker_are_reported_under_a_star() -> None:
    transport = sync_transport(
        Upstream().answer, FakeClock(), budget_per_host=False, breaker_per_host=False
    )
    transport.handle_request(httpx.Request("GET", URL))
    transport.handle_request(httpx.Request("GET", "http://other.example/"))
    report = health(transport)
    assert report.hosts == (HostHealth("*", "closed"),)
    assert [budget.host for budget in report.budgets] == ["*"]
    assert report.budgets[0].calls == 2


async def test_a_pipeline_without_these_strategies_reports_none() -> None:
    transport = AsyncResilientTransport(
        httpx.MockTransport(Upstream()),
        pipeline=ResiliencePipeline().add_retry(),
        name="bare",
        clock=FakeClock(),
    )
    await get(transport)
    assert health(transport) == ClientHealth("bare", False, (), (), ())


async def test_a_host_two_breakers_know_is_reported_in_the_worse_state() -> None:
    clock = FakeClock()
    for outer, inner in ((5, 100), (100, 5)):
        transport = AsyncResilientTransport(
            httpx.MockTransport(Upstream(503)),
            pipeline=ResiliencePipeline()
            .add_breaker(minimum_throughput=outer, break_duration=3)
            .add_breaker(minimum_throughput=inner, break_duration=3),
            clock=clock,
        )
        for _ in range(5):
            await get(transport)
        assert health(transport).hosts == (HostHealth(HOST, "open", 3.0),)


async def test_the_overflow_breaker_of_a_full_registry_is_reported() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(503 if request.url.host == "api.example" else 200)

    transport = async_transport(handler, FakeClock(), maximum_hosts=1, **BREAKS)
    for _ in range(5):
        await get(transport)
    await get(transport, "http://other.example/")
    assert health(transport).hosts == (
        HostHealth("(overflow)", "closed"),
        HostHealth(HOST, "open", 3.0),
    )


async def test_a_client_reports_its_transport_and_its_mounts_together() -> None:
    clock = FakeClock()

    def failing(request: httpx.Request) -> httpx.Response:
        return httpx.Response(503)

    async with create_async_client(
        "orders",
        options(**BREAKS),
        clock=clock,
        transport=httpx.MockTransport(Upstream()),
        mounts={"http://slow.example": httpx.MockTransport(failing)},
    ) as client:
        await client.get(URL)
        for _ in range(5):
            await client.get("http://slow.example/")
        report = health(client)
    assert report.client == "orders"
    assert not report.sync
    assert report.hosts == (
        HostHealth(HOST, "closed"),
        HostHealth("http://slow.example:80", "open", 3.0),
    )
    assert len(report.limiters) == 2


def test_a_sync_client_built_here_is_read_through_the_client() -> None:
    with create_client(
        "stock", transport=httpx.MockTransport(Upstream().answer)
    ) as client:
        client.get(URL)
        report = health(client)
    assert (report.client, report.sync) == ("stock", True)
    assert report.hosts == (HostHealth(HOST, "closed"),)


async def test_a_factory_reports_every_client_it_built() -> None:
    upstream = Upstream()
    factory = HttpClientFactory(
        lambda clients: clients.add(
            "inventory",
            options(**BREAKS),
            transport=httpx.MockTransport(upstream),
        ).add("stock", transport=httpx.MockTransport(upstream.answer)),
        clock=FakeClock(),
    )
    assert factory.health() == ()
    async with factory:
        await factory.async_client("inventory").get(URL)
        factory.client("stock").get("http://stock.example/")
        reports = factory.health()
    assert [(report.client, report.sync) for report in reports] == [
        ("inventory", False),
        ("stock", True),
    ]
    assert reports[0].hosts == (HostHealth(HOST, "closed"),)
    assert reports[1].hosts == (HostHealth("http://stock.example:80", "closed"),)


def test_a_factory_lists_its_async_client_before_its_sync_twin() -> None:
    factory = HttpClientFactory(clock=FakeClock())
    factory.client()
    factory.async_client()
    assert [(each.client, each.sync) for each in factory.health()] == [
        ("default", False),
        ("default", True),
    ]


@pytest.mark.parametrize(
    ("target", "message"),
    [
        (httpx.Client, r"health\(\): this Client was not built by create_async"),
        (
            lambda: httpx.AsyncClient(transport=AsyncResilientTransport()),
            r"give its AsyncResilientTransport",
        ),
        (HttpClientFactory, r"health\(\) takes a client .* got HttpClientFactory"),
        (lambda: "http://api.example", r"got str"),
    ],
)
def test_what_is_not_a_client_built_here_is_refused(
    target: Callable[[], object], message: str
) -> None:
    with pytest.raises(TypeError, match=message):
        health(target())  # type: ignore[arg-type]
