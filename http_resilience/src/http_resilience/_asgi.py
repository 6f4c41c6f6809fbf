"""An ASGI middleware that answers the pipeline's errors with problem details.

A service that calls other services through `http_resilience` lets a
`ResilienceError` escape its handler; this middleware turns it into an RFC 9457
``application/problem+json`` response its own callers can act on. Pure ASGI: it
needs no web framework.
"""

from __future__ import annotations

import json
import math
from collections.abc import Awaitable, Callable, MutableMapping
from http import HTTPStatus
from typing import Any, Final

from http_resilience._errors import (
    AttemptTimeoutError,
    BrokenCircuitError,
    RateLimitedError,
    ResilienceError,
    TotalTimeoutError,
)
from http_resilience._retry_after import MAX_RETRY_AFTER

__all__ = ["ResilienceErrorMiddleware"]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

_DETAILS: Final = {
    HTTPStatus.SERVICE_UNAVAILABLE: (
        "A service this one depends on is unavailable. Try again later."
    ),
    HTTPStatus.GATEWAY_TIMEOUT: (
        "A service this one depends on did not answer in time. Try again later."
    ),
    HTTPStatus.TOO_MANY_REQUESTS: (
        "This service is at its limit for calls to a service it depends on. "
        "Try again later."
    ),
}


class ResilienceErrorMiddleware:
    """Answers a `ResilienceError` raised by the wrapped app with problem+json.

    The mapping: `BrokenCircuitError` 503, `AttemptTimeoutError` and
    `TotalTimeoutError` 504, `RateLimitedError` 429, any other
    `ResilienceError` 503. When the error knows how long to wait
    (``retry_after``, seconds), the response carries ``Retry-After`` in whole
    seconds, rounded up, and at most a day (what readers, ours included, heed
    at most). The body (RFC 9457) holds ``type``, ``title``,
    ``status`` and a fixed ``detail``: never the exception's message, which
    names clients and hosts.

    An error raised after the app started its response cannot change it, and
    is re-raised; so is every exception that is not a `ResilienceError`.
    Scopes other than ``http`` pass through untouched.

    Args:
        app: The ASGI application to wrap.

    Example:
        >>> import asyncio, httpx
        >>> async def app(scope, receive, send):
        ...     raise RateLimitedError("client 'inventory' is full", retry_after=1.2)
        >>> async def main():
        ...     wrapped = httpx.ASGITransport(app=ResilienceErrorMiddleware(app))
        ...     async with httpx.AsyncClient(transport=wrapped) as client:
        ...         response = await client.get("http://service/stock")
        ...     return response.status_code, response.headers["retry-after"]
        >>> asyncio.run(main())
        (429, '2')
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Run the app; answer a `ResilienceError` raised before it responded."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def watched_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, receive, watched_send)
        except ResilienceError as error:
            if started:
                raise
            await _send_problem(send, error)


def _status(error: ResilienceError) -> HTTPStatus:
    if isinstance(error, AttemptTimeoutError | TotalTimeoutError):
        return HTTPStatus.GATEWAY_TIMEOUT
    if isinstance(error, RateLimitedError):
        return HTTPStatus.TOO_MANY_REQUESTS
    return HTTPStatus.SERVICE_UNAVAILABLE


def _retry_after(error: ResilienceError) -> str | None:
    """Whole seconds to wait, rounded up, at most a day; None when unknown."""
    if not isinstance(error, BrokenCircuitError | RateLimitedError):
        return None
    wait = error.retry_after
    if wait is None or not math.isfinite(wait):
        return None
    return str(min(max(0, math.ceil(wait)), int(MAX_RETRY_AFTER)))


async def _send_problem(send: Send, error: ResilienceError) -> None:
    status = _status(error)
    problem = {
        "type": "about:blank",
        "title": status.phrase,
        "status": status.value,
        "detail": _DETAILS[status],
    }
    body = json.dumps(problem).encode()
    headers = [
        (b"content-type", b"application/problem+json"),
        (b"content-length", str(len(body)).encode()),
    ]
    retry_after = _retry_after(error)
    if retry_after is not None:
        headers.append((b"retry-after", retry_after.encode()))
    start = {"type": "http.response.start", "status": status.value}
    await send({**start, "headers": headers})
    await send({"type": "http.response.body", "body": body})
