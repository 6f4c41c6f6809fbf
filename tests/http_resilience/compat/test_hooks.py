"""Event hooks: called once per request the client sends, however often we retry.

httpx calls a request hook before it hands the request to the transport and a
response hook when the transport answers; our retries run inside the
transport. So the hooks see the caller's request and the final answer, once
each per hop, never the attempts a retry superseded: that is what plain httpx
shows against a server that answered at once, and what we assert.
"""

from __future__ import annotations

import httpx
import pytest

from tests.http_resilience.compat.clients import (
    RESILIENT,
    Flaky,
    Kind,
    async_client,
    sync_client,
)

pytestmark = pytest.mark.anyio

BASE = "http://hooks.test"


def server(request: httpx.Request) -> httpx.Response:
    if request.url.path == "/moved":
        return httpx.Response(307, headers={"location": "/items"})
    if request.url.path == "/down":
        return httpx.Response(503, text="down")
    return httpx.Response(200, text="items")


Record = list[tuple[str, ...]]


def _sync_run(client: httpx.Client, record: Record) -> Record:
    with client:
        client.get("/items")
        client.get("/moved")
        with pytest.raises(httpx.HTTPStatusError) as raised:
            client.get("/down")
        record.append(("raised", str(raised.value)))
    return record


async def _async_run(client: httpx.AsyncClient, record: Record) -> Record:
    async with client:
        await client.get("/items")
        await client.get("/moved")
        with pytest.raises(httpx.HTTPStatusError) as raised:
            await client.get("/down")
        record.append(("raised", str(raised.value)))
    return record


def _sync_hooks(record: Record) -> dict[str, list[object]]:
    def on_request(request: httpx.Request) -> None:
        record.append(("request", request.method, request.url.path))

    def on_response(response: httpx.Response) -> None:
        # Hooks may read the body, as httpx's docs show.
        response.read()
        record.append(("response", str(response.status_code), response.text))
        if response.is_error:
            response.raise_for_status()

    return {"request": [on_request], "response": [on_response]}


def _async_hooks(record: Record) -> dict[str, list[object]]:
    async def on_request(request: httpx.Request) -> None:
        record.append(("request", request.method, request.url.path))

    async def on_response(response: httpx.Response) -> None:
        await response.aread()
        record.append(("response", str(response.status_code), response.text))
        if response.is_error:
            response.raise_for_status()

    return {"request": [on_request], "response": [on_response]}


EXPECTED: Record = [
    ("request", "GET", "/items"),
    ("response", "200", "items"),
    ("request", "GET", "/moved"),
    ("response", "307", ""),
    ("request", "GET", "/items"),
    ("response", "200", "items"),
    ("request", "GET", "/down"),
    ("response", "503", "down"),
    (
        "raised",
        "Server error '503 Service Unavailable' for url 'http://hooks.test/down'\n"
        "For more information check: "
        "https://developer.mozilla.org/en-US/docs/Web/HTTP/Status/503",
    ),
]


def _run_sync(kind: Kind, transport: httpx.MockTransport) -> Record:
    record: Record = []
    client = sync_client(
        kind,
        transport,
        base_url=BASE,
        follow_redirects=True,
        event_hooks=_sync_hooks(record),
    )
    return _sync_run(client, record)


async def _run_async(kind: Kind, transport: httpx.MockTransport) -> Record:
    record: Record = []
    client = async_client(
        kind,
        transport,
        base_url=BASE,
        follow_redirects=True,
        event_hooks=_async_hooks(record),
    )
    return await _async_run(client, record)


@pytest.mark.parametrize("kind", RESILIENT)
def test_sync_hooks_see_each_request_once_though_we_retry(kind: Kind) -> None:
    assert _run_sync("plain", httpx.MockTransport(server)) == EXPECTED
    flaky = Flaky(server)
    assert _run_sync(kind, httpx.MockTransport(flaky)) == EXPECTED
    # /items twice (the second after a redirect is the same request) and /moved
    # met a 503 first; /down answered 503 four times, its last one handed back.
    assert flaky.retried() == 3
    assert [r.url.path for r in flaky.attempts].count("/down") == 4


@pytest.mark.parametrize("kind", RESILIENT)
async def test_async_hooks_see_each_request_once_though_we_retry(kind: Kind) -> None:
    assert await _run_async("plain", httpx.MockTransport(server)) == EXPECTED
    flaky = Flaky(server)
    assert await _run_async(kind, httpx.MockTransport(flaky)) == EXPECTED
    assert flaky.retried() == 3
    assert [r.url.path for r in flaky.attempts].count("/down") == 4
