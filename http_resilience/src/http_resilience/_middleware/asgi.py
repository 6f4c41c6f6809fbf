"""An ASGI middleware that answers the pipeline's errors with problem details.

A service that calls other services through `http_resilience` lets a
`ResilienceError` escape its handler, or the `httpx.HTTPStatusError` of
``raise_for_status()`` on an answer the client gave up on; this middleware
turns it into an RFC 9457 ``application/problem+json`` response its own
callers can act on. Pure ASGI: it needs no web framework.
"""

from __future__ import annotations

import json
import math
from http import HTTPStatus
from typing import Final, cast

import httpx

from http_resilience._core.classify import (
    FINAL_MARK,
    RETRY_AFTER_STATUSES,
    SELF_CAUSED_EXCEPTIONS,
)
from http_resilience._core.clock import utc_now
from http_resilience._core.errors import (
    AttemptTimeoutError,
    BrokenCircuitError,
    RateLimitedError,
    ResilienceError,
    TotalTimeoutError,
)
from http_resilience._core.retry_after import MAX_RETRY_AFTER, parse_retry_after
from http_resilience._middleware.stack import entered
from http_resilience._middleware.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["ResilienceErrorMiddleware", "problem_for", "send_problem"]


_DETAILS: Final = {
    HTTPStatus.SERVICE_UNAVAILABLE: (
        "A service this one depends on is unavailable. Try again later."
    ),
    HTTPStatus.BAD_GATEWAY: (
        "A service this one depends on answered badly or not at all. Try again later."
    ),
    HTTPStatus.GATEWAY_TIMEOUT: (
        "A service this one depends on did not answer in time. Try again later."
    ),
    HTTPStatus.TOO_MANY_REQUESTS: (
        "This service is at its limit for calls to a service it depends on. "
        "Try again later."
    ),
}

_CAUTION: Final = (
    HTTPStatus.SERVICE_UNAVAILABLE,
    HTTPStatus.TOO_MANY_REQUESTS,
    HTTPStatus.GATEWAY_TIMEOUT,
    HTTPStatus.BAD_GATEWAY,
)
"""The statuses from the most conservative (the caller should hold back most)
to the least; a group of errors is answered with the first its members reach."""

_OVERLOAD_WAIT: Final = 1.0
"""The ``Retry-After`` of a local limiter's refusal that knows no wait: a slot
frees as soon as a call in flight ends."""


class ResilienceErrorMiddleware:
    """Answers the pipeline's errors raised by the wrapped app with problem+json.

    The mapping follows who failed:

    - `BrokenCircuitError`, and any `ResilienceError` not named here: 503;
    - `AttemptTimeoutError` and `TotalTimeoutError`: 504; so is an
      `httpx.TimeoutException` the transport raised itself, before the
      pipeline's deadline (kept as httpx raised it);
    - `RateLimitedError` of the local limiter (``reason="concurrency_limit"``):
      503, this service's own overload, with ``Retry-After`` (1 s when the
      error knows no wait); of a published quota (``reason="quota"``): 429;
    - `httpx.TransportError` left after the retries: 502; but
      `httpx.PoolTimeout` (this service's own pool is full) is 503, and an
      error the client caused itself (`httpx.LocalProtocolError`,
      `httpx.UnsupportedProtocol`) is this service's bug: re-raised;
    - `httpx.HTTPStatusError` (``response.raise_for_status()``) on an answer
      the client gave up on (its ``extensions`` hold ``resilience_final``:
      the client retried the failure as far as its policy goes, or refused
      to retry it, for the retry budget, the deadline, a ``Retry-After`` past
      it, a service further in or a caller that retries already). That is an
      outage of the dependency, not a bug: its 503 or 429 (its overload, the
      statuses whose ``Retry-After`` the retry honours) is 503 with that
      ``Retry-After`` when it sent a valid one; its 504 is 504; any other
      (a 500, a 502, a 408) is 502. An unmarked one (a 404, a 409, a 400, or
      a POST the client never retried) is re-raised: it may be this
      service's bug, and the server answers 500.

    An `ExceptionGroup` (a mediator's ``publish`` raises one when handlers
    fail), nested groups included, is answered when every error in it maps:
    with the most conservative status of its members (503, then 429, 504,
    502) and the longest ``Retry-After`` among them. A group holding any other
    error, beside resilience errors or not, is re-raised whole: the server
    answers 500, as for that error alone.

    ``Retry-After`` is in whole seconds, rounded up, and at most a day (what
    readers, ours included, heed at most). The body (RFC 9457) holds
    ``type``, ``title``, ``status`` and a fixed ``detail``: never the
    exception's message, which names clients and hosts.

    An error raised after the app started its response cannot change it, and
    is re-raised; so is every exception that does not map. Scopes other than
    ``http`` pass through untouched.

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
        (503, '2')
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Run the app; answer an error that maps, raised before it responded."""
        if not await entered(scope, receive, send, "ResilienceErrorMiddleware"):
            return
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
        except Exception as error:
            answer = None if started else problem_for(error)
            if answer is None:
                raise
            await send_problem(send, *answer)


