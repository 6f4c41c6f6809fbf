"""ASGI apps for a service's health checks, and the middleware for its errors.

Pure ASGI, so any framework mounts them (Starlette, FastAPI) and any ASGI
server runs them alone:

- `liveness()`: 200 ``{"status": "ok"}`` for as long as the process serves,
  whatever its dependencies do: restarting a process because a service it
  calls is down helps no one.
- `readiness(factory_or_client, ...)`: 200 ``{"status": "ready"}``, or 503
  ``{"status": "degraded", "open": [...]}`` naming each client and host whose
  breaker refuses calls now (isolated by an operator, or open in its break,
  here or across the replicas of a `SharedState`).
  Hosts are named ``scheme://host:port``: never a path, a query or
  credentials.

`ResilienceErrorMiddleware` (also at the package's root) answers the errors
of the pipeline that escape a handler with problem details.

`AdmissionMiddleware` admits a service's own requests under a concurrency
limit learned from the handlers' latency (the adaptive limiter of the
clients, inbound), with an optional share per partition (a verified tenant):
503 when the service is full, 429 when a partition is over its share, both
with ``Retry-After``; `AdmissionHealth` is what it shows an operator.

The web middlewares of `http_resilience` and `mediator.asgi` go in one order,
outermost first: ``RequestContextMiddleware``, `ResilienceContextMiddleware`,
``IdempotencyKeyMiddleware``, then ``DomainErrorMiddleware`` and
`ResilienceErrorMiddleware` (these two either way round). Each checks it on
every request: a stack in another order raises `MiddlewareOrderError`, naming
this order, before the app runs.

Example:
    >>> import asyncio, httpx
    >>> from http_resilience import create_async_client
    >>> client = create_async_client(
    ...     "inventory",
    ...     transport=httpx.MockTransport(lambda request: httpx.Response(200)),
    ... )
    >>> async def main() -> tuple[int, str]:
    ...     ready = httpx.ASGITransport(app=readiness(client))
    ...     async with httpx.AsyncClient(transport=ready) as probe:
    ...         response = await probe.get("http://service/health/ready")
    ...     return response.status_code, response.text
    >>> asyncio.run(main())
    (200, '{"status": "ready"}')
"""

from __future__ import annotations

import json
from collections.abc import Callable
from http import HTTPStatus
from typing import Any, Final

from http_resilience._clients.factory import HttpClientFactory
from http_resilience._health.snapshot import (
    HostHealth,
    Target,
    health,
    resilient_transports,
)
from http_resilience._middleware.admission import (
    AdmissionHealth,
    AdmissionMiddleware,
)
from http_resilience._middleware.asgi import ResilienceErrorMiddleware
from http_resilience._middleware.stack import MiddlewareOrderError
from http_resilience._middleware.types import ASGIApp, Receive, Scope, Send

__all__ = [
    "AdmissionHealth",
    "AdmissionMiddleware",
    "MiddlewareOrderError",
    "ResilienceErrorMiddleware",
    "liveness",
    "readiness",
]

_READ: Final = frozenset({"GET", "HEAD"})

Answer = Callable[[], tuple[HTTPStatus, dict[str, Any]]]


def liveness() -> ASGIApp:
    """An ASGI app that answers 200 ``{"status": "ok"}`` while the process serves.

    It looks at nothing: a dependency that fails makes the service not
    ready (`readiness`), never not alive.

    Returns:
        The app: mount it (``app.mount("/health/live", liveness())``) or run
        it alone. It answers GET and HEAD at any path, 405 otherwise.
    """
    return _HealthApp(_alive)


