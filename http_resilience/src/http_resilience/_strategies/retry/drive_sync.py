# Generated from drive.py by tools/unasync.py; do not edit.
# Edit the async source and run `python tools/unasync.py`.
"""The sync retry loop, `SyncRetry`: `RetryStrategy` driven blocking.

The loop sends, asks the strategy, closes what a retry supersedes and sleeps
on the clock; every decision is the strategy's. This sync loop is generated
from `drive` by ``tools/unasync.py``: edit that one and run the script.
"""

from __future__ import annotations

import httpx

from http_resilience._core.call import Call
from http_resilience._core.drive import SyncDriver
from http_resilience._core.send import close_quietly_sync
from http_resilience._primitives.testing_mode import testing_wait
from http_resilience._strategies.retry.strategy import RetryStrategy

__all__ = ["SyncRetry"]


class SyncRetry(SyncDriver[RetryStrategy]):
    """`RetryStrategy`'s loop, blocking."""

    __slots__ = ()

    def handle_sync(self, request: httpx.Request, call: Call) -> httpx.Response:
        """Send `request`, again after each failure while allowed."""
        strategy, body, attempt = self.strategy, request.stream, 1
        while True:
            started = strategy.started(call, attempt)
            try:
                response = self._next.handle_sync(request, call)
            except Exception as exc:
                delay = strategy.after_raise(request, body, call, exc, attempt, started)
                if delay is None:
                    raise
            else:
                delay = strategy.after_answer(request, body, call, response, started)
                if delay is None:
                    return response
                close_quietly_sync(response)
            strategy.clock.sleep_sync(testing_wait(delay))
            attempt += 1
