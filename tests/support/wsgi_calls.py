"""Calling a WSGI app directly, as a server would: for the middlewares' unit tests."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any
from wsgiref.util import setup_testing_defaults

import httpx


@dataclass
class Answered:
    """What a server was told: each `start_response` call, then the body."""

    calls: list[tuple[str, list[tuple[str, str]], Any]] = field(
        default_factory=list[tuple[str, list[tuple[str, str]], Any]]
    )
    body: bytes = b""
    closed: bool = False

    @property
    def status(self) -> str:
        return self.calls[-1][0]

    @property
    def headers(self) -> dict[str, str]:
        return {name.lower(): value for name, value in self.calls[-1][1]}

    def start_response(
        self, status: str, headers: list[tuple[str, str]], exc_info: Any = None
    ) -> Callable[[bytes], object]:
        self.calls.append((status, headers, exc_info))
        return lambda data: None


def environ_of(**values: Any) -> dict[str, Any]:
    environ: dict[str, Any] = dict(values)
    setup_testing_defaults(environ)
    return environ


def call(app: Any, environ: dict[str, Any] | None = None) -> Answered:
    """Call `app`, read its whole body and close it, as a server does."""
    answered = Answered()
    body: Iterable[bytes] = app(environ or environ_of(), answered.start_response)
    try:
        answered.body = b"".join(body)
    finally:
        close = getattr(body, "close", None)
        if close is not None:
            close()
            answered.closed = True
    return answered


def asgi_answer(app: Any, path: str = "/") -> httpx.Response:
    """The answer of an ASGI `app` to a GET of `path`, for comparison."""

    async def main() -> httpx.Response:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport) as client:
            return await client.get("http://shop" + path)

    return asyncio.run(main())
