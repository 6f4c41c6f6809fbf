"""The circuit breaker around each attempt: `BreakerStrategy` and its drivers.

`BreakerStrategy` asks the breaker before each attempt and tells it how the
attempt went; `AsyncBreaker` and `SyncBreaker` drive it.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Final

import httpx

from http_resilience._core.call import AsyncHandler, Call, SyncHandler
from http_resilience._core.classify import failure_table, is_classified_failure
from http_resilience._core.clock import Clock, reader
from http_resilience._core.drive import AsyncDriver, SyncDriver
from http_resilience._core.errors import AttemptTimeoutError, BrokenCircuitError
from http_resilience._core.events import BreakerState, TripRule
from http_resilience._core.host_registry import ALL_HOSTS
from http_resilience._core.telemetry import Telemetry
from http_resilience._strategies.breaker.control import ManualState
from http_resilience._strategies.breaker.registry import HostRegistry, HostTransition
from http_resilience._strategies.breaker.state import (
    PASS,
    REJECTED,
    CircuitBreaker,
    Ticket,
    TransitionListener,
)

if TYPE_CHECKING:
    from http_resilience._strategies.breaker.options import BreakerOptions

__all__ = [
    "AsyncBreaker",
    "BreakerStrategy",
    "SyncBreaker",
    "ThreadedBreakers",
]


def _both(first: HostTransition, second: HostTransition) -> HostTransition:
    def tell(key: str, previous: BreakerState, current: BreakerState) -> None:
        first(key, previous, current)
        second(key, previous, current)

    return tell


class BreakerStrategy:
    """The circuit breaker around each physical attempt, per host or shared.

    What both chains decide: which breaker guards a host, whether an attempt
    may go, and what its outcome tells the breaker. A failure status or a
    `FAILURE_EXCEPTIONS` exception is a failure, any other response a success;
    any other exception (a total timeout, a cancellation, a bug, an error the
    client caused itself: `SELF_CAUSED_EXCEPTIONS`) records nothing and passes
    a probe's turn on. `AsyncBreaker` and `SyncBreaker` drive it.

    Args:
        options: failure_ratio, minimum_throughput, sampling_duration,
            break_duration, breaker_per_host and maximum_hosts.
        clock: The breaker's time.
        telemetry: Where transitions and rejections are reported.
        on_transition: Also told (host key, previous, current) on every
            transition (to publish a breaker that opened, say).

    An operator's orders (`manual`) come first: an isolated host is refused
    whatever its breaker says, and a reset closes a breaker before the next
    attempt is let through.

    Attributes:
        breaker: The breaker that guards a host (given its normalised key).
        breakers: Each breaker made so far and the host it guards (``"*"``
            for the one breaker every host shares).
        now: Reads the breaker's clock.
        manual: The hosts an operator isolated, and the resets to carry out.
        options: The options the breakers were built from.
        registry: The per-host breakers; None when one breaker is shared.
        telemetry: Where transitions and rejections are reported.
    """

    __slots__ = (
        "_classify",
        "_shared",
        "breaker",
        "breakers",
        "failed",
        "guards",
        "manual",
        "now",
        "options",
        "registry",
        "telemetry",
    )

    def __init__(
        self,
        *,
        options: BreakerOptions,
        clock: Clock,
        telemetry: Telemetry,
        on_transition: HostTransition | None = None,
    ) -> None:
        self.options = options
        self.now = reader(clock)
        self.telemetry = telemetry
        self.failed = failure_table(options.breaker_on_status)
        self._classify = options.should_break
        self.manual = ManualState()
        self.guards = options.guards()
        self.registry: HostRegistry | None = None
        self._shared: CircuitBreaker | None = None
        tell: HostTransition = telemetry.breaker
        if on_transition is not None:
            tell = _both(telemetry.breaker, on_transition)

        if options.breaker_per_host:
            registry = HostRegistry(options.maximum_hosts, self._new_breaker, tell)
            self.registry = registry
            self.breaker: Callable[[str], CircuitBreaker] = registry.breaker
            self.breakers: Callable[[], list[tuple[str, CircuitBreaker]]] = (
                registry.items
            )
        else:

            def moved(
                breaker: CircuitBreaker, previous: BreakerState, current: BreakerState
            ) -> None:
                tell(ALL_HOSTS, previous, current)

            shared = self._shared = self._new_breaker(moved)
            shared.key = ALL_HOSTS
            self.breaker = lambda host: shared
            self.breakers = lambda: [(ALL_HOSTS, shared)]

    @property
    def maximum_hosts(self) -> int:
        """The per-host registry's bound."""
        return self.options.maximum_hosts

    def acquire(self, breaker: CircuitBreaker, call: Call) -> Ticket:
        """The ticket of an attempt the breaker lets through; raises if it does not.

        Raises:
            BrokenCircuitError: The breaker is open, or half-open with its
                probe in flight, or an operator isolated the host.
        """
        if self.manual.pending and self._obey(call):
            self.telemetry.rejection(call.method, call.host, "circuit_open")
            raise BrokenCircuitError(
                f"{call.where()}: circuit isolated by an operator, request not sent"
            )
        ticket = breaker.acquire(self.now())
        if ticket == REJECTED:
            self.telemetry.rejection(call.method, call.host, "circuit_open")
            raise BrokenCircuitError(
                f"{call.where()}: circuit open, request not sent",
                retry_after=breaker.retry_after(self.now()),
            )
        return ticket

    def admit(self, breaker: CircuitBreaker, call: Call) -> Ticket:
        """`acquire`, but `PASS` at once while `breaker` is closed.

        Closed, the breaker lets every attempt through: no need to read time,
        unless an operator has a say (`manual`).

        Raises:
            BrokenCircuitError: As `acquire`.
        """
        if breaker.closed and not self.manual.pending:
            return PASS
        return self.acquire(breaker, call)

    def _obey(self, call: Call) -> bool:
        """Carry out the resets waiting; whether the call's host is isolated."""
        manual = self.manual
        for key in manual.take_resets():
            if self.registry is not None:
                found = self.registry.find(key)
            else:
                found = self._shared if key == ALL_HOSTS else None
            if found is not None:
                found.close()
        key = call.host if self.registry is not None else ALL_HOSTS
        return key in manual.isolated

    def is_failure(self, response: httpx.Response) -> bool:
        """Whether an answer counts against the host."""
        if self._classify is None:
            return self.failed[response.status_code]
        return is_classified_failure(response, self.failed, self._classify)

    def raised(
        self, breaker: CircuitBreaker, ticket: Ticket, exc: BaseException
    ) -> None:
        """Tell the breaker about an attempt that raised `exc`.

        A failure (`is_classified_failure`) is recorded as one; any other
        exception (a cancellation, a bug, a self-caused error, one
        `should_break` says False to) records nothing and passes a probe's
        turn on.
        """
        if isinstance(exc, Exception) and is_classified_failure(
            exc, self.failed, self._classify
        ):
            # An attempt its timeout cut took longer than its time: slow.
            cut = math.inf if isinstance(exc, AttemptTimeoutError) else None
            breaker.record(ticket, True, self.now(), cut)
        else:
            breaker.release(ticket)

    def _new_breaker(self, on_transition: TransitionListener) -> CircuitBreaker:
        options = self.options
        return CircuitBreaker(
            failure_ratio=options.failure_ratio,
            minimum_throughput=options.minimum_throughput,
            sampling_duration=options.sampling_duration.total_seconds(),
            break_duration=options.break_duration.total_seconds(),
            on_transition=on_transition,
            guards=self.guards,
            on_baseline=self._baseline_moved,
        )

    def _baseline_moved(
        self, breaker: CircuitBreaker, tripped: TripRule | None, moved: bool
    ) -> None:
        """Report what `breaker`'s baseline now sets: it armed, was disarmed, moved."""
        baseline = breaker.baseline
        if baseline is None:  # only a breaker with a baseline reports
            return
        self.telemetry.baseline(
            breaker.key,
            baseline.armed,
            (baseline.p50, baseline.p95),
            baseline.rate,
            breaker.threshold(),
            breaker.cap,
            tripped,
            moved=moved,
        )


