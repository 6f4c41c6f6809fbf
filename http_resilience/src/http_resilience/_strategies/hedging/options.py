"""Hedging's options: `HedgingOptions`, its defaults, and its (async only) build."""

from __future__ import annotations

from datetime import timedelta
from typing import ClassVar, Final

import httpx
from pydantic import BaseModel

from http_resilience._core.builder import BuildContext, Placement
from http_resilience._core.call import AsyncHandler
from http_resilience._core.fields import FROZEN, PositiveCount, PositiveDuration
from http_resilience._core.step_defaults import StepDefaults
from http_resilience._primitives.setting import default
from http_resilience._strategies.hedging.decision import is_hedged
from http_resilience._strategies.hedging.strategy import HedgingStrategy

__all__ = [
    "DEFAULT_HEDGING_DELAY",
    "DEFAULT_MAX_HEDGED_ATTEMPTS",
    "HedgingOptions",
]


DEFAULT_HEDGING_DELAY: Final = timedelta(seconds=2)
DEFAULT_MAX_HEDGED_ATTEMPTS: Final = 1


class HedgingOptions(StepDefaults, BaseModel):
    """Hedging: a second attempt when the first is slow, the first good answer wins.

    Only safe methods are hedged: GET, HEAD, OPTIONS and TRACE. PUT and DELETE
    are idempotent but not safe: two copies in flight at once may interleave
    with other writers, and a cancelled copy may still reach the server after
    the call has returned. They, and every other method, are sent once, as is
    a request whose body cannot be replayed.

    Attributes:
        delay: How long an attempt may go without an answer before the next
            hedged attempt is sent beside it. Default 2 s.
        max_hedged_attempts: Attempts sent beyond the first, at most; at most
            ``max_hedged_attempts + 1`` are in flight. Default 1.

    Durations accept a `timedelta`, a number of seconds, ``"200ms"``, ``"2s"``,
    ``"5m"``, ``"1h"`` or ISO 8601 (``"PT0.2S"``), up to 24 days.

    Raises:
        pydantic.ValidationError: On construction, naming every invalid field.

    Example:
        >>> HedgingOptions(delay="200ms").max_hedged_attempts
        1
    """

    model_config = FROZEN

    delay: PositiveDuration = default(DEFAULT_HEDGING_DELAY)
    max_hedged_attempts: PositiveCount = DEFAULT_MAX_HEDGED_ATTEMPTS

    repeats: ClassVar[bool] = True
    _label = "hedging"

    @property
    def waits_outside_attempts(self) -> bool:
        """Yes: its attempts run in tasks of its own, and it waits for them.

        So a deadline around it cuts its own task.
        """
        return True

    def will_repeat(self, request: httpx.Request) -> bool:
        """Whether hedging may send `request` more than once (`is_hedged`)."""
        return is_hedged(request)

    def build_async(
        self, next: AsyncHandler, context: BuildContext, place: Placement
    ) -> HedgingStrategy:
        """Hedging around `next`.

        There is no sync hedging: a blocking attempt cannot be cancelled, so a
        hedge's loser would run on to its end.
        """
        return HedgingStrategy(
            next,
            delay=self.delay.total_seconds(),
            max_hedged_attempts=self.max_hedged_attempts,
            clock=context.clock,
            telemetry=context.telemetry,
        )
