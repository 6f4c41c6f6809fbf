"""The seam strategies compose on: `Call` and the handlers.

A pipeline is a chain of handlers built once per transport, innermost first
(starlette's way: each strategy is constructed around the next, so the first
in the list ends up outermost). A chain is async (`AsyncHandler`, ending in
`AsyncSend`) or sync (`SyncHandler`, ending in `SyncSend`), never both: each
strategy's async and sync handlers are thin drivers over one decision (the
breaker's state machine, the retry's delays, the limiter's counts), and a
strategy that only makes sense on an event loop (hedging) has no sync handler
at all. The terminal sends are in `http_resilience._core.send`.

The chain is per transport; the `Call` is per logical request: what the
strategies share about it (the client, the method, the normalised host, the
current deadline) without rebuilding the request.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Literal, Protocol

import httpx

from http_resilience._core.pool import PoolWait

if TYPE_CHECKING:
    from http_resilience._core.telemetry import Telemetry

__all__ = [
    "AsyncHandler",
    "Budget",
    "Call",
    "DeadlineKind",
    "SyncHandler",
    "charged",
]

DeadlineKind = Literal["attempt", "total"]


class Budget(Protocol):
    """What a retry or a hedge asks before it sends again (the retry budget)."""

    def withdraw(self, now: float) -> bool:
        """Charge one more attempt at `now`: True if allowed, False if refused."""
        ...

    def refund(self, now: float) -> None:
        """Give back an attempt charged at `now` but refused in this process."""
        ...


def charged(call: Call, now: float, telemetry: Telemetry) -> bool:
    """Charge the call's retry budget, if any, for one more attempt at `now`.

    True when it may go (or there is no budget); False when the budget
    refuses, reported as a `RejectionEvent` of reason ``"retry_budget"``. The
    retry and hedging both ask it.
    """
    budget = call.budget
    if budget is None or budget.withdraw(now):
        return True
    telemetry.rejection(call.method, call.host, "retry_budget")
    return False


class Call:
    """One logical request as the strategies see it: shared, mutable, per call.

    Attributes:
        client: The client's name.
        method: The request's method.
        host: The normalised ``scheme://host:port``: safe to log.
        attempt: The physical attempt in progress, from 1.
        deadline: When the innermost timeout around this point runs out, in
            seconds on the pipeline's clock; infinity when there is none. A
            timeout strategy sets it for the strategies inside it, so a wait
            can tell whether it would pass the deadline.
        deadline_kind: Which timeout `deadline` belongs to.
        deadline_span: That timeout's length, in seconds.
        phase_timeout: When set, each attempt's httpx phase timeouts (connect,
            read, write, pool), in seconds: the pipeline owns time.
        owner: The task the call runs in, once a strategy has looked it up
            (async only; an `asyncio.Task`, or anyio's `TaskInfo` on trio:
            `current_task`); `AsyncSend` marks attempts with it.
        budget: The retry budget the retries and hedged copies of this call
            spend from, set by a retry budget around them; None: no budget.
        tell_attempt: Whether attempts after the first carry their number
            (`RETRY_ATTEMPT_HEADER`), set by a retry that detects nested
            retries.
        pool_timeout: When set with `phase_timeout`, the bound of the wait for
            a connection of a pool the send can see (`pool_sweeper`), in
            seconds: the time the deadline around the attempt's leaves, since
            the attempt's own clock starts once it has a connection.
        pool_wait: Set by the timeout that cuts the attempt (async only): told
            by the send when the attempt leaves the pool's queue.
        attempt_cap: Set by a breaker whose host's baseline is armed: the
            most seconds an attempt timeout inside it gives the attempt (the
            host's own 95th percentile times `adaptive_timeout_factor`);
            None: the attempt timeout's own.
    """

    __slots__ = (
        "attempt",
        "attempt_cap",
        "budget",
        "client",
        "deadline",
        "deadline_kind",
        "deadline_span",
        "host",
        "method",
        "owner",
        "phase_timeout",
        "pool_timeout",
        "pool_wait",
        "tell_attempt",
    )

    def __init__(self, client: str, method: str, host: str) -> None:
        self.client = client
        self.method = method
        self.host = host
        self.attempt = 1
        self.deadline = math.inf
        self.deadline_kind: DeadlineKind = "total"
        self.deadline_span = math.inf
        self.phase_timeout: float | None = None
        self.pool_timeout: float | None = None
        self.pool_wait: PoolWait | None = None
        self.owner: object = None
        self.budget: Budget | None = None
        self.tell_attempt = False
        self.attempt_cap: float | None = None

    def fork(self, attempt: int) -> Call:
        """A copy of this call for an attempt that runs beside others (a hedge).

        The copy has the same deadline; its `owner` is left unset, so the
        strategies inside look up the task the attempt runs in (its own).
        """
        twin = Call(self.client, self.method, self.host)
        twin.attempt = attempt
        twin.deadline = self.deadline
        twin.deadline_kind = self.deadline_kind
        twin.deadline_span = self.deadline_span
        twin.phase_timeout = self.phase_timeout
        twin.pool_timeout = self.pool_timeout
        twin.budget = self.budget
        twin.tell_attempt = self.tell_attempt
        return twin

    def where(self) -> str:
        """``"GET https://host:443 (client 'name')"``, for messages."""
        return f"{self.method} {self.host} (client {self.client!r})"


class AsyncHandler(Protocol):
    """One link of an async chain: a strategy, or the terminal `AsyncSend`.

    A link treats the request it is handed as read-only: one that needs to
    change it passes a copy inward (the send copies it for every attempt).
    """

    async def handle(self, request: httpx.Request, call: Call) -> httpx.Response:
        """Handle `request` on an event loop and return its response."""
        ...


class SyncHandler(Protocol):
    """One link of a sync chain: a strategy, or the terminal `SyncSend`."""

    def handle_sync(self, request: httpx.Request, call: Call) -> httpx.Response:
        """Handle `request`, blocking, and return its response."""
        ...
