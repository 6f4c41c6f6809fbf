"""What a step's options state only where they differ: Polly's options base.

Every strategy's options are a `StepOptions` (`http_resilience._core.builder`),
and most say the same of themselves: no deadline, nothing repeated, no wait
outside an attempt, their strategy one object that an async and a sync driver
each wrap around the next handler. `StepDefaults` and `SyncStepDefaults` say
it once, so that each options model states its label, its strategy and its
drivers, and only what differs besides.
"""

from __future__ import annotations

from typing import Any, ClassVar, Protocol

import httpx

from http_resilience._core.builder import BuildContext, Placement
from http_resilience._core.call import AsyncHandler, SyncHandler
from http_resilience._core.clock import Clock
from http_resilience._core.telemetry import Telemetry

__all__ = ["StepDefaults", "SyncStepDefaults"]


class _AsyncDriver(Protocol):
    """A driver class: built around the next handler and the step's strategy."""

    def __call__(self, next: AsyncHandler, strategy: Any, /) -> AsyncHandler: ...


class _SyncDriver(Protocol):
    """`_AsyncDriver` for a sync chain."""

    def __call__(self, next: SyncHandler, strategy: Any, /) -> SyncHandler: ...


class _StrategyKind(Protocol):
    """A strategy class built from a step's options, the clock and the telemetry."""

    def __call__(self, *, options: Any, clock: Clock, telemetry: Telemetry) -> Any: ...


class StepDefaults:
    """What a step's options state only where they differ (a `StepOptions` base).

    Mixed into each strategy's options model: the step is no deadline,
    repeats nothing, never waits outside an attempt and sends nothing twice.
    Its `label` is the class's ``_label``. Its async strategy is its
    ``_async_driver`` around the next handler and the object its
    `_strategy` makes: by default its ``_strategy_kind`` of the options, the
    clock and the telemetry. A step built otherwise (a timeout, hedging)
    overrides `build_async`.
    """

    __slots__ = ()

    is_deadline: ClassVar[bool] = False
    repeats: ClassVar[bool] = False
    _label: ClassVar[str]
    _strategy_kind: ClassVar[_StrategyKind]
    _async_driver: ClassVar[_AsyncDriver]

    @property
    def label(self) -> str:
        """The step in a pipeline's repr: the class's ``_label``."""
        return self._label

    @property
    def waits_outside_attempts(self) -> bool:
        """No: nothing in the step waits while no attempt inside it runs."""
        return False

    def will_repeat(self, request: httpx.Request) -> bool:
        """Never: the step sends nothing twice."""
        return False

    def _strategy(self, context: BuildContext) -> Any:
        """What decides for the step, shared by its async and sync drivers."""
        return type(self)._strategy_kind(
            options=self, clock=context.clock, telemetry=context.telemetry
        )

    def build_async(
        self, next: AsyncHandler, context: BuildContext, place: Placement
    ) -> AsyncHandler:
        """The step's async driver around `next`, over its `_strategy`."""
        return type(self)._async_driver(next, self._strategy(context))


class SyncStepDefaults(StepDefaults):
    """`StepDefaults` for a step with a sync strategy too: its ``_sync_driver``."""

    __slots__ = ()

    _sync_driver: ClassVar[_SyncDriver]

    def build_sync(
        self, next: SyncHandler, context: BuildContext, place: Placement
    ) -> SyncHandler:
        """The step's sync driver around `next`, over its `_strategy`."""
        return type(self)._sync_driver(next, self._strategy(context))
