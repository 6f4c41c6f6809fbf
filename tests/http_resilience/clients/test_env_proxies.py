"""Clients built here honour the environment's proxies as `httpx.Client()` does.

A real forward proxy (tests/support/forward_proxy.py) and the real fault
server, both on 127.0.0.1. A proxied call names the origin ``origin.invalid``,
a name only the proxy resolves (to 127.0.0.1): a call that succeeds with it
went through the proxy. A direct call names 127.0.0.1, which httpx proxies
like any other host unless ``NO_PROXY`` names it.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import timedelta
from urllib.parse import urlsplit

import httpx
import pytest
from httpx._utils import (  # pyright: ignore[reportPrivateUsage]
    get_environment_proxies,  # httpx's own reader, to compare ours with
)

from http_resilience import (
    BrokenCircuitError,
    HttpClientFactory,
    HttpResilienceOptions,
    create_async_client,
    create_client,
)
from http_resilience._clients.env_proxies import ROUTE, environment_proxies
from http_resilience._transport.registry import transports_of
from http_resilience.testing import FakeClock
from tests.support.fault_server import FaultServer
from tests.support.forward_proxy import ForwardProxy, serve_forward_proxy

pytestmark = pytest.mark.anyio

QUICK = HttpResilienceOptions(base_delay=timedelta(0))
ORIGIN = "origin.invalid"
VARIABLES = ("http_proxy", "https_proxy", "all_proxy", "no_proxy")


@pytest.fixture(autouse=True)
def no_proxy_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    for variable in VARIABLES:
        monkeypatch.delenv(variable, raising=False)
        monkeypatch.delenv(variable.upper(), raising=False)
    monkeypatch.delenv("REQUEST_METHOD", raising=False)  # urllib's CGI rule


@pytest.fixture
def proxy() -> Iterator[ForwardProxy]:
    with serve_forward_proxy({ORIGIN: "127.0.0.1"}) as running:
        yield running


def fresh(name: str) -> str:
    """A fault-server key no other run of a test has used (trio runs too)."""
    return f"{name}-{uuid.uuid4().hex}"


def via_proxy(server: FaultServer, path: str) -> str:
    port = urlsplit(server.url).port
    return f"http://{ORIGIN}:{port}{path}"


def test_a_sync_call_goes_through_the_proxy_http_proxy_names(
    proxy: ForwardProxy, fault_server: FaultServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HTTP_PROXY", proxy.url)
    key = fresh("env-proxy-sync")
    url = via_proxy(fault_server, f"/healthy?key={key}")
    with create_client("inventory", QUICK, clock=FakeClock()) as client:
        response = client.get(url)
    assert response.status_code == 200
    assert [(seen.method, seen.target) for seen in proxy.seen] == [("GET", url)]
    assert fault_server.hits(key) == 1
    assert ROUTE not in response.request.extensions  # the caller's, put back


async def test_an_async_call_goes_through_the_proxy_http_proxy_names(
    proxy: ForwardProxy, fault_server: FaultServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("http_proxy", proxy.url)
    url = via_proxy(fault_server, "/healthy?key=env-proxy-async")
    async with create_async_client("inventory", QUICK, clock=FakeClock()) as client:
        response = await client.get(url)
    assert response.status_code == 200
    assert [seen.target for seen in proxy.seen] == [url]


def test_a_sync_call_is_retried_through_the_proxy(
    proxy: ForwardProxy, fault_server: FaultServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ALL_PROXY", proxy.url)
    key = fresh("env-proxy-retry-sync")
    url = via_proxy(fault_server, f"/flaky/1/503?key={key}")
    with create_client("inventory", QUICK, clock=FakeClock()) as client:
        response = client.get(url)
    assert response.status_code == 200
    assert [seen.target for seen in proxy.seen] == [url, url]
    assert fault_server.hits(key) == 2


async def test_an_async_call_is_retried_through_the_proxy(
    proxy: ForwardProxy, fault_server: FaultServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HTTP_PROXY", proxy.url)
    key = fresh("env-proxy-retry-async")
    url = via_proxy(fault_server, f"/flaky/1/503?key={key}")
    async with create_async_client("inventory", QUICK, clock=FakeClock()) as client:
        response = await client.get(url)
    assert response.status_code == 200
    assert [seen.target for seen in proxy.seen] == [url, url]


@pytest.mark.parametrize("no_proxy", ["127.0.0.1", "localhost, 127.0.0.1", "*"])
def test_a_host_no_proxy_names_goes_direct(
    proxy: ForwardProxy,
    fault_server: FaultServer,
    monkeypatch: pytest.MonkeyPatch,
    no_proxy: str,
) -> None:
    monkeypatch.setenv("HTTP_PROXY", proxy.url)
    monkeypatch.setenv("NO_PROXY", no_proxy)
    key = fresh("no-proxy")
    with create_client("inventory", QUICK, clock=FakeClock()) as client:
        response = client.get(f"{fault_server.url}/flaky/1/503?key={key}")
    assert response.status_code == 200
    assert proxy.seen == []
    assert fault_server.hits(key) == 2  # retried, direct


async def test_an_async_host_no_proxy_names_goes_direct(
    proxy: ForwardProxy, fault_server: FaultServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HTTP_PROXY", proxy.url)
    monkeypatch.setenv("no_proxy", "127.0.0.1")
    async with create_async_client("inventory", QUICK, clock=FakeClock()) as client:
        response = await client.get(f"{fault_server.url}/healthy?key=no-proxy-async")
    assert response.status_code == 200
    assert proxy.seen == []


def test_without_trust_env_the_environment_is_not_read(
    proxy: ForwardProxy, fault_server: FaultServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HTTP_PROXY", proxy.url)
    with create_client("inventory", QUICK, trust_env=False) as client:
        response = client.get(f"{fault_server.url}/healthy?key=untrusted")
    assert response.status_code == 200
    assert proxy.seen == []


async def test_an_explicit_transport_reads_no_environment_as_in_httpx(
    proxy: ForwardProxy, fault_server: FaultServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HTTP_PROXY", proxy.url)
    url = f"{fault_server.url}/healthy?key=own-transport"
    async with (
        httpx.AsyncClient(transport=httpx.AsyncHTTPTransport()) as plain,
        create_async_client(
            "inventory", QUICK, transport=httpx.AsyncHTTPTransport()
        ) as client,
    ):
        assert (await plain.get(url)).status_code == 200
        assert (await client.get(url)).status_code == 200
    assert proxy.seen == []


def test_an_explicit_proxy_wins_over_the_environment(
    proxy: ForwardProxy, fault_server: FaultServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HTTP_PROXY", fault_server.refused_url)
    monkeypatch.setenv("NO_PROXY", ORIGIN)  # ignored too, as httpx ignores it
    url = via_proxy(fault_server, "/healthy?key=explicit-proxy")
    with create_client("inventory", QUICK, proxy=proxy.url) as client:
        assert client.get(url).status_code == 200
    assert [seen.target for seen in proxy.seen] == [url]


def test_your_mounts_win_over_the_environments(
    proxy: ForwardProxy, fault_server: FaultServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HTTP_PROXY", proxy.url)
    with create_client("inventory", QUICK, mounts={"http://": None}) as client:
        response = client.get(f"{fault_server.url}/healthy?key=own-mounts")
    assert response.status_code == 200
    assert proxy.seen == []


def test_proxied_and_direct_calls_share_the_clients_breaker(
    proxy: ForwardProxy, fault_server: FaultServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # One breaker for every host: a proxy's calls must feed the same one.
    options = HttpResilienceOptions(
        max_retry_attempts=0,
        breaker_per_host=False,
        failure_ratio=0.5,
        minimum_throughput=2,
    )
    monkeypatch.setenv("HTTP_PROXY", proxy.url)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    direct = fresh("shared-breaker-direct")
    with create_client("inventory", options, clock=FakeClock()) as client:
        assert len(transports_of(client)) == 1
        for _ in range(2):
            failing = via_proxy(fault_server, "/status/503?key=shared-breaker")
            assert client.get(failing).status_code == 503
        with pytest.raises(BrokenCircuitError):
            client.get(f"{fault_server.url}/healthy?key={direct}")
    assert len(proxy.seen) == 2
    assert fault_server.hits(direct) == 0


def test_a_factorys_named_client_goes_through_the_proxy(
    proxy: ForwardProxy, fault_server: FaultServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HTTP_PROXY", proxy.url)
    factory = HttpClientFactory(clock=FakeClock()).add("inventory", QUICK)
    key = fresh("env-proxy-factory")
    url = via_proxy(fault_server, f"/flaky/1/503?key={key}")
    try:
        assert factory.client("inventory").get(url).status_code == 200
    finally:
        factory.close()
    assert [seen.target for seen in proxy.seen] == [url, url]


@pytest.mark.parametrize(
    "environment",
    [
        {},
        {"HTTP_PROXY": "http://proxy.local:3128"},
        {"https_proxy": "proxy.local:3128", "ALL_PROXY": "socks5://s.local:1080"},
        {"HTTP_PROXY": "http://p:1", "NO_PROXY": "example.com, .corp.local"},
        {"HTTP_PROXY": "http://p:1", "NO_PROXY": "localhost,127.0.0.1,::1"},
        {"HTTP_PROXY": "http://p:1", "NO_PROXY": "192.168.0.0/16,http://a.b"},
        {"HTTP_PROXY": "http://p:1", "NO_PROXY": "a.b,*"},
        {"NO_PROXY": "only.local"},
        {"HTTP_PROXY": "", "HTTPS_PROXY": "http://p:2"},
    ],
)
def test_the_environment_reads_as_httpx_reads_it(
    monkeypatch: pytest.MonkeyPatch, environment: dict[str, str]
) -> None:
    for variable, value in environment.items():
        monkeypatch.setenv(variable, value)
    assert environment_proxies({}) == get_environment_proxies()
    assert environment_proxies({"trust_env": False}) == {}
    assert environment_proxies({"proxy": "http://p:9"}) == {}


def test_loopback_is_proxied_too_unless_no_proxy_names_it(
    proxy: ForwardProxy, fault_server: FaultServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # httpx excludes no host of its own accord, and neither do we.
    monkeypatch.setenv("HTTP_PROXY", proxy.url)
    url = f"{fault_server.url}/healthy?key={fresh('loopback')}"
    with create_client("inventory", QUICK) as client:
        assert client.get(url).status_code == 200
    assert [seen.target for seen in proxy.seen] == [url]
