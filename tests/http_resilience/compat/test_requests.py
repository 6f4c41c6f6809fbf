"""What a request carries: extensions, cookies, params and headers, bodies; and
`raise_for_status` on what comes back.

The resilient clients run on `Flaky` handlers (a 503 first, retried
underneath) and must send, and hand back, what plain httpx does.
"""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any, cast

import httpx
import pytest

from http_resilience import HttpResilienceOptions
from tests.http_resilience.compat.clients import (
    RESILIENT,
    Flaky,
    Kind,
    async_client,
    echo,
    sync_client,
)

pytestmark = pytest.mark.anyio

BASE = "http://requests.test/api/"
# Our clients' own timeouts off: the caller's httpx timeouts reach the transport.
CALLERS_TIMEOUTS = HttpResilienceOptions(
    base_delay=timedelta(0), own_transport_timeout=False
)


def server(request: httpx.Request) -> httpx.Response:
    """Echoes, and answers what the scenarios ask of it by path."""
    path = request.url.path
    if path.endswith("/login"):
        return httpx.Response(
            200, headers={"set-cookie": "session=s-1; Path=/api"}, text="in"
        )
    if path.endswith("/extensions"):
        seen = {
            name: value
            for name, value in request.extensions.items()
            if name in ("timeout", "compat")
        }
        return httpx.Response(200, json=seen)
    if "/status/" in path:
        return httpx.Response(int(path.rsplit("/", 1)[1]), text="status")
    return echo(request)


def _sent(response: httpx.Response) -> dict[str, Any]:
    document: dict[str, Any] = json.loads(response.text)
    return document


CLIENT_ARGUMENTS: dict[str, Any] = {
    "base_url": BASE,
    "params": {"client": "c", "shared": "from-client"},
    "headers": {"x-client": "c", "x-shared": "from-client"},
    "cookies": {"jar": "j-1"},
}


def _sync_scenario(client: httpx.Client) -> list[object]:
    with client:
        merged = client.get(
            "items",
            params={"request": "r", "shared": "from-request"},
            headers={"x-request": "r", "x-shared": "from-request"},
        )
        client.get("login")
        with_cookie = client.get("items/7")
        bodies = [
            client.put("items/7", json={"stock": 7}),
            client.put("items/7", data={"stock": "7"}),
            client.put("items/7", content=b"\x00raw"),
            client.delete("items/7"),
        ]
        extensions = client.get(
            "extensions", timeout=httpx.Timeout(1.5), extensions={"compat": "x"}
        )
        statuses: list[object] = []
        for code in (200, 404, 503):
            response = client.get(f"status/{code}")
            try:
                statuses.append(response.raise_for_status().status_code)
            except httpx.HTTPStatusError as exc:
                same = exc.response is response and exc.request is response.request
                statuses.append((str(exc), same))
        return [
            _sent(merged),
            _sent(with_cookie),
            dict(client.cookies),
            [_sent(response) for response in bodies],
            extensions.json(),
            statuses,
        ]


async def _async_scenario(client: httpx.AsyncClient) -> list[object]:
    async with client:
        merged = await client.get(
            "items",
            params={"request": "r", "shared": "from-request"},
            headers={"x-request": "r", "x-shared": "from-request"},
        )
        await client.get("login")
        with_cookie = await client.get("items/7")
        bodies = [
            await client.put("items/7", json={"stock": 7}),
            await client.put("items/7", data={"stock": "7"}),
            await client.put("items/7", content=b"\x00raw"),
            await client.delete("items/7"),
        ]
        extensions = await client.get(
            "extensions", timeout=httpx.Timeout(1.5), extensions={"compat": "x"}
        )
        statuses: list[object] = []
        for code in (200, 404, 503):
            response = await client.get(f"status/{code}")
            try:
                statuses.append(response.raise_for_status().status_code)
            except httpx.HTTPStatusError as exc:
                same = exc.response is response and exc.request is response.request
                statuses.append((str(exc), same))
        return [
            _sent(merged),
            _sent(with_cookie),
            dict(client.cookies),
            [_sent(response) for response in bodies],
            extensions.json(),
            statuses,
        ]


def _check_oracle(outcome: list[object]) -> None:
    merged = cast("dict[str, Any]", outcome[0])
    with_cookie = cast("dict[str, Any]", outcome[1])
    jar, extensions = outcome[2], outcome[4]
    statuses = cast("list[object]", outcome[5])
    assert merged["url"] == (
        "http://requests.test/api/items?client=c&shared=from-request&request=r"
    )
    headers: dict[str, str] = dict(merged["headers"])
    assert (headers["x-client"], headers["x-shared"]) == ("c", "from-request")
    cookie: str = dict(with_cookie["headers"])["cookie"]
    assert sorted(cookie.split("; ")) == ["jar=j-1", "session=s-1"]
    assert jar == {"jar": "j-1", "session": "s-1"}
    assert extensions == {
        "timeout": {"connect": 1.5, "read": 1.5, "write": 1.5, "pool": 1.5},
        "compat": "x",
    }
    assert statuses[0] == 200
    failed = statuses[1]
    assert isinstance(failed, tuple)
    message, same = cast("tuple[str, bool]", failed)
    assert message.startswith("Client error '404 Not Found'")
    assert same is True


@pytest.mark.parametrize("kind", RESILIENT)
def test_sync_requests_carry_what_plain_httpx_sends(kind: Kind) -> None:
    plain = sync_client("plain", httpx.MockTransport(server), **CLIENT_ARGUMENTS)
    expected = _sync_scenario(plain)
    _check_oracle(expected)
    flaky = Flaky(server)
    client = sync_client(
        kind,
        httpx.MockTransport(flaky),
        options=CALLERS_TIMEOUTS,
        **CLIENT_ARGUMENTS,
    )
    assert _sync_scenario(client) == expected
    assert flaky.retried() == 9


@pytest.mark.parametrize("kind", RESILIENT)
async def test_async_requests_carry_what_plain_httpx_sends(kind: Kind) -> None:
    plain = async_client("plain", httpx.MockTransport(server), **CLIENT_ARGUMENTS)
    expected = await _async_scenario(plain)
    _check_oracle(expected)
    flaky = Flaky(server)
    client = async_client(
        kind,
        httpx.MockTransport(flaky),
        options=CALLERS_TIMEOUTS,
        **CLIENT_ARGUMENTS,
    )
    assert await _async_scenario(client) == expected
    assert flaky.retried() == 9