def problem_for(error: BaseException) -> tuple[HTTPStatus, float | None] | None:
    """The status and the wait (seconds) for `error`; None when it does not map.

    The mapping is `ResilienceErrorMiddleware`'s.
    """
    if isinstance(error, BaseExceptionGroup):
        group = cast("BaseExceptionGroup[BaseException]", error)
        answers = [problem_for(member) for member in group.exceptions]
        known = [answer for answer in answers if answer is not None]
        if len(known) < len(answers):
            return None
        status = min((s for s, _ in known), key=_CAUTION.index)
        waits = [wait for _, wait in known if wait is not None]
        return status, max(waits) if waits else None
    if isinstance(error, AttemptTimeoutError | TotalTimeoutError):
        return HTTPStatus.GATEWAY_TIMEOUT, None
    if isinstance(error, RateLimitedError):
        if error.reason == "quota":
            return HTTPStatus.TOO_MANY_REQUESTS, _finite(error.retry_after)
        wait = _finite(error.retry_after)
        return HTTPStatus.SERVICE_UNAVAILABLE, _OVERLOAD_WAIT if wait is None else wait
    if isinstance(error, BrokenCircuitError):
        return HTTPStatus.SERVICE_UNAVAILABLE, _finite(error.retry_after)
    if isinstance(error, ResilienceError):
        return HTTPStatus.SERVICE_UNAVAILABLE, None
    if isinstance(error, httpx.PoolTimeout):
        return HTTPStatus.SERVICE_UNAVAILABLE, None
    if isinstance(error, SELF_CAUSED_EXCEPTIONS):
        return None
    if isinstance(error, httpx.TimeoutException):
        # The transport's own timeout, raised as httpx raised it (one before
        # the pipeline's deadline): the dependency did not answer in time.
        return HTTPStatus.GATEWAY_TIMEOUT, None
    if isinstance(error, httpx.TransportError):
        return HTTPStatus.BAD_GATEWAY, None
    if isinstance(error, httpx.HTTPStatusError):
        return _gave_up_on(error.response)
    return None


def _gave_up_on(response: httpx.Response) -> tuple[HTTPStatus, float | None] | None:
    """The answer to a dependency's `response` the client gave up on, else None."""
    if response.extensions.get(FINAL_MARK) is not True:
        return None
    status = response.status_code
    if status == HTTPStatus.GATEWAY_TIMEOUT:
        return HTTPStatus.GATEWAY_TIMEOUT, None
    if status not in RETRY_AFTER_STATUSES:
        return HTTPStatus.BAD_GATEWAY, None
    headers = response.headers
    asked = parse_retry_after(
        headers.get_list("retry-after"), now=utc_now(), date=headers.get_list("date")
    )
    return HTTPStatus.SERVICE_UNAVAILABLE, asked


def _finite(wait: float | None) -> float | None:
    return wait if wait is not None and math.isfinite(wait) else None


def _retry_after(wait: float) -> str:
    """Whole seconds to wait, rounded up, at most a day."""
    return str(min(max(0, math.ceil(wait)), int(MAX_RETRY_AFTER)))


async def send_problem(
    send: Send,
    status: HTTPStatus,
    wait: float | None,
    extra: tuple[tuple[bytes, bytes], ...] = (),
    *,
    detail: str | None = None,
) -> None:
    """Answer `status` as problem details, with ``Retry-After`` and `extra`.

    `detail` is the fixed text of the body's ``detail``; None: the one this
    middleware gives `status` (a dependency's outage).
    """
    problem = {
        "type": "about:blank",
        "title": status.phrase,
        "status": status.value,
        "detail": _DETAILS[status] if detail is None else detail,
    }
    body = json.dumps(problem).encode()
    headers = [
        (b"content-type", b"application/problem+json"),
        (b"content-length", str(len(body)).encode()),
    ]
    if wait is not None:
        headers.append((b"retry-after", _retry_after(wait).encode()))
    headers.extend(extra)
    start = {"type": "http.response.start", "status": status.value}
    await send({**start, "headers": headers})
    await send({"type": "http.response.body", "body": body})
