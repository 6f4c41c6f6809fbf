"""The retry budget's strategy: `BudgetStrategy` and its handlers, async and sync."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import httpx

from http_resilience._core.call import Call
from http_resilience._core.clock import Clock, reader
from http_resilience._core.drive import AsyncDriver, SyncDriver
from http_resilience._strategies.budget.budget import (
    BudgetRegistry,
    MakeBudget,
    RetryBudget,
)

if TYPE_CHECKING:
    from http_resilience._strategies.budget.options import RetryBudgetOptions

__all__ = ["AsyncRetryBudget", "BudgetStrategy", "SyncRetryBudget"]


class BudgetStrategy:
    """Which budget a call spends from: its host's, or the one every host shares.

    The retry and hedging inside report a refusal; the budget only answers.

    Args:
        options: The budget's options.
        clock: The budget's time.
        make: Makes each budget (`RetryBudget`'s signature): a subclass of
            `RetryBudget` that also asks someone else, say.

    Attributes:
        budget: The budget of a host (given its normalised key).
        budgets: Each budget made so far and its host (``"*"`` for the one
            budget every host shares).
        now: Reads the budget's clock.
    """

    __slots__ = ("_registry", "budget", "budgets", "now")

    def __init__(
        self,
        *,
        options: RetryBudgetOptions,
        clock: Clock,
        make: MakeBudget | None = None,
    ) -> None:
        self.now = now = reader(clock)
        ratio = options.retry_budget_ratio
        per_second = options.retry_budget_min_per_second
        window = options.retry_budget_window.total_seconds()
        made = RetryBudget if make is None else make

        def new_budget() -> RetryBudget:
            return made(
                ratio=ratio, min_per_second=per_second, window=window, now=now()
            )

        self._registry: BudgetRegistry | None = None
        if options.budget_per_host:
            registry = BudgetRegistry(options.maximum_hosts, new_budget)
            self._registry = registry
            self.budget: Callable[[str], RetryBudget] = registry.get
            self.budgets: Callable[[], list[tuple[str, RetryBudget]]] = registry.items
        else:
            shared = new_budget()
            self.budget = lambda host: shared
            self.budgets = lambda: [("*", shared)]

    @property
    def registry(self) -> BudgetRegistry | None:
        """The per-host budgets; None when one budget is shared."""
        return self._registry


class AsyncRetryBudget(AsyncDriver[BudgetStrategy]):
    """Counts the call's first attempt and hands its host's budget inward."""

    __slots__ = ()

    async def handle(self, request: httpx.Request, call: Call) -> httpx.Response:
        """Deposit the first attempt, then run the inside with the budget."""
        strategy = self.strategy
        budget = call.budget = strategy.budget(call.host)
        budget.deposit_in_loop(strategy.now())
        return await self._next.handle(request, call)


class SyncRetryBudget(SyncDriver[BudgetStrategy]):
    """`AsyncRetryBudget` for the sync chain."""

    __slots__ = ()

    def handle_sync(self, request: httpx.Request, call: Call) -> httpx.Response:
        """Deposit the first attempt, then run the inside with the budget."""
        strategy = self.strategy
        budget = call.budget = strategy.budget(call.host)
        budget.deposit(strategy.now())
        return self._next.handle_sync(request, call)
