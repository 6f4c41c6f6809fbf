"""The retry budget: retries as a share of first attempts, per host or shared.

Finagle's rule, over a sliding window: within any window, the retries (and
hedged copies) sent to a host are at most ``ratio`` times the first attempts
sent there, plus ``min_per_second`` for every second of the window. The second
term is a floor, so a quiet client can still retry. The floor accrues from the
moment the budget is made, starting with one second's worth (a client's very
first failure is retried), up to a whole window's: a process that has just
started cannot spend a window's floor in its first second.

`RetryBudget` is the account: no I/O and no clock of its own, every method
takes ``now``. The retry asks it before it waits for another attempt, and a
retry it refuses is neither waited for nor sent: the call ends as an exhausted
one does. A retry it allowed but that never left the process (an open breaker,
a limiter, a quota refused it) is given back: a local refusal never charges the
budget.

`BudgetRegistry` keeps one budget per host, bounded like the breakers'
registry: when a new host arrives and it is full, the least recently used host
is forgotten, and starts afresh if it comes back.

`RetryBudgetOptions` is the step (`ResiliencePipeline.add_retry_budget`): its
handler makes a call's first attempt a deposit and hands the host's budget to
the retry and hedging inside it, through the `Call`.
"""

from __future__ import annotations

import threading
from array import array
from collections import OrderedDict
from collections.abc import Callable
from datetime import timedelta
from typing import TYPE_CHECKING, ClassVar, Final, Protocol

import httpx
from pydantic import BaseModel, Field

from http_resilience._core.builder import BuildContext, Placement
from http_resilience._core.clock import Clock, reader
from http_resilience._core.fields import FROZEN, Count, Ratio
from http_resilience._core.host_registry import DEFAULT_MAXIMUM_HOSTS
from http_resilience._core.pipeline import AsyncHandler, Call, SyncHandler
from http_resilience._primitives.durations import Duration, DurationInput

__all__ = [
    "DEFAULT_BUDGET_PER_HOST",
    "DEFAULT_RETRY_BUDGET_MIN_PER_SECOND",
    "DEFAULT_RETRY_BUDGET_RATIO",
    "DEFAULT_RETRY_BUDGET_WINDOW",
    "AsyncRetryBudget",
    "BudgetRegistry",
    "BudgetStrategy",
    "MakeBudget",
    "RetryBudget",
    "RetryBudgetOptions",
    "SyncRetryBudget",
]

DEFAULT_RETRY_BUDGET_RATIO: Final = 0.2
DEFAULT_RETRY_BUDGET_MIN_PER_SECOND: Final = 10
DEFAULT_RETRY_BUDGET_WINDOW: Final = timedelta(seconds=10)
DEFAULT_BUDGET_PER_HOST: Final = True

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


