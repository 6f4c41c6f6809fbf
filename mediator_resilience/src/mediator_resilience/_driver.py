"""The async driver of `RetryBehavior`: the first attempt, then tenacity.

`mediator_resilience._decisions` decides without I/O; a driver makes the calls
and the waits it decides on its path.

The sync driver, `_driver_sync`, is generated from this module by
``tools/unasync.py``: edit this one and run the script.
"""

from __future__ import annotations

from typing import Any

from mediator import Next
from mediator_resilience._decisions import RetryDecisions

__all__ = ["AsyncRetryDriver"]


class AsyncRetryDriver(RetryDecisions):
    """`RetryBehavior.handle`: the attempts on the async path."""

    # --- the first attempt, on the hot path ------------------------------------

    async def handle(self, request: Any, next: Next[Any]) -> Any:
        """Run the rest of the chain; retry it while the failure is transient."""
        started = self._clock.monotonic() if self._limit is not None else 0.0
        try:
            result = await next()
        except BaseException as error:
            if (delay := self._first_wait(request, started, error)) is None:
                raise
        else:
            if self._result_predicate is None or (
                (delay := self._first_wait(request, started, None, result)) is None
            ):
                return result
        await self._clock.sleep(delay)
        return await self._retry_async(request, next, started)

    # --- after a failure: tenacity ---------------------------------------------

    async def _retry_async(self, request: Any, next: Next[Any], started: float) -> Any:
        from tenacity import AsyncRetrying

        async def attempt() -> Any:
            return await next()

        retrying = AsyncRetrying(
            sleep=self._clock.sleep, **self._strategy(request, started)
        )
        return await retrying(attempt)