class AsyncBreaker(AsyncDriver[BreakerStrategy]):
    """`BreakerStrategy` on an event loop: no lock, one loop at a time."""

    __slots__ = ("_classified", "_failed", "_guarded", "_manual", "_now")

    def __init__(self, next: AsyncHandler, strategy: BreakerStrategy) -> None:
        super().__init__(next, strategy)
        self._now = strategy.now
        self._guarded = strategy.guards is not None
        self._failed = strategy.failed
        self._manual = strategy.manual
        self._classified = strategy.options.should_break is not None

    def breakers(self) -> list[tuple[str, CircuitBreaker]]:
        """`BreakerStrategy.breakers`."""
        return self.strategy.breakers()

    async def handle(self, request: httpx.Request, call: Call) -> httpx.Response:
        """Ask the breaker, send one attempt, tell the breaker how it went."""
        strategy = self.strategy
        breaker = strategy.breaker(call.host)
        # `strategy.admit` and the outcome's record, written out as the sync
        # driver has them: this runs on every attempt.
        if breaker.closed and not self._manual.pending:
            ticket = PASS
        else:
            ticket = strategy.acquire(breaker, call)
        start = 0.0
        if self._guarded:
            call.attempt_cap = breaker.cap
            start = self._now()
        try:
            response = await self._next.handle(request, call)
        except BaseException as exc:
            strategy.raised(breaker, ticket, exc)
            raise
        failed = self._failed[response.status_code]
        if self._classified:
            failed = strategy.is_failure(response)
        now = self._now()
        breaker.record(ticket, failed, now, now - start)
        return response


