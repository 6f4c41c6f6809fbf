"""The retry budget's options: `RetryBudgetOptions`, its defaults, and its build."""

from __future__ import annotations

from datetime import timedelta
from typing import Final

from pydantic import BaseModel, Field

from http_resilience._core.builder import BuildContext
from http_resilience._core.fields import (
    FROZEN,
    NonNegativeCount,
    PositiveCount,
    PositiveDuration,
    Ratio,
)
from http_resilience._core.host_registry import DEFAULT_MAXIMUM_HOSTS
from http_resilience._core.step_defaults import SyncStepDefaults
from http_resilience._primitives.setting import default
from http_resilience._strategies.budget.strategy import (
    AsyncRetryBudget,
    BudgetStrategy,
    SyncRetryBudget,
)

__all__ = [
    "DEFAULT_BUDGET_PER_HOST",
    "DEFAULT_RETRY_BUDGET_MIN_PER_SECOND",
    "DEFAULT_RETRY_BUDGET_RATIO",
    "DEFAULT_RETRY_BUDGET_WINDOW",
    "RetryBudgetOptions",
]

DEFAULT_RETRY_BUDGET_RATIO: Final = 0.2
DEFAULT_RETRY_BUDGET_MIN_PER_SECOND: Final = 10
DEFAULT_RETRY_BUDGET_WINDOW: Final = timedelta(seconds=10)
DEFAULT_BUDGET_PER_HOST: Final = True


class RetryBudgetOptions(SyncStepDefaults, BaseModel):
    """The retry budget of a custom pipeline: it governs the retry and hedging after it.

    Within any `retry_budget_window`, the retries and hedged copies sent to a
    host are at most `retry_budget_ratio` times the calls that started there,
    plus `retry_budget_min_per_second` per second of the window (that floor
    accrues from the moment the host is first seen). A retry the budget
    refuses is not waited for nor sent: the call ends as if its retries were
    spent, with a `RejectionEvent` of reason ``"retry_budget"``. A retry that
    a breaker, a limiter or a quota then refuses in this process is given
    back.

    Attributes:
        retry_budget_ratio: Retries per call in the window, at least 0.
            Default 0.2.
        retry_budget_min_per_second: Retries per second allowed whatever the
            calls, at least 0. Default 10.
        retry_budget_window: The sliding window. Default 10 s.
        budget_per_host: One budget per scheme, host and port; False: one for
            every host of the transport. Default True.
        maximum_hosts: The per-host budgets kept, least recently used
            forgotten first. Default 1024.

    Raises:
        pydantic.ValidationError: On construction, naming every invalid field.

    Example:
        >>> RetryBudgetOptions(retry_budget_ratio=0.1).retry_budget_window
        datetime.timedelta(seconds=10)
    """

    model_config = FROZEN

    retry_budget_ratio: Ratio = Field(
        default=DEFAULT_RETRY_BUDGET_RATIO, ge=0.0, allow_inf_nan=False
    )
    retry_budget_min_per_second: NonNegativeCount = DEFAULT_RETRY_BUDGET_MIN_PER_SECOND
    retry_budget_window: PositiveDuration = default(DEFAULT_RETRY_BUDGET_WINDOW)
    budget_per_host: bool = DEFAULT_BUDGET_PER_HOST
    maximum_hosts: PositiveCount = DEFAULT_MAXIMUM_HOSTS

    _label = "retry budget"
    _async_driver = AsyncRetryBudget
    _sync_driver = SyncRetryBudget

    def _strategy(self, context: BuildContext) -> BudgetStrategy:
        """This transport's budgets."""
        return BudgetStrategy(options=self, clock=context.clock)
