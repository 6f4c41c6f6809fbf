"""What a transport linked to a `SharedState` builds in its steps' place.

The fleet's variants of three strategies, registered in the transport's
`BuildContext.overrides` (`fleet_overrides`), so that neither the builder nor
the strategies know of the fleet. One `StepBuilder` each: the options it
replaces, how its strategy is built (None: the step's own options build it),
and its drivers.

- the retry budget: the first budget step spends the fleet's budget too
  (`SharedRetryBudget`); a later one stays local;
- the breaker: the first breaker step is held open by the fleet too
  (`AsyncSharedBreaker`, `SyncSharedBreaker`) and publishes its openings; a
  later one stays local;
- the quota: the first quota step spends the fleet's allowance
  (`AsyncSharedQuota`, `SyncSharedQuota`); a later one stays local.
"""

from __future__ import annotations

from functools import partial
from typing import Any

from http_resilience._core.builder import StepBuilder, StepOptions
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

__all__ = ["fleet_overrides"]


def fleet_overrides(
    share: ClientShare,
) -> dict[type[StepOptions], StepBuilder[Any, Any]]:
    """The `BuildContext.overrides` of a transport linked through `share`."""
    return {
        RetryBudgetOptions: StepBuilder(
            RetryBudgetOptions,
            partial(budget_strategy, share),
            AsyncRetryBudget,
            SyncRetryBudget,
        ),
        BreakerOptions: StepBuilder(
            BreakerOptions,
            partial(breaker_strategy, share),
            partial(AsyncSharedBreaker, share=share),
            partial(SyncSharedBreaker, share=share),
        ),
        QuotaOptions: StepBuilder(
            QuotaOptions,
            partial(quota_strategy, share),
            AsyncSharedQuota,
            SyncSharedQuota,
        ),
    }