class SyncBreaker(SyncDriver[BreakerStrategy]):
    """`BreakerStrategy` for threads: the breakers behind one lock, taken once.

    A closed breaker lets every attempt through, so the breaker a thread last
    saw for a host is read without the lock and without the clock
    (`ThreadedBreakers`); only a host not seen yet, or a breaker that is not
    closed, takes the lock before the attempt, where the probe is chosen. The
    outcome is told under the lock. A breaker that opens as a thread reads it
    closed lets that attempt through, as if it had asked just before: its
    outcome is ignored (`CircuitBreaker.record`), and exactly one probe still
    goes once the break is over.
    """

    __slots__ = ("_classified", "_failed", "_guarded", "_now", "threads")

    def __init__(self, next: SyncHandler, strategy: BreakerStrategy) -> None:
        super().__init__(next, strategy)
        self.threads = ThreadedBreakers(strategy)
        self._now = strategy.now
        self._guarded = strategy.guards is not None
        self._failed = strategy.failed
        self._classified = strategy.options.should_break is not None

    def breakers(self) -> list[tuple[str, CircuitBreaker]]:
        """`BreakerStrategy.breakers`, read under the lock."""
        return self.threads.breakers()

    def handle_sync(self, request: httpx.Request, call: Call) -> httpx.Response:
        """Ask the breaker, send one attempt, tell the breaker how it went."""
        strategy, threads, host = self.strategy, self.threads, call.host
        breaker, seen = threads.seen.get(host, _UNSEEN)
        if breaker is None or not breaker.closed or strategy.manual.pending:
            with threads.lock:
                breaker, seen = threads.see(host)
                ticket = strategy.admit(breaker, call)
        else:
            ticket = PASS
        start = 0.0
        if self._guarded:
            call.attempt_cap = breaker.cap
            start = self._now()
        try:
            response = self._next.handle_sync(request, call)
        except BaseException as exc:
            with threads.lock:
                strategy.raised(breaker, ticket, exc)
            raise
        # The outcome, with what needs no lock read outside it: this runs on
        # every attempt.
        failed = self._failed[response.status_code]
        if self._classified:
            failed = strategy.is_failure(response)
        now = self._now()
        with threads.lock:
            # Written out here, not a method: this runs on every attempt.
            if seen != threads.arrivals:
                threads.see(host)
            breaker.record(ticket, failed, now, now - start)
        return response


class ThreadedBreakers:
    """A `BreakerStrategy`'s breakers for threads: one lock, and the last seen.

    `seen` holds, per host, the breaker a thread last saw and the arrivals
    counted then; it is read without the lock, written under it, and bounded.
    The registry's recency matters only when a new host arrives (it drops the
    least recently used closed breaker then), so a host read without the lock
    is marked recently used again once after each arrival, not on every call.

    Args:
        strategy: The breakers' strategy.

    Attributes:
        lock: Held to see a host and to tell a breaker an outcome.
        seen: Per host, the breaker a thread last saw and `arrivals` then.
        arrivals: The hosts that arrived in the registry so far: after one
            since a thread saw its host, the host is marked recently used
            again (`see`), under the lock.
    """

    __slots__ = ("_bound", "_strategy", "arrivals", "lock", "seen")

    def __init__(self, strategy: BreakerStrategy) -> None:
        self._strategy = strategy
        self.lock = threading.Lock()
        self.seen: dict[str, tuple[CircuitBreaker, int]] = {}
        self.arrivals = 0
        self._bound = strategy.maximum_hosts

    def breakers(self) -> list[tuple[str, CircuitBreaker]]:
        """`BreakerStrategy.breakers`, read under the lock."""
        with self.lock:
            return self._strategy.breakers()

    def see(self, host: str) -> tuple[CircuitBreaker, int]:
        """The host's breaker, marked recently used and remembered; under the lock."""
        breaker = self._strategy.breaker(host)
        seen = self.seen
        found = seen.get(host)
        if found is None or found[0] is not breaker:
            # A host new to the registry, or back in it: an arrival.
            self.arrivals += 1
            if len(seen) >= self._bound:
                # Hosts the registry may have dropped: forget them all, and
                # let the hosts in use take the lock once to come back.
                self.seen = seen = {}
        entry = seen[host] = (breaker, self.arrivals)
        return entry


_UNSEEN: Final[tuple[None, int]] = (None, -1)
