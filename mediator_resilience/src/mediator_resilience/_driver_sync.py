# Generated from _driver.py by tools/unasync.py; do not edit.
# Edit the async source and run `python tools/unasync.py`.
"""The sync driver of `RetryBehavior`: the first attempt, then tenacity.

`mediator_resilience._decisions` decides without I/O; a driver makes the calls
and the waits it decides on its path.

This sync driver is generated from `_driver` by
``tools/unasync.py``: edit that one and run the script.
"""

from __future__ import annotations

from typing import Any

from mediator import SyncNext
from mediator_resilience._decisions import RetryDecisions

__all__ = ["SyncRetryDriver"]


class SyncRetryDriver(RetryDecisions):
    """`RetryBehavior.handle_sync`: the attempts on the sync path."""

    # --- the first attempt, on the hot path ------------------------------------

    def handle_sync(self, request: Any, next: SyncNext[Any]) -> Any:
        """Run the rest of the chain; retry it while the failure is transient."""
        started = self._clock.monotonic() if self._limit is not None else 0.0
        try:
            result = next()
        except BaseException as error:
            if (delay := self._first_wait(request, started, error)) is None:
                raise
        else:
            if self._result_predicate is None or (
                (delay := self._first_wait(request, started, None, result)) is None
            ):
                return result
        self._clock.sleep_sync(delay)
        return self._retry_sync(request, next, started)

    # --- after a failure: tenacity ---------------------------------------------

    def _retry_sync(self, request: Any, next: SyncNext[Any], started: float) -> Any:
        from tenacity import Retrying

        def attempt() -> Any:
            return next()

        retrying = Retrying(
            sleep=self._clock.sleep_sync, **self._strategy(request, started)
        )
        return retrying(attempt)
