"""Timeouts against a slow real server: what is raised, and what catches it.

With `own_transport_timeout=False` the caller's httpx timeouts reach the
transport and end an attempt as plain httpx ends it (`httpx.ReadTimeout`),
retried underneath and raised as the original httpx exception on the last
attempt. With the policy owning time (the default) our own cuts end the call;
they must still be caught where plain httpx code catches a timeout:
`httpx.TimeoutException` and `httpx.HTTPError`.
"""

from __future__ import annotations

import itertools
from datetime import timedelta
from typing import Any

import httpx
import pytest

from http_resilience import HttpResilienceOptions
from tests.http_resilience.compat.clients import (
    RESILIENT,
    Kind,
    async_client,
    sync_client,
)
from tests.http_resilience.compat.server import CompatServer
from tests.support.fault_server import FaultServer

pytestmark = pytest.mark.anyio

SHORT = 0.15
CALLERS_TIMEOUTS = HttpResilienceOptions(
    base_delay=timedelta(0), max_retry_attempts=1, own_transport_timeout=False
)
POLICY_TIMEOUTS = HttpResilienceOptions(
    base_delay=timedelta(0),
    max_retry_attempts=1,
    attempt_timeout=timedelta(seconds=SHORT),
    total_request_timeout=timedelta(seconds=5),
    sampling_duration=timedelta(seconds=5),
)
_keys = itertools.count()

Caught = tuple[str, bool, bool, str]


def _caught(exc: httpx.HTTPError) -> Caught:
    """The exception as a caller's ``except httpx.HTTPError`` sees it."""
    return (
        type(exc).__name__,
        isinstance(exc, httpx.TimeoutException),
        True,
        str(exc.request.url),
    )


def _sync_timeouts(client: httpx.Client, url: str, **extra: Any) -> list[Caught]:
    caught: list[Caught] = []
    with client:
        head = f"{url}/sleep/3?key=head-{next(_keys)}"
        with pytest.raises(httpx.HTTPError) as raised:
            client.get(head, **extra)
        caught.append(_caught(raised.value))
    return caught


async def _async_timeouts(
    client: httpx.AsyncClient, url: str, **extra: Any
) -> list[Caught]:
    caught: list[Caught] = []
    async with client:
        head = f"{url}/sleep/3?key=head-{next(_keys)}"
        with pytest.raises(httpx.HTTPError) as raised:
            await client.get(head, **extra)
        caught.append(_caught(raised.value))
    return caught


def _same_but_url(got: list[Caught], expected: list[Caught]) -> None:
    assert [c[:3] for c in got] == [c[:3] for c in expected]
    assert all(
        c[3].split("?")[0] == e[3].split("?")[0]
        for c, e in zip(got, expected, strict=True)
    )


HTTPX_TIMEOUT = httpx.Timeout(SHORT)


@pytest.mark.parametrize("where", ["client", "request"])
@pytest.mark.parametrize("kind", RESILIENT)
def test_sync_the_callers_timeout_raises_httpx_own_read_timeout(
    kind: Kind, where: str, fault_server: FaultServer
) -> None:
    url = fault_server.url
    built: dict[str, Any] = {"timeout": HTTPX_TIMEOUT} if where == "client" else {}
    sent: dict[str, Any] = {"timeout": HTTPX_TIMEOUT} if where == "request" else {}
    expected = _sync_timeouts(sync_client("plain", **built), url, **sent)
    assert expected[0][:3] == ("ReadTimeout", True, True)
    client = sync_client(kind, options=CALLERS_TIMEOUTS, fake_clock=False, **built)
    _same_but_url(_sync_timeouts(client, url, **sent), expected)


@pytest.mark.parametrize("where", ["client", "request"])
@pytest.mark.parametrize("kind", RESILIENT)
async def test_async_the_callers_timeout_raises_httpx_own_read_timeout(
    kind: Kind, where: str, fault_server: FaultServer
) -> None:
    url = fault_server.url
    built: dict[str, Any] = {"timeout": HTTPX_TIMEOUT} if where == "client" else {}
    sent: dict[str, Any] = {"timeout": HTTPX_TIMEOUT} if where == "request" else {}
    expected = await _async_timeouts(async_client("plain", **built), url, **sent)
    assert expected[0][:3] == ("ReadTimeout", True, True)
    client = async_client(kind, options=CALLERS_TIMEOUTS, fake_clock=False, **built)
    _same_but_url(await _async_timeouts(client, url, **sent), expected)


