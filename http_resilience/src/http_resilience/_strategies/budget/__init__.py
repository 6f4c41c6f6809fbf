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

`budget.py`: `RetryBudget` and `BudgetRegistry`, pure (told `now`);
`strategy.py`: `BudgetStrategy` and its two handlers; `options.py`:
`RetryBudgetOptions` and its defaults.
"""
