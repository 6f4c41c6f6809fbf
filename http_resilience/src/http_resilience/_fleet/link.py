"""One transport's link to a `SharedState`: local first, told the fleet's view.

Nothing here talks to Redis or waits. The request path reads and writes plain
Python objects; the `SharedState`'s sync thread reads what the requests did
(counters that only grow, and an outbox of breaker news), sends it in one
batch, and writes back the fleet's view (leases of retries, open breakers,
probe claims won). Each counter has one writer: the requests, or the thread.

`ClientShare` holds that news and that view; the fleet's variant of each
strategy reads and writes it: the retry budget in
`http_resilience._fleet.budget`, the breakers in
`http_resilience._fleet.breaker`, the published quota in
`http_resilience._fleet.quota`. Breakers that opened while Redis was away are
published when it answers again (`reopened`).
"""

from __future__ import annotations

import secrets
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import KW_ONLY, dataclass, field
from typing import TYPE_CHECKING, Final, NamedTuple

from http_resilience._core.call import Call
from http_resilience._core.errors import BrokenCircuitError
from http_resilience._core.events import CLOSED, OPEN, BreakerState
from http_resilience._core.host_registry import OVERFLOW_HOST
from http_resilience._core.telemetry import Telemetry

if TYPE_CHECKING:
    from http_resilience._fleet.budget import BudgetTerms
    from http_resilience._fleet.counted import CountedBatch
    from http_resilience._fleet.quota import SharedQuotaStrategy
    from http_resilience._strategies.breaker.strategy import BreakerStrategy
    from http_resilience._strategies.budget.budget import RetryBudget

__all__ = [
    "OPEN_OP",
    "PROBE_OP",
    "ClientShare",
    "FleetBreak",
]

OPEN_OP: Final = "o"
CLOSE_OP: Final = "c"
PROBE_OP: Final = "p"


class FleetBreak(NamedTuple):
    """A host the fleet holds open, as of the last sync (wall-clock seconds).

    Attributes:
        until: When its break ends.
        claim_until: When the current probe claim ends (0: none).
        mine: Whether this replica holds the claim.
    """

    until: float
    claim_until: float
    mine: bool


def _probe_token() -> int:
    """Who holds a probe claim: unique to one transport, random.

    Below 10**13, so Lua writes it back exactly (it formats numbers with 14
    digits).
    """
    return secrets.randbelow(10**12) + 1


