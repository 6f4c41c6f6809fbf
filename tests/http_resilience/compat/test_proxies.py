"""Environment proxies: ``HTTP_PROXY`` and ``NO_PROXY``, honoured as httpx does.

The compatibility server doubles as a forward proxy: a request in absolute
form (``GET http://host/path``) is answered with ``X-Proxied-For`` naming its
target, and one sent direct is echoed. So one target URL tells which way each
client sent it.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.http_resilience.compat.clients import (
    Kind,
    async_client,
    sync_client,
)
from tests.http_resilience.compat.server import CompatServer

pytestmark = pytest.mark.anyio

_PROXY_VARIABLES = ("http_proxy", "https_proxy", "all_proxy", "no_proxy")


@pytest.fixture
def environment(
    monkeypatch: pytest.MonkeyPatch, compat_server: CompatServer
) -> pytest.MonkeyPatch:
    """``HTTP_PROXY`` naming the compatibility server, and no other proxy variable."""
    for name in _PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.upper(), raising=False)
    monkeypatch.setenv("HTTP_PROXY", compat_server.url)
    return monkeypatch


def _way(response: httpx.Response) -> str:
    """``proxy <target>`` or ``direct``."""
    assert response.status_code == 200
    proxied = response.headers.get("x-proxied-for")
    return f"proxy {proxied}" if proxied else "direct"


# (kind, httpx arguments): a client httpx builds its transport for, and ones
# given a transport (httpx then reads no proxy from the environment).
CASES: list[tuple[Kind, str]] = [
    ("factory", "built"),
    ("factory", "no trust_env"),
    ("factory", "given transport"),
    ("transport", "given transport"),
]


def _sync_arguments(how: str) -> dict[str, Any]:
    if how == "no trust_env":
        return {"trust_env": False}
    return {}


def _sync_ways(kind: Kind, how: str, target: str) -> str:
    inner = httpx.HTTPTransport() if how == "given transport" else None
    if kind == "plain" or kind == "factory":
        client = sync_client(kind, inner, **_sync_arguments(how))
    else:
        client = sync_client(kind, httpx.HTTPTransport())
    with client:
        return _way(client.get(target))


async def _async_ways(kind: Kind, how: str, target: str) -> str:
    inner = httpx.AsyncHTTPTransport() if how == "given transport" else None
    if kind == "plain" or kind == "factory":
        client = async_client(kind, inner, **_sync_arguments(how))
    else:
        client = async_client(kind, httpx.AsyncHTTPTransport())
    async with client:
        return _way(await client.get(target))


@pytest.mark.parametrize(("kind", "how"), CASES)
def test_sync_environment_proxies_are_honoured_as_plain_httpx_honours_them(
    kind: Kind, how: str, environment: pytest.MonkeyPatch, compat_server: CompatServer
) -> None:
    target = f"{compat_server.url}/where"
    expected = _sync_ways("plain", how, target)
    assert expected == (f"proxy {target}" if how == "built" else "direct")
    assert _sync_ways(kind, how, target) == expected
    environment.setenv("NO_PROXY", "127.0.0.1")
    assert _sync_ways("plain", how, target) == "direct"
    assert _sync_ways(kind, how, target) == "direct"


@pytest.mark.parametrize(("kind", "how"), CASES)
async def test_async_environment_proxies_are_honoured_as_plain_httpx_honours_them(
    kind: Kind, how: str, environment: pytest.MonkeyPatch, compat_server: CompatServer
) -> None:
    target = f"{compat_server.url}/where"
    expected = await _async_ways("plain", how, target)
    assert expected == (f"proxy {target}" if how == "built" else "direct")
    assert await _async_ways(kind, how, target) == expected
    environment.setenv("NO_PROXY", "127.0.0.1")
    assert await _async_ways("plain", how, target) == "direct"
    assert await _async_ways(kind, how, target) == "direct"
