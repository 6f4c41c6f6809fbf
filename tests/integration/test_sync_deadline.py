"""The sync client holds its deadlines against a server that drips its answer.

A fault proxy in front of the fault server sends the answer's head one byte at
a time: each byte well within any read timeout, the whole head far past every
deadline. httpx's timeouts bound each read, so only a deadline held at every
socket operation ends such an attempt in time. Each test measures a real call
to a real slow peer, bounded by a real deadline: nothing here sleeps to let
time pass. The margins are generous (the machine is shared), and still far
below the ~10 s the head takes to arrive.
"""

from __future__ import annotations

import re
import time
import uuid
from typing import Any

import httpx
import pytest

from http_resilience import (
    AttemptTimeoutError,
    HttpResilienceOptions,
    TotalTimeoutError,
    create_async_client,
    create_client,
)
from tests.support.fault_proxy import Drip, FaultProxy, MakeProxy, PassThrough
from tests.support.fault_server import FaultServer

pytestmark = pytest.mark.anyio

# About 150 bytes of head: some 10 s to arrive, each byte within 70 ms.
DRIP = Drip(0.07)
# What a call may take past its deadline here: scheduling on a busy machine.
MARGIN = 0.4


@pytest.fixture
def key() -> str:
    return uuid.uuid4().hex


@pytest.fixture
def proxy(fault_proxy: MakeProxy, fault_server: FaultServer) -> FaultProxy:
    proxy = fault_proxy(fault_server.url)
    proxy.set_fault(DRIP)
    return proxy


def options(**values: Any) -> HttpResilienceOptions:
    return HttpResilienceOptions.model_validate(
        {"attempt_timeout": "500ms", "total_request_timeout": "1500ms", **values}
    )


def timed_sync(client: httpx.Client, url: str) -> tuple[BaseException, float]:
    started = time.perf_counter()
    with pytest.raises(Exception) as raised:  # noqa: PT011 - the type is asserted
        client.get(url)
    return raised.value, time.perf_counter() - started


async def test_the_async_client_ends_a_dripping_head_at_its_attempt_timeout(
    proxy: FaultProxy, fault_server: FaultServer, key: str
) -> None:
    # The reference the sync client is held to below.
    async with create_async_client("orders", options()) as client:
        started = time.perf_counter()
        with pytest.raises(AttemptTimeoutError, match="attempt 1 timed out"):
            await client.get(f"{proxy.url}/healthy?key={key}")
        elapsed = time.perf_counter() - started
    assert 0.5 <= elapsed < 0.5 + MARGIN
    await fault_server.wait_idle(key)
    assert fault_server.hits(key) == 1


def test_the_sync_client_ends_a_dripping_head_at_its_attempt_timeout(
    proxy: FaultProxy, fault_server: FaultServer, key: str
) -> None:
    # The default 2 s backoff would pass the 1.5 s total: one attempt, then
    # the call ends, as the async client's does.
    with create_client("orders", options()) as client:
        error, elapsed = timed_sync(client, f"{proxy.url}/healthy?key={key}")
    assert 0.5 <= elapsed < 0.5 + MARGIN
    assert isinstance(error, AttemptTimeoutError), repr(error)
    assert re.search(
        r"attempt 1 timed out after [\d.]+ s \(attempt timeout 0\.5 s\)", str(error)
    )
    assert isinstance(error.__cause__, httpx.ReadTimeout)
    fault_server.wait_idle_sync(key)
    assert fault_server.hits(key) == 1


def test_retries_of_a_dripping_head_end_at_the_total_timeout(
    proxy: FaultProxy, fault_server: FaultServer, key: str
) -> None:
    timing = options(base_delay="1ms", max_retry_attempts=5)
    with create_client("orders", timing) as client:
        error, elapsed = timed_sync(client, f"{proxy.url}/healthy?key={key}")
    assert 1.5 <= elapsed < 1.5 + MARGIN
    assert isinstance(error, TotalTimeoutError), repr(error)
    assert "(total timeout 1.5 s)" in str(error)
    fault_server.wait_idle_sync(key)
    # Two attempts cut at 0.5 s each, the third by the total deadline.
    assert fault_server.hits(key) == 3


def test_the_deadline_holds_when_httpx_keeps_its_own_longer_timeouts(
    proxy: FaultProxy, fault_server: FaultServer, key: str
) -> None:
    timing = options(own_transport_timeout=False)
    with create_client("orders", timing, timeout=30) as client:
        error, elapsed = timed_sync(client, f"{proxy.url}/healthy?key={key}")
    assert 0.5 <= elapsed < 0.5 + MARGIN
    assert isinstance(error, AttemptTimeoutError), repr(error)


def test_a_mounted_httpx_transport_holds_the_deadline_too(
    proxy: FaultProxy, fault_server: FaultServer, key: str
) -> None:
    mounts = {proxy.url: httpx.HTTPTransport()}
    with create_client("orders", options(), mounts=mounts) as client:
        error, elapsed = timed_sync(client, f"{proxy.url}/healthy?key={key}")
    assert 0.5 <= elapsed < 0.5 + MARGIN
    assert isinstance(error, AttemptTimeoutError), repr(error)


def test_a_connection_the_deadline_cut_is_not_reused(
    proxy: FaultProxy, fault_server: FaultServer, key: str
) -> None:
    with create_client("orders", options()) as client:
        error, _ = timed_sync(client, f"{proxy.url}/healthy?key={key}")
        assert isinstance(error, AttemptTimeoutError)
        proxy.set_fault(PassThrough())
        response = client.get(f"{proxy.url}/healthy?key={key}")
    assert response.status_code == 200
    assert response.json()["hit"] == 2
