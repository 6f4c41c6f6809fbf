"""What the health tests share: a host that answers as told, held when told."""

from __future__ import annotations

from typing import Any

import anyio
import httpx

from http_resilience import AsyncResilientTransport

HOST = "http://api.example:80"
URL = "http://api.example/orders/1"

# Five attempts, half of them failed, open the breaker for 3 s; no retries.
BREAKS: dict[str, Any] = {
    "max_retry_attempts": 0,
    "attempt_timeout": 1,
    "sampling_duration": 10,
    "minimum_throughput": 5,
    "failure_ratio": 0.5,
    "break_duration": 3,
}


class Upstream:
    """A `MockTransport` handler: answers `status`; holds while `hold` is set."""

    def __init__(self, status: int = 200) -> None:
        self.status = status
        self.hits = 0
        self.hold = False
        self.entered = anyio.Event()
        self.release = anyio.Event()

    async def __call__(self, request: httpx.Request) -> httpx.Response:
        self.hits += 1
        if self.hold:
            self.entered.set()
            await self.release.wait()
        return httpx.Response(self.status)

    def answer(self, request: httpx.Request) -> httpx.Response:
        """The sync twin, never held."""
        self.hits += 1
        return httpx.Response(self.status)


async def get(transport: AsyncResilientTransport, url: str = URL) -> httpx.Response:
    return await transport.handle_async_request(httpx.Request("GET", url))
