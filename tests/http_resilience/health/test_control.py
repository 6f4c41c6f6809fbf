"""`CircuitControl`: an operator isolates a host, and resets its breaker."""

from __future__ import annotations

import logging
import threading
from typing import Any

import anyio
import httpx
import pytest

from http_resilience import (
    AsyncResilientTransport,
    BreakerEvent,
    BrokenCircuitError,
    CircuitControl,
    HostHealth,
    HttpClientFactory,
    HttpEvent,
    RejectionEvent,
    ResiliencePipeline,
    create_async_client,
    health,
)
from http_resilience.testing import EventRecorder, FakeClock
from tests.http_resilience._support.scripted import (
    async_transport,
    sync_transport,
)
from tests.http_resilience.health.support import BREAKS, HOST, URL, Upstream, get

pytestmark = pytest.mark.anyio


async def test_a_host_isolated_before_its_first_call_is_refused_locally() -> None:
    events, upstream = EventRecorder[HttpEvent](), Upstream()
    transport = async_transport(upstream, FakeClock(), events=events)
    control = CircuitControl(transport)
    control.isolate("http://api.example")
    assert control.isolated == (HOST,)
    assert health(transport).hosts == (HostHealth(HOST, "isolated"),)
    with pytest.raises(BrokenCircuitError) as caught:
        await get(transport)
    assert str(caught.value) == (
        "GET http://api.example:80 (client 'orders'): circuit isolated by an "
        "operator, request not sent"
    )
    assert caught.value.retry_after is None
    assert upstream.hits == 0
    assert events.of(RejectionEvent) == [
        RejectionEvent("orders", "GET", HOST, "circuit_open")
    ]
    # Other hosts are served as before.
    assert (await get(transport, "http://other.example/")).status_code == 200
    assert upstream.hits == 1


async def test_isolating_a_host_in_use_refuses_its_next_call_until_reset() -> None:
    upstream = Upstream()
    transport = async_transport(upstream, FakeClock())
    await get(transport)
    control = CircuitControl(transport)
    control.isolate("HTTP://API.Example.:80/")
    with pytest.raises(BrokenCircuitError, match="isolated"):
        await get(transport, "http://api.example/other?page=2")
    control.reset("http://api.example:80")
    assert control.isolated == ()
    assert health(transport).hosts == (HostHealth(HOST, "closed"),)
    assert (await get(transport)).status_code == 200
    assert upstream.hits == 2


async def test_a_reset_closes_an_open_breaker_at_once() -> None:
    clock, events, upstream = FakeClock(), EventRecorder[HttpEvent](), Upstream(503)
    transport = async_transport(upstream, clock, events=events, **BREAKS)
    for _ in range(5):
        await get(transport)
    with pytest.raises(BrokenCircuitError, match="circuit open"):
        await get(transport)
    CircuitControl(transport).reset("http://api.example")
    # Reported closed at once; closed for real before the next attempt.
    assert health(transport).hosts == (HostHealth(HOST, "closed"),)
    upstream.status = 200
    assert (await get(transport)).status_code == 200
    assert [(e.previous, e.current) for e in events.of(BreakerEvent)] == [
        ("closed", "open"),
        ("open", "closed"),
    ]


async def test_a_reset_forgets_the_window() -> None:
    upstream = Upstream(503)
    transport = async_transport(upstream, FakeClock(), **BREAKS)
    for _ in range(4):
        await get(transport)
    CircuitControl(transport).reset("http://api.example")
    await get(transport)  # a fifth failure, but the first of a new window
    assert health(transport).hosts == (HostHealth(HOST, "closed"),)
    for _ in range(4):
        await get(transport)
    assert health(transport).hosts == (HostHealth(HOST, "open", 3.0),)


async def test_a_probe_in_flight_when_reset_is_ignored() -> None:
    clock, upstream = FakeClock(), Upstream(503)
    transport = async_transport(upstream, clock, **BREAKS)
    for _ in range(5):
        await get(transport)
    clock.advance(3.0)
    upstream.hold = True
    async with anyio.create_task_group() as group:
        group.start_soon(get, transport)
        await upstream.entered.wait()
        control = CircuitControl(transport)
        control.reset("http://api.example")
        upstream.hold = False
        # The next call carries out the reset: the breaker closes.
        assert (await get(transport)).status_code == 503
        upstream.release.set()
    # The probe failed after the reset: it says nothing of the closed breaker.
    assert health(transport).hosts == (HostHealth(HOST, "closed"),)


async def test_a_reset_of_a_host_never_seen_changes_nothing() -> None:
    transport = async_transport(Upstream(), FakeClock())
    control = CircuitControl(transport)
    control.reset("https://never.example")
    assert (await get(transport)).status_code == 200
    assert health(transport).hosts == (HostHealth(HOST, "closed"),)


def test_the_sync_transport_obeys_an_operator_on_another_thread() -> None:
    upstream = Upstream()
    transport = sync_transport(upstream.answer, FakeClock())
    request = httpx.Request("GET", URL)
    assert transport.handle_request(request).status_code == 200
    control = CircuitControl(transport)
    worker = threading.Thread(target=control.isolate, args=("http://api.example",))
    worker.start()
    worker.join()
    with pytest.raises(BrokenCircuitError, match="isolated"):
        transport.handle_request(request)
    assert health(transport).hosts == (HostHealth(HOST, "isolated"),)
    control.reset("http://api.example")
    assert transport.handle_request(request).status_code == 200
    assert upstream.hits == 2