class BudgetRegistry:
    """Budgets by host key, at most `maximum` of them, least recently used out.

    Safe from many threads: a host already held is found without a lock; a
    new one is added under one.

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

    __slots__ = ("_budgets", "_lock", "_maximum", "_new")

    def __init__(self, maximum: int, new_budget: NewBudget) -> None:
        if maximum < 1:
            raise ValueError(f"maximum_hosts must be at least 1, got {maximum}")
        self._maximum = maximum
        self._new = new_budget
        self._budgets: OrderedDict[str, RetryBudget] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        """Hosts held."""
        return len(self._budgets)

    def keys(self) -> list[str]:
        """The hosts held, least recently used first."""
        return list(self._budgets)

    def items(self) -> list[tuple[str, RetryBudget]]:
        """Each host held and its budget; copied in one step, from any thread."""
        return [*self._budgets.items()]

    def budget(self, key: str) -> RetryBudget:
        """The budget of host `key`, made on first use; marks it recently used."""
        budgets = self._budgets
        found = budgets.get(key)
        if found is not None:
            try:  # noqa: SIM105 - every call passes here; `suppress` costs more
                budgets.move_to_end(key)
            except KeyError:
                pass  # another thread dropped it just now: it still serves
            return found
        with self._lock:
            found = budgets.get(key)
            if found is None:
                if len(budgets) >= self._maximum:
                    budgets.popitem(last=False)
                found = budgets[key] = self._new()
            return found


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
            self.budget: Callable[[str], RetryBudget] = registry.budget
            self.budgets: Callable[[], list[tuple[str, RetryBudget]]] = registry.items
        else:
            shared = new_budget()
            self.budget = lambda host: shared
            self.budgets = lambda: [("*", shared)]

    @property
    def registry(self) -> BudgetRegistry | None:
        """The per-host budgets; None when one budget is shared."""
        return self._registry


class AsyncRetryBudget:
    """Counts the call's first attempt and hands its host's budget inward."""

    __slots__ = ("_next", "strategy")

    def __init__(self, next: AsyncHandler, strategy: BudgetStrategy) -> None:
        self._next = next
        self.strategy = strategy

    async def handle(self, request: httpx.Request, call: Call) -> httpx.Response:
        """Deposit the first attempt, then run the inside with the budget."""
        strategy = self.strategy
        budget = call.budget = strategy.budget(call.host)
        budget.deposit_in_loop(strategy.now())
        return await self._next.handle(request, call)


class SyncRetryBudget:
    """`AsyncRetryBudget` for the sync chain."""

    __slots__ = ("_next", "strategy")

    def __init__(self, next: SyncHandler, strategy: BudgetStrategy) -> None:
        self._next = next
        self.strategy = strategy

    def handle_sync(self, request: httpx.Request, call: Call) -> httpx.Response:
        """Deposit the first attempt, then run the inside with the budget."""
        strategy = self.strategy
        budget = call.budget = strategy.budget(call.host)
        budget.deposit(strategy.now())
        return self._next.handle_sync(request, call)


class RetryBudgetOptions(BaseModel):
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
    retry_budget_min_per_second: Count = Field(
        default=DEFAULT_RETRY_BUDGET_MIN_PER_SECOND, ge=0
    )
    retry_budget_window: Duration = Field(
        default=DEFAULT_RETRY_BUDGET_WINDOW, gt=timedelta(0)
    )
    budget_per_host: bool = DEFAULT_BUDGET_PER_HOST
    maximum_hosts: Count = Field(default=DEFAULT_MAXIMUM_HOSTS, ge=1)

    if TYPE_CHECKING:
        # Durations in every form pydantic reads; see `HttpResilienceOptions`.
        def __init__(
            self,
            *,
            retry_budget_ratio: float = DEFAULT_RETRY_BUDGET_RATIO,
            retry_budget_min_per_second: int = DEFAULT_RETRY_BUDGET_MIN_PER_SECOND,
            retry_budget_window: DurationInput = DEFAULT_RETRY_BUDGET_WINDOW,
            budget_per_host: bool = DEFAULT_BUDGET_PER_HOST,
            maximum_hosts: int = DEFAULT_MAXIMUM_HOSTS,
        ) -> None: ...

    is_deadline: ClassVar[bool] = False
    repeats: ClassVar[bool] = False

    @property
    def label(self) -> str:
        """``"retry budget"``."""
        return "retry budget"

    @property
    def waits_outside_attempts(self) -> bool:
        """A budget never waits."""
        return False

    def will_repeat(self, request: httpx.Request) -> bool:
        """Never: a budget sends nothing twice."""
        return False

    def build_async(
        self, next: AsyncHandler, context: BuildContext, place: Placement
    ) -> AsyncRetryBudget:
        """This transport's budgets, around `next`."""
        return AsyncRetryBudget(
            next,
            BudgetStrategy(options=self, clock=context.clock),
        )

    def build_sync(
        self, next: SyncHandler, context: BuildContext, place: Placement
    ) -> SyncRetryBudget:
        """This transport's budgets, around `next`."""
        return SyncRetryBudget(
            next,
            BudgetStrategy(options=self, clock=context.clock),
        )
