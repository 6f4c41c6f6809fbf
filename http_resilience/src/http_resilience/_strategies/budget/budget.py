"""The retry budget's account: `RetryBudget`, and `BudgetRegistry`, one per host.

No I/O and no clock of its own: every method takes ``now``.
"""

from __future__ import annotations

import threading
from array import array
from collections.abc import Callable
from typing import Final, Protocol

from http_resilience._core.host_registry import HostStates

__all__ = ["BUCKETS", "BudgetRegistry", "MakeBudget", "NewBudget", "RetryBudget"]

BUCKETS: Final = 10
"""The window slides in this many steps."""
_UP_FRONT: Final = 1.0
"""Seconds of floor a budget starts with."""
# A retry allowed by a hair more than the rule gives: 0.2 * 5 first attempts
# must buy one retry, whatever the float rounding.
_SLACK: Final = 1e-9


class RetryBudget:
    """One host's account of first attempts and retries over a sliding window.

    Thread-safe: each budget takes its own lock, briefly, for every change
    but `deposit_in_loop`, which an async transport (one event loop, one
    thread) calls on every request, where the lock would be pure cost.

    Args:
        ratio: Retries allowed per first attempt in the window, at least 0.
        min_per_second: Retries allowed per second of the window whatever
            the first attempts, at least 0.
        window: The window, in seconds; more than 0.
        now: When the budget is made: its floor holds one second's worth
            then, and accrues from there.

    Example:
        >>> budget = RetryBudget(ratio=0.5, min_per_second=0, window=10.0, now=0.0)
        >>> budget.deposit(0.0); budget.deposit(0.0)
        >>> budget.withdraw(1.0), budget.withdraw(1.0)
        (True, False)
        >>> budget.withdraw(10.5)  # the first attempts left the window
        False
    """

    __slots__ = (
        "_born",
        "_bucket",
        "_deposits",
        "_floor_cap",
        "_lock",
        "_per_second",
        "_ratio",
        "_total_deposits",
        "_total_withdrawals",
        "_width",
        "_withdrawals",
    )

    def __init__(
        self, *, ratio: float, min_per_second: float, window: float, now: float
    ) -> None:
        self._ratio = ratio
        self._per_second = min_per_second
        self._floor_cap = min_per_second * window
        self._width = window / BUCKETS
        self._born = now - _UP_FRONT
        self._bucket = int(now // self._width)
        # Arrays of plain numbers: objects the cyclic garbage collector never
        # walks, however many hosts the registry holds.
        self._deposits = array("q", bytes(8 * BUCKETS))
        self._withdrawals = array("q", bytes(8 * BUCKETS))
        self._total_deposits = 0
        self._total_withdrawals = 0
        self._lock = threading.Lock()

    @property
    def first_attempts(self) -> int:
        """First attempts counted in the window, as of the last change."""
        return self._total_deposits

    @property
    def retries(self) -> int:
        """Retries charged in the window, as of the last change."""
        return self._total_withdrawals

    def usage(self, now: float) -> tuple[int, int, int]:
        """First attempts, retries and the retries allowed in the window at `now`.

        Reads only, without the lock: the window is not moved, so a reader on
        another thread never races the event loop's `deposit_in_loop`.

        Example:
            >>> budget = RetryBudget(ratio=0.5, min_per_second=0, window=10.0, now=0.0)
            >>> for _ in range(4):
            ...     budget.deposit(0.0)
            >>> budget.withdraw(1.0)
            True
            >>> budget.usage(2.0), budget.usage(11.5)
            ((4, 1, 2), (0, 0, 0))
        """
        bucket = int(now // self._width)
        head = self._bucket
        deposits = withdrawals = 0
        for passed in range(max(head, bucket) - BUCKETS + 1, head + 1):
            deposits += self._deposits[passed % BUCKETS]
            withdrawals += self._withdrawals[passed % BUCKETS]
        floor = min(self._per_second * (now - self._born), self._floor_cap)
        allowed = int(self._ratio * deposits + floor + _SLACK)
        return deposits, withdrawals, allowed

    def deposit(self, now: float) -> None:
        """Count a first attempt, at `now`; from any thread."""
        with self._lock:
            if now // self._width > self._bucket:
                self._slide(now)
            self._deposits[self._bucket % BUCKETS] += 1
            self._total_deposits += 1

    def deposit_in_loop(self, now: float) -> None:
        """`deposit`, without the lock: for the event loop's one thread only.

        Every call passes here, so it does the least it can: the window
        slides only once `now` has left the current bucket.
        """
        if now // self._width > self._bucket:
            self._slide(now)
        self._deposits[self._bucket % BUCKETS] += 1
        self._total_deposits += 1

    def withdraw(self, now: float) -> bool:
        """Charge a retry at `now`: True when the budget allows it, else False."""
        with self._lock:
            index = self._slide(now)
            floor = self._per_second * (now - self._born)
            if floor > self._floor_cap:
                floor = self._floor_cap
            allowed = self._ratio * self._total_deposits + floor + _SLACK
            if self._total_withdrawals + 1 > allowed:
                return False
            self._withdrawals[index] += 1
            self._total_withdrawals += 1
            return True

    def refund(self, now: float) -> None:
        """Give back a retry charged but never sent (refused in this process)."""
        with self._lock:
            index = self._slide(now)
            withdrawals = self._withdrawals
            # The newest bucket that holds one: almost always the current.
            for step in range(BUCKETS):
                slot = (index - step) % BUCKETS
                if withdrawals[slot]:
                    withdrawals[slot] -= 1
                    self._total_withdrawals -= 1
                    return

    def _slide(self, now: float) -> int:
        """Move the window to `now`; the index of `now`'s bucket. Under the lock."""
        bucket = int(now // self._width)
        steps = bucket - self._bucket
        if steps > 0:
            deposits, withdrawals = self._deposits, self._withdrawals
            if steps >= BUCKETS:
                for index in range(BUCKETS):
                    deposits[index] = withdrawals[index] = 0
                self._total_deposits = self._total_withdrawals = 0
            else:
                for passed in range(self._bucket + 1, bucket + 1):
                    index = passed % BUCKETS
                    self._total_deposits -= deposits[index]
                    self._total_withdrawals -= withdrawals[index]
                    deposits[index] = withdrawals[index] = 0
            self._bucket = bucket
        # A clock that went back counts in the current bucket.
        return self._bucket % BUCKETS


NewBudget = Callable[[], RetryBudget]


class MakeBudget(Protocol):
    """Makes a budget from `RetryBudget`'s arguments."""

    def __call__(
        self, *, ratio: float, min_per_second: float, window: float, now: float
    ) -> RetryBudget:
        """A new budget."""
        ...


class BudgetRegistry(HostStates[RetryBudget]):
    """Budgets by host key, at most `maximum` of them, least recently used out.

    A `HostStates` of budgets (safe from many threads); the strategy reads
    `get` itself, one call less on every call.

    Args:
        maximum: The bound; at least 1.
        new_budget: Makes the budget of a host seen for the first time.

    Example:
        >>> registry = BudgetRegistry(
        ...     2, lambda: RetryBudget(ratio=0.2, min_per_second=1, window=10, now=0)
        ... )
        >>> for key in ("http://a:80", "http://b:80", "http://c:80"):
        ...     _ = registry.budget(key)
        >>> registry.keys()
        ['http://b:80', 'http://c:80']
    """

    __slots__ = ()

    def budget(self, key: str) -> RetryBudget:
        """`get`: the budget of host `key`, made on first use."""
        return self.get(key)
