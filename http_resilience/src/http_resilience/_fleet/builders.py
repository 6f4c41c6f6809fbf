"""What a transport linked to a `SharedState` builds in its steps' place.

The fleet's variants of three strategies, registered in the transport's
`BuildContext.overrides` (`fleet_overrides`), so that neither the builder nor
the strategies know of the fleet:

- the retry budget: the first budget step spends the fleet's budget too
  (`SharedRetryBudget`); a later one stays local;
- the breaker: the first breaker step is held open by the fleet too
  (`AsyncSharedBreaker`, `SyncSharedBreaker`) and publishes its openings; a
  later one stays local (the step's own options build it);
- the quota: the first quota step spends the fleet's allowance
  (`AsyncSharedQuota`, `SyncSharedQuota`); a later one stays local.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from http_resilience._fleet.link import (
    AsyncSharedBreaker,
    BudgetTerms,
    ClientShare,
    SharedRetryBudget,
    SyncSharedBreaker,
)
from http_resilience._fleet.quota import (
    AsyncSharedQuota,
    SharedQuotaStrategy,
    SyncSharedQuota,
)
from http_resilience._strategies.breaker.options import BreakerOptions
from http_resilience._strategies.breaker.strategy import BreakerStrategy
from http_resilience._strategies.budget.budget import RetryBudget
from http_resilience._strategies.budget.options import RetryBudgetOptions
from http_resilience._strategies.budget.strategy import (
    AsyncRetryBudget,
    BudgetStrategy,
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
    from http_resilience._core.pipeline import AsyncHandler, SyncHandler

__all__ = ["budget_strategy", "fleet_overrides"]


def fleet_overrides(share: ClientShare) -> dict[type[StepOptions], StepBuilder]:
    """The `BuildContext.overrides` of a transport linked through `share`."""
    return {
        RetryBudgetOptions: _Budgets(share),
        BreakerOptions: _Breakers(share),
        QuotaOptions: _Quotas(share),
    }


def budget_strategy(
    share: ClientShare, options: RetryBudgetOptions, context: BuildContext
) -> BudgetStrategy:
    """The transport's budgets; the first budget step is the one shared."""
    if share.budget_terms is not None:
        return BudgetStrategy(options=options, clock=context.clock)

    def make(
        *, ratio: float, min_per_second: float, window: float, now: float
    ) -> RetryBudget:
        return SharedRetryBudget(
            ratio=ratio,
            min_per_second=min_per_second,
            window=window,
            now=now,
            share=share,
        )

    strategy = BudgetStrategy(options=options, clock=context.clock, make=make)
    share.budget_terms = BudgetTerms(
        options.retry_budget_ratio,
        options.retry_budget_min_per_second,
        options.retry_budget_window.total_seconds(),
    )
    share.budget_items = strategy.budgets
    return strategy


def _breaker_strategy(
    share: ClientShare, options: BreakerOptions, context: BuildContext
) -> BreakerStrategy | None:
    if share.break_duration:
        return None  # a second breaker step stays local
    share.break_duration = options.break_duration.total_seconds()
    share.breakers = BreakerStrategy(
        options=options,
        clock=context.clock,
        telemetry=context.telemetry,
        on_transition=share.moved,
    )
    return share.breakers


def _quota_strategy(
    share: ClientShare, options: QuotaOptions, context: BuildContext
) -> SharedQuotaStrategy | None:
    if share.quota is not None:
        return None  # a second quota step stays local
    share.quota = SharedQuotaStrategy(options=options, context=context, share=share)
    return share.quota


class _Budgets:
    """Every retry budget step: the first spends the fleet's budget too."""

    __slots__ = ("_share",)

    def __init__(self, share: ClientShare) -> None:
        self._share = share

    def build_async(
        self,
        step: StepOptions,
        next: AsyncHandler,
        context: BuildContext,
        place: Placement,
    ) -> AsyncHandler | None:
        if not isinstance(step, RetryBudgetOptions):
            return None
        return AsyncRetryBudget(next, budget_strategy(self._share, step, context))

    def build_sync(
        self,
        step: StepOptions,
        next: SyncHandler,
        context: BuildContext,
        place: Placement,
    ) -> SyncHandler | None:
        if not isinstance(step, RetryBudgetOptions):
            return None
        return SyncRetryBudget(next, budget_strategy(self._share, step, context))


class _Breakers:
    """The first breaker step: held open by the fleet too."""

    __slots__ = ("_share",)

    def __init__(self, share: ClientShare) -> None:
        self._share = share

    def build_async(
        self,
        step: StepOptions,
        next: AsyncHandler,
        context: BuildContext,
        place: Placement,
    ) -> AsyncHandler | None:
        if not isinstance(step, BreakerOptions):
            return None
        strategy = _breaker_strategy(self._share, step, context)
        if strategy is None:
            return None
        return AsyncSharedBreaker(next, strategy, self._share)

    def build_sync(
        self,
        step: StepOptions,
        next: SyncHandler,
        context: BuildContext,
        place: Placement,
    ) -> SyncHandler | None:
        if not isinstance(step, BreakerOptions):
            return None
        strategy = _breaker_strategy(self._share, step, context)
        if strategy is None:
            return None
        return SyncSharedBreaker(next, strategy, self._share)


class _Quotas:
    """The first quota step: spends the fleet's allowance."""

    __slots__ = ("_share",)

    def __init__(self, share: ClientShare) -> None:
        self._share = share

    def build_async(
        self,
        step: StepOptions,
        next: AsyncHandler,
        context: BuildContext,
        place: Placement,
    ) -> AsyncHandler | None:
        if not isinstance(step, QuotaOptions):
            return None
        strategy = _quota_strategy(self._share, step, context)
        return None if strategy is None else AsyncSharedQuota(next, strategy)

    def build_sync(
        self,
        step: StepOptions,
        next: SyncHandler,
        context: BuildContext,
        place: Placement,
    ) -> SyncHandler | None:
        if not isinstance(step, QuotaOptions):
            return None
        strategy = _quota_strategy(self._share, step, context)
        return None if strategy is None else SyncSharedQuota(next, strategy)
