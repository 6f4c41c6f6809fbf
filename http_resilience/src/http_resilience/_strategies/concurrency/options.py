"""The concurrency limiter's options: the permits and the queue.

`ConcurrencyLimiterOptions` (for a custom pipeline, and the standard one's limiter), its
defaults, and the builders of the two drivers.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final, TypeVar

from pydantic import BaseModel

from http_resilience._core.builder import BuildContext, Placement
from http_resilience._core.call import AsyncHandler, SyncHandler
from http_resilience._core.fields import FROZEN, NonNegativeCount, PositiveCount
from http_resilience._core.step_defaults import SyncStepDefaults
from http_resilience._strategies.concurrency.strategy import (
    AsyncConcurrencyLimiter,
    AsyncLimiter,
    ConcurrencyLimiter,
    LimiterStrategy,
    SyncLimiter,
)

__all__ = [
    "DEFAULT_CONCURRENCY_LIMIT",
    "DEFAULT_QUEUE_LIMIT",
    "ConcurrencyLimiterOptions",
]


H = TypeVar("H", AsyncHandler, SyncHandler)
P = TypeVar("P", AsyncConcurrencyLimiter, ConcurrencyLimiter)
D = TypeVar("D", AsyncLimiter, SyncLimiter)

DEFAULT_CONCURRENCY_LIMIT: Final = 1000
DEFAULT_QUEUE_LIMIT: Final = 0


class ConcurrencyLimiterOptions(SyncStepDefaults, BaseModel):
    """The concurrency limiter of a custom pipeline.

    Attributes:
        concurrency_limit: Requests inside at once. Default 1000.
        queue_limit: Requests that may wait for a permit; beyond that a
            request is refused with `RateLimitedError`. Default 0.

    Raises:
        pydantic.ValidationError: On construction, naming every invalid field.

    Example:
        >>> ConcurrencyLimiterOptions(concurrency_limit=10, queue_limit=5).queue_limit
        5
    """

    model_config = FROZEN

    concurrency_limit: PositiveCount = DEFAULT_CONCURRENCY_LIMIT
    queue_limit: NonNegativeCount = DEFAULT_QUEUE_LIMIT

    _label = "limiter"

    @property
    def waits_outside_attempts(self) -> bool:
        """A request may wait in the queue: time passes outside any attempt."""
        return self.queue_limit > 0

    def _build(
        self,
        driver: Callable[[H, P, LimiterStrategy], D],
        limiter: type[P],
        next: H,
        context: BuildContext,
    ) -> D:
        """`driver` around `next`, on this transport's own `limiter`."""
        permits = limiter(permits=self.concurrency_limit, queue_limit=self.queue_limit)
        return driver(next, permits, LimiterStrategy(context.telemetry))

    def build_async(
        self, next: AsyncHandler, context: BuildContext, place: Placement
    ) -> AsyncLimiter:
        """This transport's limiter, around `next`."""
        return self._build(AsyncLimiter, AsyncConcurrencyLimiter, next, context)

    def build_sync(
        self, next: SyncHandler, context: BuildContext, place: Placement
    ) -> SyncLimiter:
        """This transport's limiter, for threads, around `next`."""
        return self._build(SyncLimiter, ConcurrencyLimiter, next, context)
