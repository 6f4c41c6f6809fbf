"""The timeout's options: `TimeoutOptions`, its defaults, what it builds."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import ClassVar, Final, TypeVar

from pydantic import (
    BaseModel,
)

from http_resilience._core.builder import BuildContext, Placement
from http_resilience._core.call import AsyncHandler, SyncHandler
from http_resilience._core.fields import FROZEN, PositiveDuration
from http_resilience._core.step_defaults import SyncStepDefaults
from http_resilience._strategies.timeout.deadline import Deadline
from http_resilience._strategies.timeout.strategy import (
    AsyncTimeout,
    Narrowing,
    SyncTimeout,
)
from http_resilience._strategies.timeout.timer import DeadlineTimer

__all__ = [
    "DEFAULT_ATTEMPT_TIMEOUT",
    "DEFAULT_OWN_TRANSPORT_TIMEOUT",
    "DEFAULT_TOTAL_REQUEST_TIMEOUT",
    "TimeoutOptions",
]


H = TypeVar("H", AsyncHandler, SyncHandler)

DEFAULT_ATTEMPT_TIMEOUT: Final = timedelta(seconds=10)
DEFAULT_TOTAL_REQUEST_TIMEOUT: Final = timedelta(seconds=30)
DEFAULT_OWN_TRANSPORT_TIMEOUT: Final = True


class TimeoutOptions(SyncStepDefaults, BaseModel):
    """A timeout of a pipeline (internal: `add_timeout` builds it).

    Attributes:
        timeout: The limit of what runs inside the timeout; more than zero.
        own_transport_timeout: When it is the pipeline's innermost timeout,
            set each attempt's httpx timeouts from the time it has left.
    """

    model_config = FROZEN

    timeout: PositiveDuration
    own_transport_timeout: bool = DEFAULT_OWN_TRANSPORT_TIMEOUT

    is_deadline: ClassVar[bool] = True

    @property
    def label(self) -> str:
        """``"timeout 1 s"``."""
        return f"timeout {self.timeout.total_seconds():g} s"

    def _build(
        self,
        next: H,
        context: BuildContext,
        place: Placement,
        cut: Callable[[Deadline], H],
    ) -> H | Narrowing:
        """`cut`'s timeout on this deadline where it must cut; else a narrowing."""
        deadline = Deadline(
            seconds=self.timeout.total_seconds(),
            kind="total" if place.repeated else "attempt",
            clock=context.clock,
            telemetry=context.telemetry,
            own_time=place.owns_time and self.own_transport_timeout,
        )
        return cut(deadline) if place.cut else Narrowing(next, deadline)

    def build_async(
        self, next: AsyncHandler, context: BuildContext, place: Placement
    ) -> AsyncHandler:
        """A timeout that cuts the task where it must, or only narrows."""
        return self._build(
            next,
            context,
            place,
            lambda deadline: AsyncTimeout(next, deadline, context.once(DeadlineTimer)),
        )

    def build_sync(
        self, next: SyncHandler, context: BuildContext, place: Placement
    ) -> SyncHandler:
        """A timeout held at the attempt's sockets where it must, or only narrows."""
        return self._build(
            next, context, place, lambda deadline: SyncTimeout(next, deadline)
        )
