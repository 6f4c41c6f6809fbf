"""The fault proxy in front of the fault server, observed by plain httpx clients."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
import uuid
from collections.abc import AsyncIterator, Callable

import anyio.to_thread
import httpx
import pytest

from tests.support.fault_proxy import (
    BandwidthCap,
    Blackhole,
    CloseMidBody,
    Drip,
    Fault,
    FaultProxy,
    Latency,
    MakeProxy,
    PassThrough,
    ProxyStats,
    Refuse,
    Reset,
    SlowClose,
    proxy_faults,
)
from tests.support.fault_server import FaultServer

pytestmark = pytest.mark.anyio

# A short client timeout for the faults that never answer.
SHORT = httpx.Timeout(5.0, read=0.3)
# For answers that come: a busy machine may take a second.
GENEROUS = httpx.Timeout(30.0)


@pytest.fixture
def key() -> str:
    return uuid.uuid4().hex


@pytest.fixture
def proxy(fault_proxy: MakeProxy, fault_server: FaultServer) -> FaultProxy:
    return fault_proxy(fault_server.url)


@pytest.fixture
async def client(proxy: FaultProxy) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=proxy.url, timeout=GENEROUS) as client:
        yield client


async def timed(client: httpx.AsyncClient, path: str) -> tuple[httpx.Response, float]:
    started = time.perf_counter()
    response = await client.get(path)
    return response, time.perf_counter() - started


async def test_pass_through_forwards_and_counts(
    proxy: FaultProxy, fault_server: FaultServer, client: httpx.AsyncClient, key: str
) -> None:
    responses = [await client.get(f"/healthy?key={key}") for _ in range(3)]
    assert [response.status_code for response in responses] == [200] * 3
    assert fault_server.hits(key) == 3
    stats = proxy.stats()
    # One kept-alive connection carried all three.
    assert (stats.accepted, stats.open) == (1, 1)
    assert stats.bytes_up > 3 * len("GET /healthy HTTP/1.1\r\n")
    assert stats.bytes_down > sum(len(response.content) for response in responses)
    await client.aclose()
    await anyio.to_thread.run_sync(proxy.wait_idle)
    assert proxy.stats().open == 0


def test_a_sync_client_goes_through_too(
    proxy: FaultProxy, fault_server: FaultServer, key: str
) -> None:
    with httpx.Client(base_url=proxy.url, timeout=GENEROUS) as client:
        assert client.get(f"/healthy?key={key}").status_code == 200
        proxy.set_fault(Blackhole())
        with pytest.raises(httpx.ReadTimeout):
            client.get(f"/healthy?key={key}", timeout=SHORT)
    assert fault_server.hits(key) == 1


async def test_latency_delays_each_answer(
    proxy: FaultProxy, client: httpx.AsyncClient, key: str
) -> None:
    proxy.set_fault(Latency(0.15, jitter=0.03))
    for _ in range(2):
        response, elapsed = await timed(client, f"/healthy?key={key}")
        assert response.status_code == 200
        assert elapsed >= 0.11


async def test_a_fault_switched_applies_to_a_connection_already_open(
    proxy: FaultProxy, client: httpx.AsyncClient, key: str
) -> None:
    _, fast = await timed(client, f"/healthy?key={key}")
    assert fast < 0.1
    proxy.set_fault(Latency(0.15))
    response, slow = await timed(client, f"/healthy?key={key}")
    assert response.status_code == 200
    assert slow >= 0.12
    proxy.set_fault(Blackhole())
    with pytest.raises(httpx.ReadTimeout):
        await client.get(f"/healthy?key={key}", timeout=SHORT)
    # Every request above went over the one connection the pool opened first.
    assert proxy.stats().accepted == 1


async def test_blackhole_accepts_and_never_answers(
    proxy: FaultProxy, fault_server: FaultServer, client: httpx.AsyncClient, key: str
) -> None:
    proxy.set_fault(Blackhole())
    with pytest.raises(httpx.ReadTimeout):
        await client.get(f"/healthy?key={key}", timeout=SHORT)
    assert fault_server.hits(key) == 0
    assert proxy.stats().accepted == 1


async def test_reset_on_a_new_connection(
    proxy: FaultProxy, fault_server: FaultServer, client: httpx.AsyncClient, key: str
) -> None:
    proxy.set_fault(Reset())
    with pytest.raises((httpx.ReadError, httpx.RemoteProtocolError)):
        await client.get(f"/healthy?key={key}")
    assert fault_server.hits(key) == 0


async def test_reset_on_a_kept_alive_connection(
    proxy: FaultProxy, client: httpx.AsyncClient, key: str
) -> None:
    assert (await client.get(f"/healthy?key={key}")).status_code == 200
    proxy.set_fault(Reset())
    with pytest.raises((httpx.ReadError, httpx.RemoteProtocolError)):
        await client.get(f"/healthy?key={key}")
    assert proxy.stats().accepted == 1


async def test_refuse_refuses_and_closes_open_connections_then_recovers(
    proxy: FaultProxy, client: httpx.AsyncClient, key: str
) -> None:
    assert (await client.get(f"/healthy?key={key}")).status_code == 200
    proxy.set_fault(Refuse())
    assert proxy.stats().open == 0
    for _ in range(2):
        with pytest.raises(httpx.ConnectError):
            await client.get(f"/healthy?key={key}")
    proxy.set_fault(PassThrough())
    assert (await client.get(f"/healthy?key={key}")).status_code == 200
    assert proxy.stats().accepted == 2


async def test_close_mid_body_cuts_the_answer(
    proxy: FaultProxy, client: httpx.AsyncClient, key: str
) -> None:
    before = proxy.stats().bytes_down
    whole = await client.get(f"/healthy?key={key}")
    size = proxy.stats().bytes_down - before
    assert size > len(whole.content) > 10
    # Same length of key and hit number, so the same size of answer: cut it
    # ten bytes before its end, inside the body.
    proxy.set_fault(CloseMidBody(size - 10))
    with pytest.raises(httpx.RemoteProtocolError):
        await client.get(f"/healthy?key={key[::-1]}")


async def test_slow_close_holds_the_close_after_the_server_closes(
    proxy: FaultProxy, key: str
) -> None:
    proxy.set_fault(SlowClose(0.2))
    host, port = "127.0.0.1", proxy.port
    reader, writer = await asyncio.open_connection(host, port)
    try:
        request = f"GET /healthy?key={key} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
        started = time.perf_counter()
        writer.write(request.encode() + b"\r\n")
        answer = await reader.read()  # up to the proxy's close
        elapsed = time.perf_counter() - started
    finally:
        writer.close()
        await writer.wait_closed()
    assert answer.startswith(b"HTTP/1.1 200 ")
    assert answer.endswith(b'"status": 200}')
    assert elapsed >= 0.15


async def test_bandwidth_cap_paces_a_large_body(
    proxy: FaultProxy, fault_server: FaultServer, client: httpx.AsyncClient, key: str
) -> None:
    body = b"x" * 200_000
    proxy.set_fault(BandwidthCap(1_000_000))
    started = time.perf_counter()
    response = await client.post(f"/healthy?key={key}", content=body)
    elapsed = time.perf_counter() - started
    assert response.status_code == 200
    # 200 KB at 1 MB/s is 0.2 s; uncapped on loopback it is a few ms.
    assert elapsed >= 0.12
    assert proxy.stats().bytes_up >= len(body)


async def test_drip_sends_the_answer_a_byte_at_a_time_within_each_read_timeout(
    proxy: FaultProxy, client: httpx.AsyncClient, key: str
) -> None:
    proxy.set_fault(Drip(0.002))
    response, elapsed = await timed(client, f"/healthy?key={key}")
    assert response.status_code == 200
    assert response.json()["key"] == key
    # Some 200 bytes, 2 ms apart: the whole answer far slower than on bare
    # loopback.
    downstream = proxy.stats().bytes_down
    assert downstream >= 150
    assert elapsed >= downstream * 0.002 * 0.9


def test_proxies_stop_boundedly_with_connections_held_open(
    fault_server: FaultServer,
) -> None:
    # The threads the proxy starts, told from the others of this process by
    # identity: another test's threads may end meanwhile, so counts lie.
    before = set(threading.enumerate())
    with proxy_faults(fault_server.url) as proxy:
        started_by_proxy = [t for t in threading.enumerate() if t not in before]
        assert len(started_by_proxy) == 1
        proxy.set_fault(Blackhole())
        held = socket.create_connection(("127.0.0.1", proxy.port), timeout=0.3)
        held.sendall(b"GET /healthy HTTP/1.1\r\nHost: x\r\n\r\n")
        with pytest.raises(TimeoutError):
            held.recv(1)
        assert proxy.stats().open == 1
        started = time.perf_counter()
    stopped = time.perf_counter() - started
    with held:
        held.settimeout(5)
        assert held.recv(1) == b""  # the proxy closed it on the way out
    assert stopped < 2
    assert not any(thread.is_alive() for thread in started_by_proxy)
    proxy.close()  # idempotent


def test_an_upstream_that_refuses_closes_the_client(
    fault_proxy: MakeProxy, fault_server: FaultServer
) -> None:
    proxy = fault_proxy(fault_server.refused_url)
    with (
        httpx.Client(base_url=proxy.url, timeout=GENEROUS) as client,
        pytest.raises((httpx.RemoteProtocolError, httpx.ReadError)),
    ):
        client.get("/healthy")
    proxy.wait_idle()
    assert proxy.stats() == ProxyStats(accepted=1, open=0, bytes_up=0, bytes_down=0)


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: Latency(-0.1), "Latency.seconds must be finite and >= 0, got -0.1"),
        (lambda: Latency(0.1, jitter=float("nan")), "Latency.jitter must be"),
        (lambda: SlowClose(float("inf")), "SlowClose.seconds must be"),
        (lambda: BandwidthCap(0), "BandwidthCap.bytes_per_second must be >= 1"),
        (lambda: CloseMidBody(-1), "CloseMidBody.after_bytes must be >= 0, got -1"),
        (lambda: Drip(-1.0), "Drip.seconds must be finite and >= 0, got -1.0"),
    ],
)
def test_faults_check_their_arguments(make: Callable[[], Fault], message: str) -> None:
    with pytest.raises(ValueError, match=message.replace(".", r"\.")):
        make()


def test_an_upstream_url_without_a_port_is_refused() -> None:
    with (
        pytest.raises(ValueError, match="needs a host and a port"),
        proxy_faults("http://127.0.0.1"),
    ):
        pass
