"""`ResilienceErrorMiddleware`, driven through httpx's `ASGITransport`."""

from __future__ import annotations

import json
import threading
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

import httpx
import pytest

from http_resilience import (
    AttemptTimeoutError,
    BrokenCircuitError,
    RateLimitedError,
    ResilienceError,
    ResilienceErrorMiddleware,
    ResilienceLayerError,
    TotalTimeoutError,
)
from tests.support.fault_server import run_lifespan, serve_app

pytestmark = pytest.mark.anyio

Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

SECRET = "Bearer sk-live-5f3a9c"
UNAVAILABLE = "A service this one depends on is unavailable. Try again later."
TIMED_OUT = "A service this one depends on did not answer in time. Try again later."
BAD_GATEWAY = (
    "A service this one depends on answered badly or not at all. Try again later."
)
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
        (
            RateLimitedError(SECRET, reason="quota"),
            429,
            "Too Many Requests",
            LIMITED,
        ),
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
@pytest.mark.parametrize("kind", ["quota", "circuit"])
async def test_a_known_wait_becomes_retry_after_in_whole_seconds_rounded_up(
    kind: str,
    retry_after: float | None,
    header: str | None,
) -> None:
    error = (
        RateLimitedError(SECRET, retry_after=retry_after, reason="quota")
        if kind == "quota"
        else BrokenCircuitError(SECRET, retry_after=retry_after)
    )
    response = await call(raising(error))
    assert response.status_code == (429 if kind == "quota" else 503)
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
    "error",
    [
        ValueError(SECRET),
        httpx.UnsupportedProtocol(SECRET),  # the service's own bug
        httpx.LocalProtocolError(SECRET),
        httpx.InvalidURL(SECRET),
        Stop(SECRET),
    ],
)
async def test_other_exceptions_pass_through_untouched(error: BaseException) -> None:
    with pytest.raises(type(error)) as raised:
        await call(raising(error))
    assert raised.value is error


# --- the seed's table: who failed decides the status -------------------------------


async def test_a_local_limiter_refusal_is_our_overload_503_with_retry_after() -> None:
    response = await call(raising(RateLimitedError(SECRET)))
    assert response.status_code == 503
    assert response.json()["detail"] == UNAVAILABLE
    assert response.headers["retry-after"] == "1"  # no known wait: a short pause
    waited = await call(raising(RateLimitedError(SECRET, retry_after=4.2)))
    assert (waited.status_code, waited.headers["retry-after"]) == (503, "5")
    assert_no_secret(response)


@pytest.mark.parametrize(
    "error",
    [
        httpx.ConnectError(SECRET),
        httpx.RemoteProtocolError(SECRET),
    ],
    ids=lambda error: type(error).__name__,
)
async def test_a_transport_error_left_after_retries_is_502(error: Exception) -> None:
    response = await call(raising(error))
    assert response.status_code == 502
    assert response.json()["title"] == "Bad Gateway"
    assert response.json()["detail"] == BAD_GATEWAY
    assert "retry-after" not in response.headers
    assert_no_secret(response)


@pytest.mark.parametrize(
    "error",
    [httpx.ReadTimeout(SECRET), httpx.ConnectTimeout(SECRET)],
    ids=lambda error: type(error).__name__,
)
async def test_a_transport_timeout_left_after_retries_is_504(error: Exception) -> None:
    # The transport's own timeout, kept as httpx raised it: the dependency did
    # not answer in time, as when the pipeline's deadline cuts it.
    response = await call(raising(error))
    assert response.status_code == 504
    assert response.json()["title"] == "Gateway Timeout"
    assert "retry-after" not in response.headers
    assert_no_secret(response)


async def test_a_wait_on_our_own_pool_is_503() -> None:
    response = await call(raising(httpx.PoolTimeout(SECRET)))
    assert response.status_code == 503
    assert_no_secret(response)


# --- exception groups ----------------------------------------------------------------


async def test_a_group_of_one_resilience_error_is_answered_as_that_error() -> None:
    # The issue: a notification handler's breaker error, wrapped by `publish`.
    group = ExceptionGroup("handlers", [BrokenCircuitError(SECRET, retry_after=2.0)])
    response = await call(raising(group))
    assert response.status_code == 503
    assert response.headers["retry-after"] == "2"
    assert response.json()["title"] == "Service Unavailable"
    assert_no_secret(response)


