"""The clients a compatibility scenario runs on, and servers to run it against.

`sync_client(kind, ...)` and `async_client(kind, ...)` build the same client
three ways: ``"plain"`` (httpx alone, the oracle), ``"factory"``
(`create_client` / `create_async_client`) and ``"transport"`` (a plain httpx
client around a `ResilientTransport` / `AsyncResilientTransport`).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import timedelta
from typing import Any, Final, Literal

import httpx

from http_resilience import (
    AsyncResilientTransport,
    HttpResilienceOptions,
    ResilientTransport,
    create_async_client,
    create_client,
)
from http_resilience.testing import FakeClock

__all__ = [
    "DEADLINE",
    "OURS",
    "QUICK",
    "RESILIENT",
    "RETRY_ATTEMPT",
    "Flaky",
    "Kind",
    "async_client",
    "echo",
    "mock",
    "seen_headers",
    "sync_client",
]

Kind = Literal["plain", "factory", "transport"]
RESILIENT: Final[tuple[Kind, ...]] = ("factory", "transport")
# Retries without waiting; the waits would be spent on a fake clock anyway.
QUICK: Final = HttpResilienceOptions(base_delay=timedelta(0))
DEADLINE: Final = "x-request-timeout-ms"
RETRY_ATTEMPT: Final = "x-retry-attempt"
# What our clients add to an attempt on purpose (test_differences.py pins them).
OURS: Final = frozenset({DEADLINE.encode(), RETRY_ATTEMPT.encode()})

Handler = Callable[[httpx.Request], httpx.Response]


def sync_client(
    kind: Kind,
    inner: httpx.BaseTransport | None = None,
    *,
    options: HttpResilienceOptions = QUICK,
    fake_clock: bool = True,
    **httpx_kwargs: Any,
) -> httpx.Client:
    """The client of `kind` around `inner` (None: httpx's own transport).

    `fake_clock=False` runs the pipeline on the real clock, for its deadlines
    to cut real waits.
    """
    clock = FakeClock() if fake_clock else None
    if kind == "plain":
        return httpx.Client(transport=inner, **httpx_kwargs)
    if kind == "factory":
        if inner is not None:
            httpx_kwargs["transport"] = inner
        return create_client("compat", options, clock=clock, **httpx_kwargs)
    transport = ResilientTransport(inner, options=options, name="compat", clock=clock)
    return httpx.Client(transport=transport, **httpx_kwargs)


def async_client(
    kind: Kind,
    inner: httpx.AsyncBaseTransport | None = None,
    *,
    options: HttpResilienceOptions = QUICK,
    fake_clock: bool = True,
    **httpx_kwargs: Any,
) -> httpx.AsyncClient:
    """`sync_client`'s async twin."""
    clock = FakeClock() if fake_clock else None
    if kind == "plain":
        return httpx.AsyncClient(transport=inner, **httpx_kwargs)
    if kind == "factory":
        if inner is not None:
            httpx_kwargs["transport"] = inner
        return create_async_client("compat", options, clock=clock, **httpx_kwargs)
    transport = AsyncResilientTransport(
        inner, options=options, name="compat", clock=clock
    )
    return httpx.AsyncClient(transport=transport, **httpx_kwargs)


def seen_headers(request: httpx.Request) -> list[tuple[str, str]]:
    """The request's headers as the server reads them, less `OURS`.

    The deadline and retry-attempt headers are what our clients add on
    purpose; everything else must match plain httpx.
    """
    return [
        (name.decode().lower(), value.decode())
        for name, value in request.headers.raw
        if name.lower() not in OURS
    ]


def echo(request: httpx.Request) -> httpx.Response:
    """A handler answering 200 with what it was sent, as JSON."""
    document = {
        "method": request.method,
        "url": str(request.url),
        "headers": seen_headers(request),
        "body": request.read().decode("latin-1"),
    }
    return httpx.Response(200, content=json.dumps(document).encode())


class Flaky:
    """`handler`, behind a 503 on the first hit of each retryable request.

    What our clients retry underneath, and plain httpx would hand back: the
    scenario run on `Flaky(handler)` by a resilient client must look, from
    above the transport, as it does on `handler` itself to plain httpx.
    Unsafe methods (POST, PATCH) are never failed, since they are not retried.
    """

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.failed: set[tuple[str, str, str]] = set()
        self.attempts: list[httpx.Request] = []

    @staticmethod
    def _seen(request: httpx.Request) -> tuple[str, str, str]:
        return (
            request.method,
            str(request.url),
            request.headers.get("authorization", ""),
        )

    def retried(self) -> int:
        """How many 503s were sent, once each was seen to be sent again.

        Raises:
            AssertionError: A 503 was not followed by the same request.
        """
        sent = [self._seen(request) for request in self.attempts]
        assert all(sent.count(failed) >= 2 for failed in self.failed)
        return len(self.failed)

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.attempts.append(request)
        seen = self._seen(request)
        if request.method in ("POST", "PATCH") or seen in self.failed:
            return self.handler(request)
        self.failed.add(seen)
        return httpx.Response(503, headers={"set-cookie": "superseded=1; Path=/"})


def mock(handler: Handler, kind: Kind) -> httpx.MockTransport:
    """The inner transport for `kind`: `handler` itself for plain httpx, else flaky."""
    return httpx.MockTransport(handler if kind == "plain" else Flaky(handler))
