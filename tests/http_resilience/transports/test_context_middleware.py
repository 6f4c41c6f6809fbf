"""Between services: `ResilienceContextMiddleware` and nested retries.

A service's handler, behind the middleware, sees its caller's deadline (less
a margin, clamped), its correlation id, and whether the caller is retrying;
its own resilient calls then make one attempt each (``"suppress"``) or retry
and report it (``"report"``). Retried attempts carry ``X-Retry-Attempt``.
The ASGI apps run in process through `httpx.ASGITransport`; the outbound
calls go to a scripted transport on a `FakeClock`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

import httpx
import pytest

from http_resilience import (
    AsyncResilientTransport,
    NestedRetryEvent,
    ResilienceContextMiddleware,
    current_correlation_id,
    remaining_time,
)
from http_resilience._core.nested import caller_attempt, caller_attempt_scope
from http_resilience.testing import FakeClock
from tests.http_resilience.scripted import URL, Events, async_transport, script

pytestmark = pytest.mark.anyio

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]


class Seen:
    """An ASGI app answering 200 that records the context its handler ran in."""

    def __init__(self) -> None:
        self.remaining: float | None = None
        self.attempt: int | None = None
        self.correlation: str | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        self.remaining = remaining_time()
        self.attempt = caller_attempt()
        self.correlation = current_correlation_id()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})


async def call(app: Any, headers: dict[str, str]) -> httpx.Response:
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://service.local"
    ) as client:
        return await client.get("/work", headers=headers)


async def test_the_handler_sees_the_callers_deadline_attempt_and_id() -> None:
    seen = Seen()
    app = ResilienceContextMiddleware(seen, safety_margin=0.1)
    headers = {
        "X-Request-Timeout-Ms": "1500",
        "X-Retry-Attempt": "2",
        "X-Correlation-ID": "order-42",
    }
    assert (await call(app, headers)).status_code == 200
    assert seen.remaining is not None
    assert 1.3 < seen.remaining <= 1.4  # 1.5 s less the 0.1 s margin
    assert (seen.attempt, seen.correlation) == (2, "order-42")
    # Outside the request, none of it is left behind.
    assert (remaining_time(), caller_attempt(), current_correlation_id()) == (
        None,
        None,
        None,
    )


async def test_a_first_attempt_is_no_retry_and_a_long_deadline_is_clamped() -> None:
    seen = Seen()
    app = ResilienceContextMiddleware(seen, max_deadline=5)
    await call(app, {"X-Request-Timeout-Ms": "86400000", "X-Retry-Attempt": "1"})
    assert seen.remaining is not None
    assert seen.remaining <= 5
    assert seen.attempt is None


@pytest.mark.parametrize(
    ("header", "value", "counted"),
    [
        ("X-Request-Timeout-Ms", "soon", "deadline"),
        ("X-Request-Timeout-Ms", "-5", "deadline"),
        ("X-Request-Timeout-Ms", "1.5", "deadline"),
        ("X-Request-Timeout-Ms", "9" * 20, "deadline"),
        ("X-Retry-Attempt", "0", "attempt"),
        ("X-Retry-Attempt", "two", "attempt"),
        ("X-Retry-Attempt", "100000", "attempt"),
        ("X-Correlation-ID", "x" * 200, "correlation"),
    ],
)
async def test_a_malformed_value_is_ignored_and_counted_never_raised(
    header: str, value: str, counted: str
) -> None:
    seen = Seen()
    app = ResilienceContextMiddleware(seen)
    assert (await call(app, {header: value})).status_code == 200
    assert (seen.remaining, seen.attempt, seen.correlation) == (None, None, None)
    assert app.ignored == {counted: 1}


async def test_headers_may_be_renamed_or_not_read() -> None:
    seen = Seen()
    app = ResilienceContextMiddleware(
        seen, deadline_header=None, attempt_header="Grpc-Retry-Attempt"
    )
    await call(app, {"X-Request-Timeout-Ms": "100", "Grpc-Retry-Attempt": "3"})
    assert (seen.remaining, seen.attempt) == (None, 3)
    with pytest.raises(ValueError, match="safety_margin must be"):
        ResilienceContextMiddleware(seen, safety_margin=-1)


async def test_other_scopes_pass_through_untouched() -> None:
    passed: list[str] = []

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        passed.append(scope["type"])

    async def nothing() -> MutableMapping[str, Any]:
        return {}

    async def ignore(message: MutableMapping[str, Any]) -> None:
        return None

    await ResilienceContextMiddleware(app)({"type": "lifespan"}, nothing, ignore)
    assert passed == ["lifespan"]


# --- nested retries ------------------------------------------------------------------


async def send_one(transport: httpx.AsyncBaseTransport) -> httpx.Response:
    return await transport.handle_async_request(httpx.Request("GET", URL))


async def test_retried_attempts_carry_their_number() -> None:
    server = script(503, 503, 200)
    await send_one(async_transport(server, FakeClock()))
    numbers = [request.headers.get("x-retry-attempt") for request in server.requests]
    assert numbers == [None, "2", "3"]
    quiet = script(503, 200)
    await send_one(async_transport(quiet, FakeClock(), detect_nested_retries=False))
    assert [r.headers.get("x-retry-attempt") for r in quiet.requests] == [None, None]


async def test_while_the_caller_retries_a_call_makes_one_attempt() -> None:
    events, server = Events(), script(503)
    transport = async_transport(server, FakeClock(), events=events)
    with caller_attempt_scope(2):
        assert (await send_one(transport)).status_code == 503
    assert server.hits == 1
    assert events.of(NestedRetryEvent) == [
        NestedRetryEvent("orders", "GET", "http://api.example:80", 2, True)
    ]


async def test_report_mode_retries_and_reports() -> None:
    events, server = Events(), script(503, 503, 200)
    transport = async_transport(
        server, FakeClock(), events=events, nested_retries="report"
    )
    with caller_attempt_scope(3):
        assert (await send_one(transport)).status_code == 200
    assert server.hits == 3
    assert [event.suppressed for event in events.of(NestedRetryEvent)] == [
        False,
        False,
    ]


async def test_a_service_behind_the_middleware_does_not_retry_under_its_caller() -> (
    None
):
    # Service B, behind the middleware, calls a dead service C. Its caller is
    # on its second attempt: B's call to C is made once, not four times.
    dead_c = script(503)
    client_to_c = AsyncResilientTransport(
        httpx.MockTransport(dead_c), clock=FakeClock(), name="c"
    )

    async def service_b(scope: Scope, receive: Receive, send: Send) -> None:
        answer = await send_one(client_to_c)
        await send(
            {"type": "http.response.start", "status": answer.status_code, "headers": []}
        )
        await send({"type": "http.response.body", "body": b""})

    app = ResilienceContextMiddleware(service_b)
    assert (await call(app, {"X-Retry-Attempt": "2"})).status_code == 503
    assert dead_c.hits == 1
    assert (await call(app, {})).status_code == 503  # a first attempt: B retries
    assert dead_c.hits == 1 + 4


@pytest.mark.parametrize(
    ("values", "error"),
    [
        ({"deadline_header": 3}, TypeError),
        ({"attempt_header": "X Retry"}, ValueError),
        ({"correlation_header": "X-Id\r\n"}, ValueError),
        ({"max_deadline": float("inf")}, ValueError),
    ],
)
def test_a_bad_setting_is_refused_when_the_middleware_is_built(
    values: dict[str, Any], error: type[Exception]
) -> None:
    with pytest.raises(error):
        ResilienceContextMiddleware(Seen(), **values)
