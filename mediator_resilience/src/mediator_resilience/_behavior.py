"""`RetryBehavior`: retries `@retryable` requests, outside the transaction."""

from __future__ import annotations

from typing import Any, ClassVar

from mediator import Request, Stage
from mediator_resilience._decisions import RetryTools
from mediator_resilience._driver import AsyncRetryDriver
from mediator_resilience._driver_sync import SyncRetryDriver
from mediator_resilience._marker import is_retryable

__all__ = ["RetryBehavior", "RetryTools"]


class RetryBehavior(AsyncRetryDriver, SyncRetryDriver):
    """Re-runs the rest of the chain when a `@retryable` request fails transiently.

    At stage RETRY: under `use_defaults()` it sits inside audit, validation and
    authorization (they run once per request) and outside the transaction, so
    every attempt runs the handler in a fresh transaction. A request without the
    marker never meets it: it is not in that type's chain.

    The first attempt runs without tenacity, so a request that succeeds costs
    one behavior step; after a failure, tenacity (imported then, not with the
    package) drives the remaining attempts, waiting on the injected clock.
    Cancellation is never retried and no attempt starts after it, also when it
    arrives during a wait. When the attempts are
    spent, the last failure is raised (or the last response returned, for
    `should_retry_result`).

    A failure that asks for a wait (a ``retry_after`` in seconds: an open
    breaker, a limiter, a spent quota) is waited for at least that long; one
    that asks for more than `max_delay` is raised at once, never waited. No
    wait begins that would end past `max_retry_duration` after the first
    attempt began, or past the time `RetryTools.remaining_time` says is left:
    the last failure is raised instead, at once.

    A send nested in a `@transactional` handler runs inside the outer unit of
    work (`mediator.in_unit_of_work`): its attempts each roll back to their own
    savepoint, so it is retried like any other, except for a
    `TransientDatabaseError`, which dooms the whole transaction and is never
    retried there, whatever `should_retry` says: it goes up to the outermost
    `@retryable` send, which retries the whole unit of work.
    """

    stage: ClassVar[Stage] = Stage.RETRY

    def applies_to(self, request_type: type[Any]) -> bool:
        """Only `@retryable` requests (commands and queries) are retried."""
        return is_retryable(request_type) and Request in request_type.__mro__