@pytest.mark.parametrize(
    ("members", "status", "retry_after"),
    [
        ([TotalTimeoutError(SECRET), httpx.ConnectError(SECRET)], 504, None),
        (
            [
                RateLimitedError(SECRET, retry_after=9.0, reason="quota"),
                TotalTimeoutError(SECRET),
            ],
            429,
            "9",
        ),
        (
            [
                BrokenCircuitError(SECRET, retry_after=2.0),
                RateLimitedError(SECRET, retry_after=30.5, reason="quota"),
            ],
            503,
            "31",
        ),
        (
            [
                BrokenCircuitError(SECRET, retry_after=2.0),
                BrokenCircuitError(SECRET, retry_after=7.5),
                BrokenCircuitError(SECRET),
            ],
            503,
            "8",
        ),
        ([AttemptTimeoutError(SECRET), RateLimitedError(SECRET)], 503, "1"),
    ],
    ids=["504-over-502", "429-over-504", "503-over-429", "longest-wait", "limiter"],
)
async def test_a_group_takes_the_most_conservative_status_and_the_longest_wait(
    members: list[Exception], status: int, retry_after: str | None
) -> None:
    response = await call(raising(ExceptionGroup("handlers", members)))
    assert response.status_code == status
    assert response.headers.get("retry-after") == retry_after
    assert response.json()["status"] == status
    assert_no_secret(response)


async def test_nested_groups_are_answered_when_every_leaf_maps() -> None:
    inner = ExceptionGroup("retry", [BrokenCircuitError(SECRET, retry_after=3.0)])
    group = ExceptionGroup("handlers", [TotalTimeoutError(SECRET), inner])
    response = await call(raising(group))
    assert (response.status_code, response.headers["retry-after"]) == (503, "3")
    assert_no_secret(response)


@pytest.mark.parametrize(
    "group",
    [
        ExceptionGroup("h", [BrokenCircuitError(SECRET), ValueError(SECRET)]),
        ExceptionGroup(
            "h",
            [
                TotalTimeoutError(SECRET),
                ExceptionGroup("inner", [KeyError(SECRET), BrokenCircuitError(SECRET)]),
            ],
        ),
        ExceptionGroup("h", [BrokenCircuitError(SECRET), httpx.InvalidURL(SECRET)]),
        ExceptionGroup("h", [ValueError(SECRET)]),
    ],
    ids=["mixed", "nested-mixed", "self-caused", "unrelated-only"],
)
async def test_a_group_with_any_unrelated_error_is_reraised_whole(
    group: ExceptionGroup[Exception],
) -> None:
    # A resilience error beside a bug is not a dependency outage: the bug
    # decides, and the server answers 500 as for the bug alone.
    with pytest.raises(ExceptionGroup) as raised:
        await call(raising(group))
    assert raised.value is group


async def test_a_group_holding_a_base_exception_is_reraised() -> None:
    group = BaseExceptionGroup("h", [BrokenCircuitError(SECRET), Stop(SECRET)])
    with pytest.raises(BaseExceptionGroup) as raised:
        await call(raising(group))
    assert raised.value is group


async def test_a_group_from_a_real_app_under_uvicorn_is_answered() -> None:
    ready = threading.Event()

    async def app(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            await run_lifespan(receive, send, ready)
            return
        raise ExceptionGroup(
            "handlers",
            [
                BrokenCircuitError(f"inventory {SECRET}", retry_after=2.0),
                AttemptTimeoutError(f"pricing {SECRET}"),
            ],
        )

    middleware = ResilienceErrorMiddleware(app)

    async def served(scope: Any, receive: Any, send: Any) -> None:
        await middleware(scope, receive, send)

    with serve_app(served, ready, name="asgi app") as url:
        async with httpx.AsyncClient() as client:
            response = await client.get(f"{url}/orders/7")
    assert response.status_code == 503
    assert response.headers["retry-after"] == "2"
    assert response.headers["content-type"] == "application/problem+json"
    assert response.json()["detail"] == UNAVAILABLE
    assert_no_secret(response)


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
