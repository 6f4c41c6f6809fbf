"""The fleet's retry budget: a host's local budget, plus retries leased.

While the link is up and the host has been synced, a retry needs both the
replica's own budget and one retry leased from the fleet's; the sync thread
hands back what was not spent and asks for what the last interval needed, so
the fleet together stays within one budget. Link down (or a host not synced
yet): the local budget alone decides.

`budget_strategy` builds a transport's budgets: the first budget step spends
the fleet's budget too (`SharedRetryBudget`); a later one stays local.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

from http_resilience._strategies.budget.budget import RetryBudget
from http_resilience._strategies.budget.strategy import BudgetStrategy

if TYPE_CHECKING:
    from http_resilience._core.builder import BuildContext
    from http_resilience._fleet.link import ClientShare
    from http_resilience._strategies.budget.options import RetryBudgetOptions

__all__ = ["BudgetTerms", "SharedRetryBudget", "budget_strategy"]


class BudgetTerms(NamedTuple):
    """The budget's rule, as Redis applies it to the fleet's counts."""

    ratio: float
    min_per_second: float
    window: float


class SharedRetryBudget(RetryBudget):
    """A host's `RetryBudget`, plus the retries leased from the fleet's budget.

    Counters written by the requests: `deposited`, `spent`, `refused`,
    `unleased` (retries the local budget alone allowed: demand, not spent).
    Written by the sync thread: `granted`, `returned`, `synced`,
    `hold_until`, `sent_deposits`, `seen_spent`, `seen_refused` (each
    advanced when the news is put in a batch, `granted` when Redis answers
    it).
    """

    __slots__ = (
        "_share",
        "deposited",
        "granted",
        "hold_until",
        "refused",
        "returned",
        "seen_refused",
        "seen_spent",
        "seen_unleased",
        "sent_deposits",
        "spent",
        "synced",
        "unleased",
    )

    def __init__(
        self,
        *,
        ratio: float,
        min_per_second: float,
        window: float,
        now: float,
        share: ClientShare,
    ) -> None:
        super().__init__(
            ratio=ratio, min_per_second=min_per_second, window=window, now=now
        )
        self._share = share
        self.deposited = self.spent = self.refused = self.unleased = 0
        self.granted = self.returned = 0
        self.hold_until = 0.0
        self.sent_deposits = self.seen_spent = self.seen_refused = 0
        self.seen_unleased = 0
        self.synced = False

    def deposit(self, now: float) -> None:
        """Count a first attempt locally, and for the fleet at the next sync."""
        super().deposit(now)
        with self._lock:
            self.deposited += 1

    def deposit_in_loop(self, now: float) -> None:
        """`deposit`, without the lock: for the event loop's one thread only."""
        super().deposit_in_loop(now)
        self.deposited += 1

    def withdraw(self, now: float) -> bool:
        """The local budget's answer; while shared, a leased retry is needed too."""
        if not super().withdraw(now):
            return False
        if not (self.synced and self._share.up):
            # Demand all the same: the first lease is sized by it.
            self.unleased += 1
            return True
        with self._lock:
            if self.granted - self.returned - self.spent > 0:
                self.spent += 1
                return True
            self.refused += 1
        super().refund(now)
        self._share.wake()
        return False

    def refund(self, now: float) -> None:
        """Give back a retry never sent, to the local budget and the lease."""
        super().refund(now)
        if self.synced and self._share.up:
            with self._lock:
                if self.spent > 0:
                    self.spent -= 1

    def lease(self, granted: int, hold_until: float) -> None:
        """The sync thread's: `granted` retries leased, kept until `hold_until`."""
        self.granted += granted
        if granted:
            self.hold_until = hold_until
        self.synced = True

    def give_back(self) -> int:
        """The sync thread's: hand back the leased retries not spent; how many.

        Under the lock, so no request spends one of them meanwhile.
        """
        with self._lock:
            unused = max(self.granted - self.returned - self.spent, 0)
            self.returned += unused
        return unused


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
