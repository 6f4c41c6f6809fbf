"""Redirects: following or not, method rewrites, history, cross-origin auth.

The resilient clients run on `Flaky` handlers, whose first answer to each safe
request is a 503 retried underneath: the redirect chain seen above the
transport must be plain httpx's all the same.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from tests.http_resilience.compat.clients import (
    RESILIENT,
    Flaky,
    Kind,
    async_client,
    echo,
    mock,
    sync_client,
)

pytestmark = pytest.mark.anyio

CODES = (301, 302, 303, 307, 308)
METHODS = ("GET", "POST", "PUT")
BASE = "http://origin.test"


def site(request: httpx.Request) -> httpx.Response:
    """`/redirect/{code}` -> `/target`; `/away` -> another origin; else an echo."""
    path = request.url.path
    if path.startswith("/redirect/"):
        return httpx.Response(
            int(path.rsplit("/", 1)[1]), headers={"location": "/target"}
        )
    if path == "/away":
        return httpx.Response(302, headers={"location": "http://other.test/target"})
    if path == "/twice":
        return httpx.Response(307, headers={"location": "/redirect/308"})
    return echo(request)


Hop = tuple[int, str, str]
Outcome = tuple[int, str, str, str, list[Hop]]


def _outcome(response: httpx.Response) -> Outcome:
    """What the caller sees: the final answer, what reached it, the history."""
    seen: dict[str, Any] = {}
    if response.status_code == 200:
        seen = json.loads(response.text)
    headers: dict[str, str] = dict(seen.get("headers", []))
    return (
        response.status_code,
        seen.get("method", ""),
        seen.get("body", ""),
        headers.get("authorization", ""),
        [(r.status_code, r.request.method, str(r.url)) for r in response.history],
    )


def _sync_follow(client: httpx.Client) -> list[Outcome]:
    with client:
        outcomes = [
            _outcome(client.request(method, f"/redirect/{code}", content=b"data"))
            for code in CODES
            for method in METHODS
        ]
        outcomes.append(_outcome(client.get("/twice")))
        outcomes.append(_outcome(client.get("/away", auth=("user", "secret"))))
        outcomes.append(_outcome(client.get("/redirect/302", auth=("user", "secret"))))
    return outcomes


async def _async_follow(client: httpx.AsyncClient) -> list[Outcome]:
    async with client:
        outcomes = [
            _outcome(await client.request(method, f"/redirect/{code}", content=b"data"))
            for code in CODES
            for method in METHODS
        ]
        outcomes.append(_outcome(await client.get("/twice")))
        outcomes.append(_outcome(await client.get("/away", auth=("user", "secret"))))
        outcomes.append(
            _outcome(await client.get("/redirect/302", auth=("user", "secret")))
        )
    return outcomes


def _check_oracle(outcomes: list[Outcome]) -> None:
    # The facts httpx documents, so a wrong oracle cannot pass either.
    by_request = dict(
        zip([(c, m) for c in CODES for m in METHODS], outcomes, strict=False)
    )
    assert by_request[303, "PUT"][1:3] == ("GET", "")  # 303: GET, body dropped
    assert by_request[302, "POST"][1:3] == ("GET", "")  # 302 POST: GET
    assert by_request[301, "POST"][1:3] == ("GET", "")
    assert by_request[302, "PUT"][1:3] == ("GET", "")  # 302: GET, as browsers do
    assert by_request[301, "PUT"][1:3] == ("PUT", "data")  # 301 rewrites POST only
    assert by_request[307, "POST"][1:3] == ("POST", "data")  # 307/308 keep it
    assert by_request[308, "PUT"][1:3] == ("PUT", "data")
    twice = outcomes[len(CODES) * len(METHODS)]
    assert [hop[0] for hop in twice[4]] == [307, 308]
    away, same = outcomes[-2], outcomes[-1]
    assert away[3] == ""  # Authorization dropped on the way to another origin
    assert same[3].startswith("Basic ")  # and kept within one


@pytest.mark.parametrize("kind", RESILIENT)
def test_sync_redirects_are_followed_as_plain_httpx_follows_them(kind: Kind) -> None:
    def client(of: Kind) -> httpx.Client:
        return sync_client(of, mock(site, of), base_url=BASE, follow_redirects=True)

    expected = _sync_follow(client("plain"))
    _check_oracle(expected)
    flaky = Flaky(site)
    resilient = sync_client(
        kind, httpx.MockTransport(flaky), base_url=BASE, follow_redirects=True
    )
    assert _sync_follow(resilient) == expected
    assert flaky.retried() > len(CODES)  # the 503s were retried underneath


@pytest.mark.parametrize("kind", RESILIENT)
async def test_async_redirects_are_followed_as_plain_httpx_follows_them(
    kind: Kind,
) -> None:
    def client(of: Kind) -> httpx.AsyncClient:
        return async_client(of, mock(site, of), base_url=BASE, follow_redirects=True)

    expected = await _async_follow(client("plain"))
    _check_oracle(expected)
    flaky = Flaky(site)
    resilient = async_client(
        kind, httpx.MockTransport(flaky), base_url=BASE, follow_redirects=True
    )
    assert await _async_follow(resilient) == expected
    assert flaky.retried() > len(CODES)


NotFollowed = tuple[int, bool, str, str, bool]


def _not_followed(response: httpx.Response) -> NotFollowed:
    following = response.next_request
    assert following is not None
    return (
        response.status_code,
        response.has_redirect_location,
        following.method,
        str(following.url),
        response.is_redirect,
    )


@pytest.mark.parametrize("kind", RESILIENT)
def test_sync_a_redirect_not_followed_is_handed_back_as_plain_httpx_does(
    kind: Kind,
) -> None:
    def run(of: Kind) -> list[NotFollowed]:
        with sync_client(of, mock(site, of), base_url=BASE) as client:
            return [
                _not_followed(client.request(method, f"/redirect/{code}"))
                for code in CODES
                for method in METHODS
            ]

    expected = run("plain")
    assert expected[0] == (301, True, "GET", f"{BASE}/target", True)
    assert run(kind) == expected


@pytest.mark.parametrize("kind", RESILIENT)
async def test_async_a_redirect_not_followed_is_handed_back_as_plain_httpx_does(
    kind: Kind,
) -> None:
    async def run(of: Kind) -> list[NotFollowed]:
        async with async_client(of, mock(site, of), base_url=BASE) as client:
            return [
                _not_followed(await client.request(method, f"/redirect/{code}"))
                for code in CODES
                for method in METHODS
            ]

    expected = await run("plain")
    assert expected[-1] == (308, True, "PUT", f"{BASE}/target", True)
    assert await run(kind) == expected
