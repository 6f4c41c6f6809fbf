"""The concurrency limiter's options: the permits and the queue.

`LimiterOptions` (for a custom pipeline, and the standard one's limiter), its
defaults, and the builders of the two drivers.
"""

from __future__ import annotations

from typing import ClassVar, Final

import httpx
from pydantic import BaseModel, Field

from http_resilience._core.builder import BuildContext, Placement
from http_resilience._core.fields import FROZEN, Count
from http_resilience._core.pipeline import AsyncHandler, SyncHandler
from http_resilience._strategies.concurrency.strategy import (
    AsyncConcurrencyLimiter,
    AsyncLimiter,
    ConcurrencyLimiter,
    LimiterStrategy,
    SyncLimiter,
)

__all__ = ["DEFAULT_CONCURRENCY_LIMIT", "DEFAULT_QUEUE_LIMIT", "LimiterOptions"]


DEFAULT_CONCURRENCY_LIMIT: Final = 1000
DEFAULT_QUEUE_LIMIT: Final = 0


class LimiterOptions(BaseModel):
    """The concurrency limiter of a custom pipeline.

    Attributes:
        concurrency_limit: Requests inside at once. Default 1000.
        queue_limit: Requests that may wait for a permit; beyond that a
            request is refused with `RateLimitedError`. Default 0.

    Raises:
        pydantic.ValidationError: On construction, naming every invalid field.

    Example:
        >>> LimiterOptions(concurrency_limit=10, queue_limit=5).queue_limit
        5
    """

    model_config = FROZEN

    concurrency_limit: Count = Field(default=DEFAULT_CONCURRENCY_LIMIT, ge=1)
    queue_limit: Count = Field(default=DEFAULT_QUEUE_LIMIT, ge=0)

    is_deadline: ClassVar[bool] = False
    repeats: ClassVar[bool] = False

    @property
    def label(self) -> str:
        """``"limiter"``."""
        return "limiter"

    @property
    def waits_outside_attempts(self) -> bool:
        """A request may wait in the queue: time passes outside any attempt."""
        return self.queue_limit > 0

    def will_repeat(self, request: httpx.Request) -> bool:
        """Never: a limiter sends nothing twice."""
        return False

    def build_async(
        self, next: AsyncHandler, context: BuildContext, place: Placement
    ) -> AsyncLimiter:
        """This transport's limiter, around `next`."""
        return AsyncLimiter(
            next,
            AsyncConcurrencyLimiter(
                permits=self.concurrency_limit, queue_limit=self.queue_limit
            ),
            LimiterStrategy(context.telemetry),
        )

    def build_sync(
        self, next: SyncHandler, context: BuildContext, place: Placement
    ) -> SyncLimiter:
        """This transport's limiter, for threads, around `next`."""
        return SyncLimiter(
            next,
            ConcurrencyLimiter(
                permits=self.concurrency_limit, queue_limit=self.queue_limit
            ),
            LimiterStrategy(context.telemetry),
        )
