"""`ResilienceErrorMiddleware`, driven through httpx's `ASGITransport`."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

import httpx
import pytest

from http_resilience._asgi import ResilienceErrorMiddleware
from http_resilience._errors import (
    AttemptTimeoutError,
    BrokenCircuitError,
    RateLimitedError,
    ResilienceError,
    ResilienceLayerError,
    TotalTimeoutError,
)

pytestmark = pytest.mark.anyio

Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

SECRET = "Bearer sk-live-5f3a9c"
UNAVAILABLE = "A service this one depends on is unavailable. Try again later."
TIMED_OUT = "A service this one depends on did not answer in time. Try again later."
LIMITED = (
    "This service is at its limit for calls to a service it depends on. "
    "Try again later."
)


class OwnError(ResilienceError):
    """A subclass the middleware does not know by name."""


class Stop(BaseException):
    """Not an `Exception`; asyncio gives KeyboardInterrupt special handling."""


def raising(
    error: BaseException,
) -> Callable[[Message, Receive, Send], Awaitable[None]]:
    async def app(scope: Message, receive: Receive, send: Send) -> None:
        while (await receive()).get("more_body", False):
            pass
        raise error

    return app


async def call(app: Any, method: str = "GET", **kwargs: Any) -> httpx.Response:
    transport = httpx.ASGITransport(app=ResilienceErrorMiddleware(app))
    async with httpx.AsyncClient(transport=transport) as client:
        return await client.request(method, "http://service/stock?id=7", **kwargs)


def assert_no_secret(response: httpx.Response) -> None:
    assert SECRET not in response.text
    assert "inventory" not in response.text
    for name, value in response.headers.multi_items():
        assert SECRET not in name
        assert SECRET not in value


@pytest.mark.parametrize(
    ("error", "status", "title", "detail"),
    [
        (BrokenCircuitError(SECRET), 503, "Service Unavailable", UNAVAILABLE),
        (AttemptTimeoutError(SECRET), 504, "Gateway Timeout", TIMED_OUT),
        (TotalTimeoutError(SECRET), 504, "Gateway Timeout", TIMED_OUT),
        (RateLimitedError(SECRET), 429, "Too Many Requests", LIMITED),
        (ResilienceLayerError(SECRET), 503, "Service Unavailable", UNAVAILABLE),
        (OwnError(SECRET), 503, "Service Unavailable", UNAVAILABLE),
        (ResilienceError(SECRET), 503, "Service Unavailable", UNAVAILABLE),
    ],
    ids=lambda value: type(value).__name__ if isinstance(value, Exception) else None,
)
async def test_each_error_becomes_a_problem_response_without_its_message(
    error: ResilienceError, status: int, title: str, detail: str
) -> None:
    error.add_note(f"client 'inventory' sent Authorization: {SECRET}")
    error.__cause__ = httpx.ConnectError(f"inventory.internal: {SECRET}")
    response = await call(raising(error))
    assert response.status_code == status
    assert response.headers["content-type"] == "application/problem+json"
    assert response.json() == {
        "type": "about:blank",
        "title": title,
        "status": status,
        "detail": detail,
    }
    assert int(response.headers["content-length"]) == len(response.content)
    assert "retry-after" not in response.headers
    assert_no_secret(response)


@pytest.mark.parametrize(
    ("retry_after", "header"),
    [
        (1.2, "2"),
        (3.0, "3"),
        (0.001, "1"),
        (0.0, "0"),
        (-4.0, "0"),
        (86_399.5, "86400"),
        (86_400.5, "86400"),  # at most a day, what readers heed
        (1e12, "86400"),
        (None, None),
        (float("nan"), None),
        (float("inf"), None),
    ],
)
@pytest.mark.parametrize("kind", [RateLimitedError, BrokenCircuitError])
async def test_a_known_wait_becomes_retry_after_in_whole_seconds_rounded_up(
    kind: type[RateLimitedError | BrokenCircuitError],
    retry_after: float | None,
    header: str | None,
) -> None:
    response = await call(raising(kind(SECRET, retry_after=retry_after)))
    assert response.status_code == (429 if kind is RateLimitedError else 503)
    assert response.headers.get("retry-after") == header
    assert response.headers.get_list("retry-after") == ([header] if header else [])
    assert_no_secret(response)


@pytest.mark.parametrize("method", ["POST", "PUT", "HEAD", "DELETE"])
async def test_every_method_is_answered(method: str) -> None:
    response = await call(
        raising(TotalTimeoutError(SECRET)), method, content=b"x" * 70_000
    )
    assert response.status_code == 504


async def test_an_error_after_the_response_started_is_reraised() -> None:
    error = BrokenCircuitError(SECRET)

    async def app(scope: Message, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"half", "more_body": True})
        raise error

    with pytest.raises(BrokenCircuitError) as raised:
        await call(app)
    assert raised.value is error


@pytest.mark.parametrize(
    "error", [ValueError(SECRET), httpx.ConnectError(SECRET), Stop(SECRET)]
)
async def test_other_exceptions_pass_through_untouched(error: BaseException) -> None:
    with pytest.raises(type(error)) as raised:
        await call(raising(error))
    assert raised.value is error


async def test_an_exception_group_passes_through_untouched() -> None:
    # A group is not a ResilienceError, even when it holds only those.
    group = ExceptionGroup("tasks", [BrokenCircuitError(SECRET)])
    with pytest.raises(ExceptionGroup) as raised:
        await call(raising(group))
    assert raised.value is group


async def test_a_response_without_errors_is_passed_on_as_it_is() -> None:
    async def app(scope: Message, receive: Receive, send: Send) -> None:
        headers = [(b"content-type", b"text/plain"), (b"x-stock", b"7")]
        await send({"type": "http.response.start", "status": 201, "headers": headers})
        await send({"type": "http.response.body", "body": b"in ", "more_body": True})
        await send({"type": "http.response.body", "body": b"stock"})

    response = await call(app)
    assert response.status_code == 201
    assert response.text == "in stock"
    assert response.headers["x-stock"] == "7"


async def test_a_5xx_the_app_sends_itself_is_left_alone() -> None:
    async def app(scope: Message, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": 503, "headers": []})
        await send({"type": "http.response.body", "body": b"down for maintenance"})

    response = await call(app)
    assert (response.status_code, response.text) == (503, "down for maintenance")


async def test_other_scopes_pass_through_errors_and_all() -> None:
    seen: list[Message] = []
    error = BrokenCircuitError(SECRET)

    async def app(scope: Message, receive: Receive, send: Send) -> None:
        seen.append(scope)
        await send({"type": "lifespan.startup.complete"})
        raise error

    sent: list[Message] = []

    async def receive() -> Message:
        return {"type": "lifespan.startup"}

    async def send(message: Message) -> None:
        sent.append(message)

    scope: Message = {"type": "lifespan", "asgi": {"version": "3.0"}}
    with pytest.raises(BrokenCircuitError) as raised:
        await ResilienceErrorMiddleware(app)(scope, receive, send)
    assert raised.value is error
    assert seen == [scope]
    assert sent == [{"type": "lifespan.startup.complete"}]


async def test_the_problem_members_come_in_the_rfc_order() -> None:
    response = await call(raising(RateLimitedError(SECRET, retry_after=2)))
    problem = json.loads(response.content)
    assert list(problem) == ["type", "title", "status", "detail"]
    assert response.headers["retry-after"] == "2"


async def test_the_status_is_a_plain_int() -> None:
    response = await call(raising(BrokenCircuitError(SECRET)))
    assert type(response.status_code) is int


async def test_a_websocket_scope_reaches_the_app_as_it_is() -> None:
    calls: list[tuple[Message, Receive, Send]] = []

    async def app(scope: Message, receive: Receive, send: Send) -> None:
        calls.append((scope, receive, send))

    async def receive() -> Message:
        return {"type": "websocket.connect"}

    async def send(message: Message) -> None:
        raise AssertionError("nothing is sent")

    scope: Message = {"type": "websocket", "path": "/feed"}
    await ResilienceErrorMiddleware(app)(scope, receive, send)
    assert calls == [(scope, receive, send)]