@dataclass(eq=False, repr=False, slots=True)
class ClientShare:
    """What one transport (client `name`) shares through its `SharedState`.

    Args:
        name: The client's name: part of every key.
        wall: The fleet's time, Unix seconds.
        wake: Asks the sync thread to sync now.
        interval: The sync interval, seconds.
        detach: Called once when the transport closes.

    Attributes:
        up: Whether the last sync succeeded: the fleet's view is in force.
        lost: Whether Redis was lost since the last sync that reached it:
            the next one publishes the breakers open then.
        open_hosts: The hosts the fleet holds open (replaced whole by the
            thread; read without a lock).
        probes: Probe claims won and not used yet: host -> claim end.
        outbox: Breaker news for the next sync: (op, host, wall seconds).
        replica: This link's id in Redis, random, kept for its lifetime: the
            script remembers the last batch of each replica it applied.
        sequence: The number of this link's last numbered batch.
        pending: The counted news sent and not answered yet: sent again, the
            same, until Redis answers it (the sync thread's).
    """

    name: str
    _: KW_ONLY
    wall: Callable[[], float]
    wake: Callable[[], None]
    interval: float
    detach: Callable[[ClientShare], None]
    up: bool = field(default=False, init=False)
    token: int = field(default_factory=_probe_token, init=False)
    replica: str = field(default_factory=lambda: secrets.token_hex(8), init=False)
    sequence: int = field(default=0, init=False)
    pending: CountedBatch | None = field(default=None, init=False)
    open_hosts: dict[str, FleetBreak] = field(
        default_factory=dict[str, FleetBreak], init=False
    )
    probes: dict[str, float] = field(default_factory=dict[str, float], init=False)
    claims_seen: dict[str, float] = field(default_factory=dict[str, float], init=False)
    # Hosts a call was refused for during the fleet's break: their probe
    # is claimed at the first sync after the break ends.
    waiting: set[str] = field(default_factory=set[str], init=False)
    outbox: deque[tuple[str, str, float]] = field(
        default_factory=deque[tuple[str, str, float]], init=False
    )
    budget_terms: BudgetTerms | None = field(default=None, init=False)
    budget_items: Callable[[], list[tuple[str, RetryBudget]]] | None = field(
        default=None, init=False
    )
    break_duration: float = field(default=0.0, init=False)
    breakers: BreakerStrategy | None = field(default=None, init=False)
    quota: SharedQuotaStrategy | None = field(default=None, init=False)
    lost: bool = field(default=False, init=False)
    lock: threading.Lock = field(default_factory=threading.Lock, init=False)
    _closed: bool = field(default=False, init=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False)

    # -- the request path --------------------------------------------------

    def moved(self, key: str, previous: BreakerState, current: BreakerState) -> None:
        """A local breaker moved: an opening is news for the fleet at once."""
        if key == OVERFLOW_HOST or self.lost:
            return  # lost: `reopened` tells the fleet when Redis is back
        if current == OPEN:
            self.outbox.append((OPEN_OP, key, self.wall() + self.break_duration))
            self.wake()
        elif current == CLOSED:
            self.outbox.append((CLOSE_OP, key, 0.0))
            self.wake()

    def admit(
        self, key: str, fleet: FleetBreak, call: Call, telemetry: Telemetry
    ) -> bool:
        """Whether this call is the fleet's probe of `key`; raises if refused.

        Raises:
            BrokenCircuitError: The fleet holds the host open, or its break is
                over and another replica (or another call) probes it.
        """
        now = self.wall()
        if now < fleet.until:
            wait = fleet.until - now
            if key not in self.waiting:
                with self.lock:
                    self.waiting.add(key)
        elif self.probes.pop(key, None) is not None:
            return True
        else:
            # Ask Redis for the probe; refuse this call meanwhile.
            self.outbox.append((PROBE_OP, key, 0.0))
            self.wake()
            wait = self.interval
        telemetry.rejection(call.method, call.host, "circuit_open")
        raise BrokenCircuitError(
            f"{call.where()}: circuit open across the replicas, request not sent",
            retry_after=wait,
        )

    def probed(self, key: str, failed: bool) -> None:
        """The fleet's probe of `key` answered: close or reopen it for all."""
        if failed:
            self.outbox.append((OPEN_OP, key, self.wall() + self.break_duration))
        else:
            self.outbox.append((CLOSE_OP, key, 0.0))
            view = dict(self.open_hosts)
            view.pop(key, None)
            self.open_hosts = view
        self.wake()

    def reset(self, key: str) -> None:
        """An operator's reset of `key`: the fleet's break is lifted for all.

        The host is taken out of this replica's view at once; the next sync
        (woken now) deletes it in Redis, so every replica's view loses it.
        """
        self.outbox.append((CLOSE_OP, key, 0.0))
        view = dict(self.open_hosts)
        view.pop(key, None)
        self.open_hosts = view
        self.probes.pop(key, None)
        self.wake()

    # -- the sync thread ---------------------------------------------------

    @property
    def closing(self) -> bool:
        """Whether the transport closed: its last sync hands back every lease."""
        return self._closed

    def standing(self, now: float) -> list[tuple[str, str, float]]:
        """Orders sent at every sync, not queued: isolations and probes due.

        An operator's isolation is published as a break renewed at each sync
        (so it never outlives the replica that holds the order by more than
        one break); a host whose fleet break is over and that a call here was
        refused for has its probe claimed now, so the next call is the probe.
        """
        orders: list[tuple[str, str, float]] = []
        strategy = self.breakers
        if strategy is not None:
            until = now + self.break_duration
            orders += [(OPEN_OP, key, until) for key in strategy.manual.isolated]
        if self.waiting:
            with self.lock:
                waiting = list(self.waiting)
            view = self.open_hosts
            for key in waiting:
                fleet = view.get(key)
                if fleet is None:
                    with self.lock:
                        self.waiting.discard(key)
                elif fleet.until <= now and fleet.claim_until <= now:
                    with self.lock:
                        self.waiting.discard(key)
                    orders.append((PROBE_OP, key, 0.0))
        return orders

    def fall_back(self) -> None:
        """Redis is away: forget the fleet's view; local state decides.

        The breaker news waiting is dropped (so it cannot pile up while Redis
        is away): the first sync that reaches Redis again publishes the
        breakers open then (`reopened`). The counted news sent and not
        answered (`pending`) is kept: it is sent again, the same, until Redis
        answers it.
        """
        self.up = False
        self.lost = True
        self.outbox.clear()
        self.token = _probe_token()
        self.open_hosts = {}
        self.probes = {}
        self.claims_seen = {}
        with self.lock:
            self.waiting.clear()

    def reopened(self) -> list[tuple[str, str, float]]:
        """Openings of the breakers open now, to publish after an outage."""
        strategy = self.breakers
        if strategy is None:
            return []
        now, wall = strategy.now(), self.wall()
        news: list[tuple[str, str, float]] = []
        for key, breaker in strategy.breakers():
            left = breaker.retry_after(now)
            if key != OVERFLOW_HOST and left is not None and left > 0:
                news.append((OPEN_OP, key, wall + left))
        return news

    def close(self) -> None:
        """Detach from the `SharedState` (once)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self.detach(self)