def test_orders_given_while_threads_send_leave_the_breakers_whole() -> None:
    upstream = Upstream()
    transport = sync_transport(upstream.answer, FakeClock(), maximum_hosts=4)
    control = CircuitControl(transport)
    failures: list[BaseException] = []
    hosts = [f"http://host-{index}.example" for index in range(8)]

    def send(offset: int) -> None:
        for turn in range(300):
            host = hosts[(offset + turn) % len(hosts)]
            try:
                transport.handle_request(httpx.Request("GET", host))
            except BrokenCircuitError:
                pass
            except BaseException as error:  # pragma: no cover - the failure
                failures.append(error)

    def order() -> None:
        for turn in range(300):
            host = hosts[turn % len(hosts)]
            (control.isolate if turn % 2 else control.reset)(host)

    threads = [threading.Thread(target=send, args=(n,)) for n in range(3)]
    threads.append(threading.Thread(target=order))
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
    for host in hosts:
        control.reset(host)
    for host in hosts:
        assert transport.handle_request(httpx.Request("GET", host)).status_code == 200
    assert all(host.state == "closed" for host in health(transport).hosts)


async def test_a_client_is_controlled_on_its_transport_and_its_mounts() -> None:
    upstream = Upstream()
    async with create_async_client(
        "orders",
        transport=httpx.MockTransport(upstream),
        mounts={"http://api.example": httpx.MockTransport(upstream)},
    ) as client:
        control = CircuitControl(client)
        control.isolate("http://api.example")
        with pytest.raises(BrokenCircuitError):
            await client.get(URL)
        assert (await client.get("http://other.example/")).status_code == 200
        assert repr(control) == "CircuitControl(client='orders')"


async def test_a_factory_client_is_controlled_apart_from_its_sync_twin() -> None:
    upstream = Upstream()
    factory = HttpClientFactory(
        lambda clients: clients.add("orders", transport=httpx.MockTransport(upstream)),
        clock=FakeClock(),
    )
    async with factory:
        CircuitControl(factory.async_client("orders")).isolate("http://api.example")
        with pytest.raises(BrokenCircuitError):
            await factory.async_client("orders").get(URL)
        states = [[host.state for host in report.hosts] for report in factory.health()]
        assert states == [["isolated"]]


def test_isolating_twice_is_told_once(caplog: pytest.LogCaptureFixture) -> None:
    control = CircuitControl(sync_transport(Upstream().answer, FakeClock()))
    with caplog.at_level(logging.WARNING, logger="http_resilience"):
        control.isolate("https://api.example")
        control.isolate("https://api.example:443")
        control.reset("https://api.example")
    assert [record.getMessage() for record in caplog.records] == [
        "https://api.example:443 (client 'orders'): circuit isolated by an operator",
        "https://api.example:443 (client 'orders'): circuit reset by an operator",
    ]


async def test_one_shared_breaker_is_isolated_as_a_star() -> None:
    upstream = Upstream()
    transport = async_transport(upstream, FakeClock(), breaker_per_host=False)
    control = CircuitControl(transport)
    with pytest.raises(ValueError, match=r"shares one breaker between its hosts"):
        control.isolate("http://api.example")
    control.isolate("*")
    assert health(transport).hosts == (HostHealth("*", "isolated"),)
    for url in (URL, "http://other.example/"):
        with pytest.raises(BrokenCircuitError, match="isolated"):
            await get(transport, url)
    control.reset("*")
    assert (await get(transport)).status_code == 200
    assert health(transport).hosts == (HostHealth("*", "closed"),)


def test_a_star_is_no_host_of_a_client_with_a_breaker_per_host() -> None:
    control = CircuitControl(sync_transport(Upstream().answer, FakeClock()))
    with pytest.raises(ValueError, match=r"has a breaker per host: '\*' is not a host"):
        control.reset("*")


@pytest.mark.parametrize(
    ("host", "message"),
    [
        (
            "api.example.com",
            r"^<URL without a scheme or host> is not a host: give scheme://host",
        ),
        ("", r"^<URL without a scheme or host> is not a host"),
        ("http://[::1", r"^<unparseable URL> is not a host: give scheme://host"),
        ("http:///orders", r"^<URL without a scheme or host> is not a host"),
        (
            "http://api.example.com:99999",
            r"^'http://api.example.com:99999' is not a host: port 99999 is not 1-65535",
        ),
        ("http://api.example.com:0", r"port 0 is not 1-65535"),
        (
            "https://user:secret@api.example/orders?token=abc",
            r"^'https://api.example:443' was given with a path, query or credentials",
        ),
        ("https://api.example/orders", r"with a path, query or credentials"),
        ("https://api.example#top", r"with a path, query or credentials"),
    ],
)
def test_what_is_not_a_host_is_refused_by_name(host: str, message: str) -> None:
    control = CircuitControl(sync_transport(Upstream().answer, FakeClock()))
    for order in (control.isolate, control.reset):
        with pytest.raises(ValueError, match=message) as caught:
            order(host)
        assert "secret" not in str(caught.value)
        assert "token" not in str(caught.value)
    assert control.isolated == ()


def test_a_host_that_is_no_string_is_refused() -> None:
    control = CircuitControl(sync_transport(Upstream().answer, FakeClock()))
    with pytest.raises(TypeError, match=r"a host is a string; .* got int"):
        control.isolate(80)  # type: ignore[arg-type]


def test_a_client_without_a_breaker_cannot_be_controlled() -> None:
    transport = AsyncResilientTransport(
        httpx.MockTransport(Upstream()),
        pipeline=ResiliencePipeline().add_retry(),
        name="bare",
    )
    with pytest.raises(ValueError, match="client 'bare' has no circuit breaker"):
        CircuitControl(transport)


@pytest.mark.parametrize("target", [httpx.Client, HttpClientFactory, object])
def test_what_is_not_a_client_built_here_cannot_be_controlled(target: Any) -> None:
    with pytest.raises(TypeError, match=r"^CircuitControl\(\)"):
        CircuitControl(target())