def readiness(*targets: HttpClientFactory | Target) -> ASGIApp:
    """An ASGI app that says whether the clients' dependencies take calls.

    200 ``{"status": "ready"}`` when no breaker of the clients refuses calls;
    503 ``{"status": "degraded", "open": [{"client": ..., "host": ...,
    "state": ...}]}`` naming each client and host whose breaker does:
    ``"isolated"`` by an operator (`CircuitControl`), or ``"open"`` with its
    break still running; a host the replicas of a `SharedState` hold open in
    their break, while this replica's own breaker would let it go, is
    ``"open"`` with ``"fleet": true``. A breaker whose break is over is not
    counted: the
    next call is its probe, and a service taken out of rotation for being
    degraded might never make that call. A factory is read on each request,
    so its clients built later count too.

    Every replica whose breakers open together goes unready together: keep a
    dependency out of readiness unless the service truly has nothing to do
    without it.

    Args:
        *targets: `HttpClientFactory` objects, clients made by
            `create_async_client` or `create_client`, or resilient
            transports; at least one.

    Returns:
        The app: mount it (``app.mount("/health/ready", readiness(factory))``)
        or run it alone. It answers GET and HEAD at any path, 405 otherwise;
        the body is JSON, never cached.

    Raises:
        TypeError: No target, or a target of none of these kinds (an httpx
            client this package did not build: give its transport).
    """
    if not targets:
        raise TypeError(
            "readiness() needs an HttpClientFactory, a client or a transport to watch"
        )
    for target in targets:
        if not isinstance(target, HttpClientFactory):
            resilient_transports(target, what="readiness()")

    def answer() -> tuple[HTTPStatus, dict[str, Any]]:
        refusing: dict[tuple[str, str], HostHealth] = {}
        for target in targets:
            reports = (
                target.health()
                if isinstance(target, HttpClientFactory)
                else (health(target),)
            )
            for report in reports:
                for host in report.refusing:
                    # An isolation outranks an open breaker of the twin client,
                    # and a breaker of this replica one the fleet holds open.
                    key = (report.client, host.host)
                    found = refusing.get(key)
                    if (
                        found is None
                        or host.state == "isolated"
                        or (found.fleet and not host.fleet)
                    ):
                        refusing[key] = host
        if not refusing:
            return HTTPStatus.OK, {"status": "ready"}
        named: list[dict[str, Any]] = []
        for (client, name), host in sorted(refusing.items()):
            entry: dict[str, Any] = {
                "client": client,
                "host": name,
                "state": host.state,
            }
            if host.fleet:
                entry["fleet"] = True
            named.append(entry)
        return HTTPStatus.SERVICE_UNAVAILABLE, {"status": "degraded", "open": named}

    return _HealthApp(answer)


def _alive() -> tuple[HTTPStatus, dict[str, Any]]:
    return HTTPStatus.OK, {"status": "ok"}


class _HealthApp:
    """Answers each HTTP request with what `answer` says, as JSON."""

    __slots__ = ("_answer",)

    def __init__(self, answer: Answer) -> None:
        self._answer = answer

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind == "lifespan":
            await _lifespan(receive, send)
            return
        if kind != "http":
            await send({"type": "websocket.close", "code": 1000})
            return
        if scope["method"] not in _READ:
            headers = [(b"allow", b"GET, HEAD"), (b"content-length", b"0")]
            status = HTTPStatus.METHOD_NOT_ALLOWED
            await send(
                {
                    "type": "http.response.start",
                    "status": status.value,
                    "headers": headers,
                }
            )
            await send({"type": "http.response.body", "body": b""})
            return
        status, document = self._answer()
        body = json.dumps(document).encode()
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
            (b"cache-control", b"no-store"),
        ]
        await send(
            {"type": "http.response.start", "status": status.value, "headers": headers}
        )
        head = scope["method"] == "HEAD"
        await send({"type": "http.response.body", "body": b"" if head else body})


async def _lifespan(receive: Receive, send: Send) -> None:
    """Start and stop at once: the app holds nothing."""
    while (await receive())["type"] == "lifespan.startup":
        await send({"type": "lifespan.startup.complete"})
    # The only other message: "lifespan.shutdown".
    await send({"type": "lifespan.shutdown.complete"})


from http_resilience._primitives.public_names import publish as _publish  # noqa: E402

_publish(__name__, __all__)
