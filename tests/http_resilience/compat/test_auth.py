"""Auth flows: BasicAuth, DigestAuth's challenge, a generator flow reading the body.

httpx runs auth flows in the client, above the transport: the resilient
clients, retrying 503s underneath (`Flaky`), must show the same exchange.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Generator

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

URL = "http://auth.test"
REALM, NONCE = "compat", "5f1c0a"


def _md5(text: str) -> str:
    return hashlib.md5(text.encode()).hexdigest()


def _digest_ok(request: httpx.Request) -> bool:
    """Whether the request answers the challenge for user/secret (RFC 7616, MD5)."""
    header = request.headers.get("authorization", "")
    if not header.startswith("Digest "):
        return False
    fields = dict(
        part.strip().split("=", 1) for part in header[len("Digest ") :].split(",")
    )
    value = {name: raw.strip('"') for name, raw in fields.items()}
    first = _md5(f"user:{REALM}:secret")
    second = _md5(f"{request.method}:{value['uri']}")
    expected = _md5(
        f"{first}:{NONCE}:{value['nc']}:{value['cnonce']}:{value['qop']}:{second}"
    )
    return bool(value["response"] == expected and value["username"] == "user")


def server(request: httpx.Request) -> httpx.Response:
    """``/basic``, ``/digest`` and ``/token`` guard the same answer three ways."""
    header = request.headers.get("authorization", "")
    if request.url.path == "/basic":
        ok = header == "Basic " + base64.b64encode(b"user:secret").decode()
        return httpx.Response(200 if ok else 401, text="basic")
    if request.url.path == "/digest":
        if _digest_ok(request):
            return httpx.Response(200, text="digest")
        challenge = (
            f'Digest realm="{REALM}", nonce="{NONCE}", qop="auth", algorithm=MD5'
        )
        return httpx.Response(401, headers={"www-authenticate": challenge})
    if header == "Bearer t-1":
        return httpx.Response(200, text="token")
    return httpx.Response(401, json={"token": "t-1"})


class TokenAuth(httpx.Auth):
    """A flow that reads the 401's body for the token to send next."""

    requires_response_body = True

    def auth_flow(
        self, request: httpx.Request
    ) -> Generator[httpx.Request, httpx.Response, None]:
        response = yield request
        if response.status_code == 401:
            request.headers["authorization"] = f"Bearer {response.json()['token']}"
            yield request


Exchange = tuple[int, str, list[int]]


def _exchange(response: httpx.Response) -> Exchange:
    return (
        response.status_code,
        response.text,
        [r.status_code for r in response.history],
    )


def _sync_flows(client: httpx.Client) -> list[Exchange]:
    with client:
        return [
            _exchange(client.get("/basic", auth=httpx.BasicAuth("user", "secret"))),
            _exchange(client.get("/basic", auth=("user", "wrong"))),
            _exchange(client.get("/digest", auth=httpx.DigestAuth("user", "secret"))),
            _exchange(client.get("/digest", auth=httpx.DigestAuth("user", "wrong"))),
            _exchange(client.get("/token", auth=TokenAuth())),
        ]


async def _async_flows(client: httpx.AsyncClient) -> list[Exchange]:
    async with client:
        digest = httpx.DigestAuth("user", "secret")
        return [
            _exchange(await client.get("/basic", auth=("user", "secret"))),
            _exchange(await client.get("/basic", auth=("user", "wrong"))),
            _exchange(await client.get("/digest", auth=digest)),
            _exchange(await client.get("/digest", auth=httpx.DigestAuth("u", "x"))),
            _exchange(await client.get("/token", auth=TokenAuth())),
        ]


EXPECTED: list[Exchange] = [
    (200, "basic", []),
    (401, "basic", []),
    (200, "digest", [401]),  # the challenge, then the answer
    (401, "", [401]),
    (200, "token", [401]),
]


@pytest.mark.parametrize("kind", RESILIENT)
def test_sync_auth_flows_run_as_on_plain_httpx(kind: Kind) -> None:
    plain = sync_client("plain", httpx.MockTransport(server), base_url=URL)
    assert _sync_flows(plain) == EXPECTED
    flaky = Flaky(server)
    client = sync_client(kind, httpx.MockTransport(flaky), base_url=URL)
    assert _sync_flows(client) == EXPECTED
    # Each credential met a 503 first, retried underneath with the same header.
    assert flaky.retried() == 7


@pytest.mark.parametrize("kind", RESILIENT)
async def test_async_auth_flows_run_as_on_plain_httpx(kind: Kind) -> None:
    plain = async_client("plain", httpx.MockTransport(server), base_url=URL)
    assert await _async_flows(plain) == EXPECTED
    flaky = Flaky(server)
    client = async_client(kind, httpx.MockTransport(flaky), base_url=URL)
    assert await _async_flows(client) == EXPECTED
    assert flaky.retried() == 7


def test_the_token_server_reads_json() -> None:
    # Guards the scenario: the 401 the flow reads carries its token.
    assert json.loads(server(httpx.Request("GET", URL)).text) == {"token": "t-1"}
