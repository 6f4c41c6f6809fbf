"""The async retry loop, `AsyncRetry`: `RetryStrategy` driven on an event loop.

The loop sends, asks the strategy, closes what a retry supersedes and sleeps
on the clock; every decision is the strategy's. The sync loop, `drive_sync`,
is generated from this module by ``tools/unasync.py``: edit this one and run
the script.
"""

from __future__ import annotations

import httpx

from http_resilience._core.call import Call
from http_resilience._core.drive import AsyncDriver
from http_resilience._core.send import close_quietly
from http_resilience._primitives.testing_mode import testing_wait
from http_resilience._strategies.retry.strategy import RetryStrategy

__all__ = ["AsyncRetry"]


class AsyncRetry(AsyncDriver[RetryStrategy]):
    """`RetryStrategy`'s loop on an event loop."""

    __slots__ = ()

    async def handle(self, request: httpx.Request, call: Call) -> httpx.Response:
        """Send `request`, again after each failure while allowed."""
        strategy, body, attempt = self.strategy, request.stream, 1
        while True:
            started = strategy.started(call, attempt)
            try:
                response = await self._next.handle(request, call)
            except Exception as exc:
                delay = strategy.after_raise(request, body, call, exc, attempt, started)
                if delay is None:
                    raise
            else:
                delay = strategy.after_answer(request, body, call, response, started)
                if delay is None:
                    return response
                await close_quietly(response)
            await strategy.clock.sleep(testing_wait(delay))
            attempt += 1
