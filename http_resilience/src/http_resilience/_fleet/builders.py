"""What a transport linked to a `SharedState` builds in its steps' place.

The fleet's variants of three strategies, registered in the transport's
`BuildContext.overrides` (`fleet_overrides`), so that neither the builder nor
the strategies know of the fleet. One row each: the options it replaces, how
its strategy is built (None: the step's own options build it), and its
drivers.

- the retry budget: the first budget step spends the fleet's budget too
  (`SharedRetryBudget`); a later one stays local;
- the breaker: the first breaker step is held open by the fleet too
  (`AsyncSharedBreaker`, `SyncSharedBreaker`) and publishes its openings; a
  later one stays local;
- the quota: the first quota step spends the fleet's allowance
  (`AsyncSharedQuota`, `SyncSharedQuota`); a later one stays local.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Generic, TypeVar

from http_resilience._fleet.breaker import (
    AsyncSharedBreaker,
    SyncSharedBreaker,
    breaker_strategy,
)
from http_resilience._fleet.budget import budget_strategy
from http_resilience._fleet.link import ClientShare
from http_resilience._fleet.quota import (
    AsyncSharedQuota,
    SyncSharedQuota,
    quota_strategy,
)
from http_resilience._strategies.breaker.options import BreakerOptions
from http_resilience._strategies.budget.options import RetryBudgetOptions
from http_resilience._strategies.budget.strategy import (
    AsyncRetryBudget,
    SyncRetryBudget,
)
from http_resilience._strategies.quota.options import QuotaOptions

if TYPE_CHECKING:
    from http_resilience._core.builder import (
        BuildContext,
        Placement,
        StepBuilder,
        StepOptions,
    )
    from http_resilience._core.call import AsyncHandler, SyncHandler

__all__ = ["fleet_overrides"]

Step = TypeVar("Step", bound="StepOptions")
S = TypeVar("S")


def fleet_overrides(share: ClientShare) -> dict[type[StepOptions], StepBuilder]:
    """The `BuildContext.overrides` of a transport linked through `share`."""
    return {
        RetryBudgetOptions: _Variant(
            share,
            RetryBudgetOptions,
            budget_strategy,
            AsyncRetryBudget,
            SyncRetryBudget,
        ),
        BreakerOptions: _Variant(
            share,
            BreakerOptions,
            breaker_strategy,
            partial(AsyncSharedBreaker, share=share),
            partial(SyncSharedBreaker, share=share),
        ),
        QuotaOptions: _Variant(
            share, QuotaOptions, quota_strategy, AsyncSharedQuota, SyncSharedQuota
        ),
    }


@dataclass(frozen=True, slots=True)
class _Variant(Generic[Step, S]):
    """The fleet's variant of the steps of one options class (a `StepBuilder`).

    Attributes:
        share: The transport's link to its `SharedState`.
        kind: The options class whose steps it builds.
        strategy: The fleet's strategy for a step; None leaves the step to
            its own options.
        make_async: The async driver around that strategy.
        make_sync: The sync driver around it.
    """

    share: ClientShare
    kind: type[Step]
    strategy: Callable[[ClientShare, Step, BuildContext], S | None]
    make_async: Callable[[AsyncHandler, S], AsyncHandler]
    make_sync: Callable[[SyncHandler, S], SyncHandler]

    def _strategy_for(self, step: StepOptions, context: BuildContext) -> S | None:
        if not isinstance(step, self.kind):
            return None
        return self.strategy(self.share, step, context)

    def build_async(
        self,
        step: StepOptions,
        next: AsyncHandler,
        context: BuildContext,
        place: Placement,
    ) -> AsyncHandler | None:
        """The fleet's async strategy for `step`, around `next`; or None."""
        strategy = self._strategy_for(step, context)
        return None if strategy is None else self.make_async(next, strategy)

    def build_sync(
        self,
        step: StepOptions,
        next: SyncHandler,
        context: BuildContext,
        place: Placement,
    ) -> SyncHandler | None:
        """The fleet's sync strategy for `step`, around `next`; or None."""
        strategy = self._strategy_for(step, context)
        return None if strategy is None else self.make_sync(next, strategy)
