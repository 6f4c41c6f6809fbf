"""One replica's counted news: what a sync sends again, the same, until answered.

The requests only count (first attempts, leases spent and refused, requests
sent unleased); `counted` reads those counters, once per batch, into the rows
of a numbered `CountedBatch`: per host, what came since the last batch, the
unused leases handed back, and the leases wanted. `RedisBatch` sends it (see
`http_resilience._fleet.redis_batch`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from http_resilience._fleet.budget import SharedRetryBudget
from http_resilience._fleet.quota import QuotaLease

if TYPE_CHECKING:
    from http_resilience._fleet.link import ClientShare

__all__ = ["CountedBatch", "counted"]

# Per host: its budget, first attempts, unused leases given back, leases wanted.
_BudgetRow = tuple[str, SharedRetryBudget, int, int, int]
# Per host: its lease, the quota seen, unused leases given back, requests sent
# unleased, leases wanted.
_QuotaRow = tuple[str, QuotaLease, tuple[int, float] | None, int, int, int]


@dataclass
class CountedBatch:
    """One replica's counted news, numbered: sent again, the same, until answered.

    Attributes:
        sequence: Its number, for the replica (0: nothing counted, no number).
        since: When it was first sent (the fleet's time, seconds).
        budgets: Per host: its budget, first attempts, unused leases handed
            back, leases wanted.
        quotas: Per host: its lease, the quota seen, unused leases handed
            back, requests sent unleased, leases wanted.
    """

    sequence: int
    since: float
    budgets: list[_BudgetRow]
    quotas: list[_QuotaRow]


def counted(share: ClientShare, now: float, maximum: int) -> CountedBatch:
    """The counted news since the last batch, taken as sent: a new batch.

    At most `maximum` hosts of each kind, and `maximum` leases wanted per host.
    """
    budgets = _budget_rows(share, now, maximum)
    quotas = _quota_rows(share, now, maximum)
    sequence = 0
    if budgets or quotas:
        share.sequence += 1
        sequence = share.sequence
    return CountedBatch(sequence, now, budgets, quotas)


def _budget_rows(share: ClientShare, now: float, maximum: int) -> list[_BudgetRow]:
    """Per host: first attempts since, unused given back now, wanted.

    Unused leases are kept while they last (`LEASE_HOLD`), so a replica
    that calls less often than it syncs still holds its retries; only
    expired ones, or all of a closing link's, are handed back.
    """
    rows: list[_BudgetRow] = []
    if share.budget_terms is None or share.budget_items is None:
        return rows
    closing = share.closing
    for host, budget in share.budget_items():
        if not isinstance(budget, SharedRetryBudget):
            continue
        deposited, spent, refused = budget.deposited, budget.spent, budget.refused
        unleased = budget.unleased
        deposits = deposited - budget.sent_deposits
        demand = (
            (spent - budget.seen_spent)
            + (refused - budget.seen_refused)
            + (unleased - budget.seen_unleased)
        )
        unused = max(budget.granted - budget.returned - spent, 0)
        expired = unused > 0 and (closing or now >= budget.hold_until)
        if not (deposits or demand or expired):
            continue
        unused = budget.give_back() if expired else 0
        held = 0 if expired else max(budget.granted - budget.returned - spent, 0)
        want = 0
        if (deposits or demand) and not closing:
            want = max(min(maximum, 2 * demand + 1) - held, 0)
        budget.sent_deposits = deposited
        budget.seen_spent, budget.seen_refused = spent, refused
        budget.seen_unleased = unleased
        rows.append((host, budget, deposits, unused, want))
        if len(rows) >= maximum:
            break
    return rows


def _quota_rows(share: ClientShare, now: float, maximum: int) -> list[_QuotaRow]:
    """Per host: the quota seen, unused given back, sent unleased, wanted.

    Unused leases are kept as the budget's are (see `_budget_rows`), and
    within the window they were leased in.
    """
    strategy = share.quota
    if strategy is None:
        return []
    closing = share.closing
    with share.lock:
        leases = list(strategy.leases.items())
    rows: list[_QuotaRow] = []
    for host, lease in leases:
        with lease.lock:
            seen, lease.observed = lease.observed, None
            calls, spent, refused = lease.calls, lease.spent, lease.refused
            demand = (
                (calls - lease.seen_calls)
                + (spent - lease.seen_spent)
                + (refused - lease.seen_refused)
            )
            unused = lease.unused()
            # Expired: give back now, under the lock, so nothing spends it.
            expired = closing or now >= lease.hold_until
            giving = unused if expired else 0
            lease.returned += giving
            unused -= giving
        if not (seen is not None or demand or giving or lease.active):
            continue
        want = 0
        if demand and not closing:
            want = max(min(maximum, 2 * demand + 1) - unused, 0)
        unleased = calls - lease.seen_calls
        lease.seen_calls, lease.seen_spent, lease.seen_refused = (
            calls,
            spent,
            refused,
        )
        rows.append((host, lease, seen, giving, unleased, want))
        if len(rows) >= maximum:
            break
    return rows
