"""Admission control in front of a real server: uvicorn on 127.0.0.1, real httpx.

The handler has a fixed capacity (four at a time, a short service time each:
beyond four, requests queue inside it and latency grows with concurrency),
behind `AdmissionMiddleware`. A flood of bounded concurrent requests gets
answers only: 200, or 503 problem+json with ``Retry-After``, none hung. With
a partition read from the identity an authentication middleware verified, a
tenant that floods is answered 429 over its share while a second tenant is
served throughout. Everything is bounded by counts and generous timeouts;
nothing asserts a duration.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Awaitable, Callable, Hashable, MutableMapping
from typing import Any

import anyio
import httpx
import pytest

from http_resilience import AdaptiveLimiterOptions, SystemClock
from http_resilience.asgi import AdmissionMiddleware
from tests.support.fault_server import run_lifespan, serve_app

pytestmark = pytest.mark.anyio

Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

CAPACITY = 4
SERVICE_TIME = 0.02  # seconds per request inside the handler's capacity
CONNECTIONS = 16  # concurrent requests of the flood (these machines: 2 cores)
PER_WORKER = 20
TIMEOUT = httpx.Timeout(30.0)
BOUND = 120.0  # seconds: the whole flood, far beyond what it takes
TOKENS = {"hog-token": "hog", "quiet-token": "quiet"}


class Service:
    """A handler with fixed capacity: four at a time, the others wait for one."""

    def __init__(self) -> None:
        self.started = threading.Event()
        self.served = 0
        self._capacity: anyio.Semaphore | None = None
        self._clock = SystemClock()

    async def __call__(self, scope: Message, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await run_lifespan(receive, send, self.started)  # type: ignore[arg-type]
            return
        if self._capacity is None:  # made on the server's own loop
            self._capacity = anyio.Semaphore(CAPACITY)
        async with self._capacity:
            await self._clock.sleep(SERVICE_TIME)
        self.served += 1
        body = b"ok"
        headers = [(b"content-length", str(len(body)).encode())]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": body})


class Authentication:
    """Verifies the bearer token and puts the caller's tenant in the scope."""

    def __init__(self, app: Callable[[Message, Receive, Send], Awaitable[None]]):
        self.app = app

    async def __call__(self, scope: Message, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            headers = dict(scope["headers"])
            token = headers.get(b"authorization", b"").removeprefix(b"Bearer ")
            scope.setdefault("state", {})["tenant"] = TOKENS.get(token.decode())
        await self.app(scope, receive, send)


def verified_tenant(scope: MutableMapping[str, Any]) -> Hashable | None:
    tenant: str | None = scope.get("state", {}).get("tenant")
    return tenant


async def flood(
    url: str, workers: int, per_worker: int, token: str | None = None
) -> list[httpx.Response]:
    """`workers` concurrent callers, `per_worker` requests each, one after another."""
    answers: list[httpx.Response] = []
    headers = {} if token is None else {"Authorization": f"Bearer {token}"}
    limits = httpx.Limits(max_connections=workers, max_keepalive_connections=workers)
    async with httpx.AsyncClient(timeout=TIMEOUT, limits=limits) as client:

        async def worker() -> None:
            for _ in range(per_worker):
                answers.append(await client.get(f"{url}/work", headers=headers))

        async with anyio.create_task_group() as group:
            for _ in range(workers):
                group.start_soon(worker)
    return answers


def assert_refusal(response: httpx.Response, status: int) -> None:
    assert response.status_code == status
    assert response.headers["content-type"] == "application/problem+json"
    assert int(response.headers["retry-after"]) >= 1
    assert response.json()["status"] == status


async def test_a_flood_gets_200_or_503_with_retry_after_and_none_hangs() -> None:
    service = Service()
    admitted = AdmissionMiddleware(
        service,
        limiter=AdaptiveLimiterOptions(initial_limit=8, max_limit=8, queue_limit=2),
    )
    served: Any = admitted  # the fault server's ASGI types are narrower (dicts)
    with serve_app(served, service.started, name="admission service") as url:
        with anyio.fail_after(BOUND):
            answers = await flood(url, CONNECTIONS, PER_WORKER)
    statuses = Counter(response.status_code for response in answers)
    assert sum(statuses.values()) == CONNECTIONS * PER_WORKER
    assert set(statuses) == {200, 503}
    for response in answers:
        if response.status_code == 503:
            assert_refusal(response, 503)
        else:
            assert response.text == "ok"
    health = admitted.health()
    assert health.overloaded == statuses[503]
    assert service.served == statuses[200]
    assert (health.in_use, health.queued) == (0, 0)


async def test_a_tenant_that_floods_gets_429_while_another_is_served() -> None:
    service = Service()
    admitted = AdmissionMiddleware(
        service,
        # At least 4 permits, so the quiet tenant's one request always fits
        # beside the hog's share (at most half); no queue.
        limiter=AdaptiveLimiterOptions(min_limit=4, initial_limit=8, max_limit=8),
        partition=verified_tenant,
    )
    served: Any = Authentication(admitted)
    with serve_app(served, service.started, name="tenant service") as url:
        hog: list[httpx.Response] = []
        quiet: list[httpx.Response] = []

        async def hog_floods() -> None:
            hog.extend(await flood(url, 12, PER_WORKER, "hog-token"))

        async def quiet_calls() -> None:
            quiet.extend(await flood(url, 1, PER_WORKER * 2, "quiet-token"))

        with anyio.fail_after(BOUND):
            async with anyio.create_task_group() as group:
                group.start_soon(hog_floods)
                group.start_soon(quiet_calls)
    hogged = Counter(response.status_code for response in hog)
    assert sum(hogged.values()) == 12 * PER_WORKER
    assert set(hogged) == {200, 429}
    for response in hog:
        if response.status_code == 429:
            assert_refusal(response, 429)
    assert [response.status_code for response in quiet] == [200] * (PER_WORKER * 2)
    health = admitted.health()
    assert health.over_share == hogged[429]
    assert health.overloaded == 0
    assert (health.in_use, health.partitions) == (0, 0)