@pytest.mark.parametrize("kind", RESILIENT)
def test_sync_the_policys_cut_is_caught_as_an_httpx_timeout(
    kind: Kind, fault_server: FaultServer
) -> None:
    client = sync_client(kind, options=POLICY_TIMEOUTS, fake_clock=False)
    [(_, timeout, http_error, url)] = _sync_timeouts(client, fault_server.url)
    assert (timeout, http_error) == (True, True)
    assert url.startswith(f"{fault_server.url}/sleep/3")


@pytest.mark.parametrize("kind", RESILIENT)
async def test_async_the_policys_cut_is_caught_as_an_httpx_timeout(
    kind: Kind, fault_server: FaultServer
) -> None:
    client = async_client(kind, options=POLICY_TIMEOUTS, fake_clock=False)
    [(_, timeout, http_error, url)] = await _async_timeouts(client, fault_server.url)
    assert (timeout, http_error) == (True, True)
    assert url.startswith(f"{fault_server.url}/sleep/3")


STALLED = {"callers": "ReadTimeout", "policy": "AttemptStalledError"}


def _sync_stalled_body(client: httpx.Client, url: str) -> tuple[str, bool]:
    with client, client.stream("GET", f"{url}/stall/3?key=b-{next(_keys)}") as response:
        try:
            list(response.iter_lines())
        except httpx.HTTPError as exc:
            return type(exc).__name__, isinstance(exc, httpx.TimeoutException)
    return "none", False


async def _async_stalled_body(client: httpx.AsyncClient, url: str) -> tuple[str, bool]:
    async with (
        client,
        client.stream("GET", f"{url}/stall/3?key=b-{next(_keys)}") as response,
    ):
        try:
            [line async for line in response.aiter_lines()]
        except httpx.HTTPError as exc:
            return type(exc).__name__, isinstance(exc, httpx.TimeoutException)
    return "none", False


@pytest.mark.parametrize("options", ["callers", "policy"])
@pytest.mark.parametrize("kind", RESILIENT)
def test_sync_a_body_that_stalls_is_caught_as_an_httpx_timeout(
    kind: Kind, options: str, compat_server: CompatServer
) -> None:
    url = compat_server.url
    expected = _sync_stalled_body(sync_client("plain", timeout=HTTPX_TIMEOUT), url)
    assert expected == ("ReadTimeout", True)
    chosen = CALLERS_TIMEOUTS if options == "callers" else POLICY_TIMEOUTS
    client = sync_client(kind, options=chosen, fake_clock=False, timeout=HTTPX_TIMEOUT)
    # The policy names a stalled body for what it is, an httpx timeout still.
    assert _sync_stalled_body(client, url) == (STALLED[options], True)


@pytest.mark.parametrize("options", ["callers", "policy"])
@pytest.mark.parametrize("kind", RESILIENT)
async def test_async_a_body_that_stalls_is_caught_as_an_httpx_timeout(
    kind: Kind, options: str, compat_server: CompatServer
) -> None:
    url = compat_server.url
    plain = async_client("plain", timeout=HTTPX_TIMEOUT)
    assert await _async_stalled_body(plain, url) == ("ReadTimeout", True)
    chosen = CALLERS_TIMEOUTS if options == "callers" else POLICY_TIMEOUTS
    client = async_client(kind, options=chosen, fake_clock=False, timeout=HTTPX_TIMEOUT)
    assert await _async_stalled_body(client, url) == (STALLED[options], True)


def test_sync_a_refused_connection_raises_httpx_connect_error(
    fault_server: FaultServer,
) -> None:
    url = f"{fault_server.refused_url}/healthy"
    for kind in ("plain", *RESILIENT):
        with sync_client(kind) as client, pytest.raises(httpx.ConnectError):
            client.get(url)
