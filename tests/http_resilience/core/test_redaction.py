"""No secret of a request reaches a log record, an exception, or an event.

Sentinels are planted in ``Authorization``, ``Cookie``, ``X-Api-Key``, the URL's
userinfo and its query; the failure scenarios run; then every log record (with
any exception it carries), every raised exception with its whole chain, and
every event is searched for them.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import traceback
from collections.abc import Awaitable, Iterator

import httpx
import pytest
from anyio.lowlevel import checkpoint

from http_resilience import (
    AsyncResilientTransport,
    HttpEvent,
    HttpResilienceOptions,
    ResilientTransport,
)
from http_resilience.testing import EventRecorder, FakeClock
from tests.http_resilience._support.scripted import Reply, script

pytestmark = pytest.mark.anyio

SECRETS = {
    "authorization": "sentinel-authorization-4f1c",
    "cookie": "sentinel-cookie-9a2e",
    "api_key": "sentinel-api-key-77d0",
    "password": "sentinel-password-c3b8",
    "query": "sentinel-query-e615",
}
HEADERS = {
    "Authorization": f"Bearer {SECRETS['authorization']}",
    "Cookie": f"session={SECRETS['cookie']}",
    "X-Api-Key": SECRETS["api_key"],
}


def url(base: str) -> str:
    host = base.removeprefix("http://")
    return f"http://admin:{SECRETS['password']}@{host}/orders?token={SECRETS['query']}"


@pytest.fixture
def refused_port() -> Iterator[int]:
    """A port bound but not listening: connecting to it is refused."""
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        yield held.getsockname()[1]


class Evidence:
    def __init__(self) -> None:
        self.events = EventRecorder[HttpEvent]()
        self.failures: list[BaseException] = []

    def text(self, caplog: pytest.LogCaptureFixture) -> str:
        parts = [caplog.text]
        parts += [record.getMessage() for record in caplog.records]
        parts += [repr(record.args) for record in caplog.records]
        parts += [repr(event) for event in self.events.events]
        for failure in self.failures:
            parts.append("".join(traceback.format_exception(failure)))
            parts.append(repr(failure))
        return "\n".join(parts)


async def attempt(evidence: Evidence, call: Awaitable[httpx.Response]) -> None:
    try:
        response = await call
        await response.aread()
    except Exception as failure:
        evidence.failures.append(failure)


def options(**values: object) -> HttpResilienceOptions:
    return HttpResilienceOptions.model_validate({"base_delay": 0, **values})


@pytest.mark.asyncio_only("the test itself uses asyncio.Event, asyncio.create_task")
async def test_no_secret_leaks_from_any_failure_scenario(
    caplog: pytest.LogCaptureFixture, refused_port: int
) -> None:
    caplog.set_level(logging.DEBUG, logger="http_resilience")
    evidence = Evidence()
    clock = FakeClock()
    target = url("http://api.example")

    def client(handler: object, **values: object) -> httpx.AsyncClient:
        inner = (
            handler
            if isinstance(handler, httpx.AsyncBaseTransport)
            else httpx.MockTransport(handler)  # type: ignore[arg-type]
        )
        transport = AsyncResilientTransport(
            inner,
            options=options(**values),
            name="billing",
            clock=clock,
            listeners=[evidence.events],
        )
        return httpx.AsyncClient(transport=transport, headers=HEADERS)

    async def slow(request: httpx.Request) -> httpx.Response:
        await clock.sleep(11)
        return httpx.Response(200)

    async def hanging(request: httpx.Request) -> httpx.Response:
        await asyncio.Event().wait()
        raise AssertionError("unreachable")  # pragma: no cover

    scenarios: list[tuple[object, dict[str, object], str]] = [
        (script(503), {}, target),
        (script(Reply(429, {"Retry-After": "1"}), 500, 200), {}, target),
        (script(httpx.ConnectError("refused")), {}, target),
        (slow, {}, target),
        (hanging, {"attempt_timeout": "1ms"}, target),
        (script(503), {"minimum_throughput": 1, "max_retry_attempts": 0}, target),
        (
            httpx.AsyncHTTPTransport(),
            {},
            url(f"http://127.0.0.1:{refused_port}"),
        ),
    ]
    for handler, values, address in scenarios:
        async with client(handler, **values) as http:
            await attempt(evidence, http.get(address))
            await attempt(evidence, http.post(address, json={"secret": 1}))
            await attempt(evidence, http.get(address))  # breaker open?

    # The limiter, and a second resilience layer.
    release = asyncio.Event()

    async def held(request: httpx.Request) -> httpx.Response:
        await release.wait()
        return httpx.Response(200)

    async with client(held, concurrency_limit=1) as http:
        first = asyncio.create_task(http.get(target))
        await checkpoint()
        await attempt(evidence, http.get(target))
        release.set()
        await first
    inner = AsyncResilientTransport(httpx.MockTransport(script(200)), name="inner")

    class Hiding(httpx.AsyncBaseTransport):
        async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
            return await inner.handle_async_request(request)

    async with client(Hiding()) as http:
        await attempt(evidence, http.get(target))

    kinds = {type(failure).__name__ for failure in evidence.failures}
    assert kinds >= {
        "ConnectError",
        "AttemptTimeoutError",
        "BrokenCircuitError",
        "RateLimitedError",
        "ResilienceLayerError",
    }
    assert {type(event).__name__ for event in evidence.events.events} >= {
        "AttemptEvent",
        "RetryEvent",
        "BreakerEvent",
        "RejectionEvent",
        "TimeoutEvent",
    }
    text = evidence.text(caplog)
    assert "api.example" in text  # the host is there: the search is real
    for name, secret in SECRETS.items():
        assert secret not in text, name


def test_no_secret_leaks_from_the_sync_transport(
    caplog: pytest.LogCaptureFixture, refused_port: int
) -> None:
    caplog.set_level(logging.DEBUG, logger="http_resilience")
    events = EventRecorder[HttpEvent]()
    failures: list[BaseException] = []
    transport = ResilientTransport(
        options=options(minimum_throughput=2, max_retry_attempts=1),
        name="billing",
        clock=FakeClock(),
        listeners=[events],
    )
    with httpx.Client(transport=transport, headers=HEADERS) as http:
        for _ in range(3):
            try:
                http.get(url(f"http://127.0.0.1:{refused_port}"))
            except Exception as failure:
                failures.append(failure)
    assert [type(f).__name__ for f in failures] == [
        "ConnectError",
        "BrokenCircuitError",
        "BrokenCircuitError",
    ]
    parts = [caplog.text, *(repr(event) for event in events.events)]
    parts += ["".join(traceback.format_exception(f)) for f in failures]
    text = "\n".join(parts)
    assert "127.0.0.1" in text
    for name, secret in SECRETS.items():
        assert secret not in text, name
