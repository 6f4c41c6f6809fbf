"""The circuit breaker: options, state machine, per-host registry, strategy.

`CircuitBreaker` is the state machine. No I/O and no clock of its own: every
method takes ``now`` (seconds on the pipeline's clock) and returns a decision,
so one object serves the async and the sync transports and a test drives it
with plain numbers.

    closed --(failure ratio reached, minimum throughput met)--> open
    open --(break duration over: the next caller is the probe)--> half_open
    half_open --(probe succeeded)--> closed
    half_open --(probe failed)--> open

While half-open exactly one probe is in flight; every other caller is
rejected, however many arrive at once. Rejecting is the caller's job (the
breaker only answers `REJECTED`), so each rejection raises a fresh exception.

`HostRegistry` keeps one breaker per host, bounded. When a new host arrives
and the registry is full, the least recently used host whose breaker is closed
is dropped: a closed breaker holds only recent counts, and the host starts
afresh if it comes back. An open or half-open breaker is never evicted,
because forgetting it would silently close it and send traffic to a host known
to be failing. If every slot holds an open breaker, new hosts share one
overflow breaker until a slot frees (a breaker closes); memory stays bounded
either way, at `maximum` hosts plus the overflow.

`BreakerStrategy` asks the breaker before each attempt and tells it how the
attempt went.
"""

from __future__ import annotations

import functools
import math
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable
from datetime import timedelta
from typing import (
    TYPE_CHECKING,
    ClassVar,
    Final,
    TypeAlias,
)

import httpx
from pydantic import (
    BaseModel,
    Field,
)

from http_resilience._core.builder import BuildContext, Placement
from http_resilience._core.classify import (
    DEFAULT_FAILURE_STATUSES,
    Classifier,
    failure_table,
    is_classified_failure,
)
from http_resilience._core.clock import Clock, reader
from http_resilience._core.errors import BrokenCircuitError
from http_resilience._core.events import CLOSED, HALF_OPEN, OPEN, BreakerState
from http_resilience._core.fields import FROZEN, Count, Ratio, StatusCodes
from http_resilience._core.host_registry import (
    DEFAULT_MAXIMUM_HOSTS,
    OVERFLOW_HOST,
    SHARED_HOST,
)
from http_resilience._core.pipeline import AsyncHandler, Call, SyncHandler
from http_resilience._core.telemetry import Telemetry
from http_resilience._primitives.durations import Duration, DurationInput
from http_resilience._strategies.breaker_control import ManualState

__all__ = [
    "DEFAULT_BREAKER_PER_HOST",
    "DEFAULT_BREAK_DURATION",
    "DEFAULT_FAILURE_RATIO",
    "DEFAULT_MINIMUM_THROUGHPUT",
    "DEFAULT_SAMPLING_DURATION",
    "PROBE",
    "REJECTED",
    "WINDOW_BUCKETS",
    "AsyncBreaker",
    "BreakerOptions",
    "BreakerStrategy",
    "CircuitBreaker",
    "HostRegistry",
    "SyncBreaker",
    "Ticket",
    "TransitionListener",
]
TransitionListener: TypeAlias = Callable[
    ["CircuitBreaker", BreakerState, BreakerState], None
]
"""Called with (the breaker, previous, current) on every change of state."""

Ticket: TypeAlias = int
"""What `acquire` answers: `REJECTED`, `PASS` (closed) or `PROBE`."""
REJECTED: Final[Ticket] = 0
PASS: Final[Ticket] = 1
PROBE: Final[Ticket] = 2

WINDOW_BUCKETS: Final = 10
"""The sampling window slides in this many steps."""
# What a breaker's counts are before they are needed, shared and never written
# to: each list a breaker holds is one more object the cyclic garbage collector
# walks, for every host of a big registry.
_NO_COUNTS: Final[list[int]] = []


def _ignore(
    breaker: CircuitBreaker, previous: BreakerState, current: BreakerState
) -> None:
    pass


class CircuitBreaker:
    """Failure ratio over a sliding window, then a break, then one probe.

    The window (`sampling_duration`) is `WINDOW_BUCKETS` buckets of counts;
    outcomes older than the window drop out a bucket at a time. The breaker
    opens when an outcome leaves at least `minimum_throughput` outcomes in the
    window of which at least `failure_ratio` failed.

    Each caller asks `acquire(now)` before its attempt and reports with
    `record` (an outcome) or `release` (no outcome: cancelled, or an exception
    that says nothing about the host), passing back the ticket it got. An
    outcome of an attempt let through while closed that ends after the breaker
    opened is ignored: it says nothing about the host after the break.

    Not thread-safe: the sync transport holds a lock around it.

    Args:
        failure_ratio: In (0, 1].
        minimum_throughput: At least 1.
        sampling_duration: Seconds, above 0.
        break_duration: Seconds, above 0.
        on_transition: Called with (the breaker, previous, current) on each
            change.

    Example:
        >>> breaker = CircuitBreaker(
        ...     failure_ratio=0.5, minimum_throughput=2,
        ...     sampling_duration=10, break_duration=5,
        ... )
        >>> for now in (0.0, 0.1):
        ...     breaker.record(breaker.acquire(now), failed=True, now=now)
        >>> breaker.state, breaker.acquire(1.0) == REJECTED, breaker.retry_after(1.0)
        ('open', True, 4.1)
        >>> ticket = breaker.acquire(5.1)
        >>> ticket == PROBE, breaker.acquire(5.1) == REJECTED
        (True, True)
        >>> breaker.record(ticket, failed=False, now=5.2)
        >>> breaker.state
        'closed'
    """

    __slots__ = (
        "_break",
        "_bucket",
        "_failed",
        "_failures",
        "_head_failed",
        "_head_total",
        "_minimum",
        "_on_transition",
        "_open_until",
        "_probing",
        "_ratio",
        "_state",
        "_total",
        "_totals",
        "_width",
        "closed",
        "key",
    )

    def __init__(
        self,
        *,
        failure_ratio: float,
        minimum_throughput: int,
        sampling_duration: float,
        break_duration: float,
        on_transition: TransitionListener | None = None,
    ) -> None:
        self._ratio = failure_ratio
        self._minimum = minimum_throughput
        self._width = sampling_duration / WINDOW_BUCKETS
        self._break = break_duration
        self._on_transition: TransitionListener = on_transition or _ignore
        self._state: BreakerState = CLOSED
        self.closed = True
        """Whether the state is closed: `acquire` would answer `PASS` at once."""
        self._open_until = -math.inf
        self._probing = False
        # The current bucket's counts are plain numbers; the older buckets'
        # lists are allocated when the window first slides past a bucket that
        # has outcomes (the failures' when it had failures): most hosts of a
        # big registry see few outcomes, fewer failures.
        self._head_total = 0
        self._head_failed = 0
        self._totals = _NO_COUNTS
        self._failures = _NO_COUNTS
        self.key = ""
        """The host a `HostRegistry` keeps it under; "" outside a registry."""
        self._bucket = 0
        self._total = 0
        self._failed = 0

    @property
    def state(self) -> BreakerState:
        """``"closed"``, ``"open"`` or ``"half_open"``, as last changed.

        An open breaker whose break is over still reads ``"open"`` until the
        next `acquire` makes that caller the probe.
        """
        return self._state

    def acquire(self, now: float) -> Ticket:
        """Ask to send one attempt at `now`.

        Returns:
            `PASS` while closed; `PROBE` for the one caller let through after
            the break; `REJECTED` while open, or half-open with its probe in
            flight.
        """
        if self._state is CLOSED:
            return PASS
        if self._state is OPEN:
            if now < self._open_until:
                return REJECTED
            self._change(HALF_OPEN)
        if self._probing:
            return REJECTED
        self._probing = True
        return PROBE

    def retry_after(self, now: float) -> float | None:
        """Seconds until a probe may go, when known: while open, never below 0."""
        if self._state is OPEN:
            return max(self._open_until - now, 0.0)
        return None

    def record(self, ticket: Ticket, failed: bool, now: float) -> None:
        """Report the outcome of an attempt sent with `ticket`, at `now`."""
        if ticket == PASS:
            if self._state is not CLOSED:
                return
            # Inline, not a method: this runs on every attempt.
            bucket = int(now // self._width)
            if bucket != self._bucket:
                self._slide(bucket)
            self._head_total += 1
            self._total += 1
            if failed:
                self._head_failed += 1
                self._failed += 1
                if (
                    self._total >= self._minimum
                    and self._failed / self._total >= self._ratio
                ):
                    self._open(now)
        elif ticket == PROBE:
            if self._state is not HALF_OPEN:
                return  # a probe sent before an operator closed the breaker
            self._probing = False
            if failed:
                self._open(now)
            else:
                self._reset()
                self._change(CLOSED)

    def release(self, ticket: Ticket) -> None:
        """Give back `ticket` without an outcome; a probe's turn passes on."""
        if ticket == PROBE:
            self._probing = False

    def close(self) -> None:
        """Close the breaker now and forget its window: an operator's reset.

        The outcome of a probe sent before is then ignored.
        """
        self._reset()
        self._probing = False
        self._open_until = -math.inf
        if self._state is not CLOSED:
            self._change(CLOSED)

    def _slide(self, bucket: int) -> None:
        if not self._total:
            # Nothing in the window (every count is 0): start counting here.
            self._bucket = bucket
            return
        steps = bucket - self._bucket
        if steps <= 0:
            # The clock went back, or a bucket index overflowed a float: keep
            # counting in the current bucket rather than lose the window.
            return
        if steps >= WINDOW_BUCKETS:
            self._reset()
            self._bucket = bucket
            return
        # The current bucket's counts move to its slot, which has held 0
        # since the window slid onto it; then the buckets that leave drop out.
        old = self._bucket % WINDOW_BUCKETS
        totals, failures = self._totals, self._failures
        if self._head_total:
            if not totals:
                totals = self._totals = [0] * WINDOW_BUCKETS
            totals[old] = self._head_total
            self._head_total = 0
        if self._head_failed:
            if not failures:
                failures = self._failures = [0] * WINDOW_BUCKETS
            failures[old] = self._head_failed
            self._head_failed = 0
        for index in range(self._bucket + 1, bucket + 1):
            slot = index % WINDOW_BUCKETS
            if totals:
                self._total -= totals[slot]
                totals[slot] = 0
            if failures:
                self._failed -= failures[slot]
                failures[slot] = 0
        self._bucket = bucket

    def _reset(self) -> None:
        for counts in (self._totals, self._failures):
            for slot in range(len(counts)):
                counts[slot] = 0
        self._head_total = 0
        self._head_failed = 0
        self._total = 0
        self._failed = 0

    def _open(self, now: float) -> None:
        self._open_until = now + self._break
        self._reset()
        self._change(OPEN)

    def _change(self, current: BreakerState) -> None:
        previous, self._state = self._state, current
        self.closed = current is CLOSED
        self._on_transition(self, previous, current)


DEFAULT_FAILURE_RATIO: Final = 0.1
DEFAULT_SAMPLING_DURATION: Final = timedelta(seconds=30)
DEFAULT_MINIMUM_THROUGHPUT: Final = 100
DEFAULT_BREAK_DURATION: Final = timedelta(seconds=5)
DEFAULT_BREAKER_PER_HOST: Final = True


class BreakerOptions(BaseModel):
    """The circuit breaker of a custom pipeline.

    Attributes:
        failure_ratio: The share of failed attempts within the sampling window
            that opens the breaker, in (0, 1]. Default 0.1.
        sampling_duration: The breaker's sliding window. Default 30 s; keep it
            at least twice the timeout of the attempts it sees.
        minimum_throughput: Attempts needed in the window before the breaker
            can open. Default 100.
        break_duration: How long an open breaker refuses before it lets one
            probe through. Default 5 s.
        breaker_per_host: One breaker per scheme, host and port; False shares
            one breaker between every host. Default True.
        maximum_hosts: The per-host registry's bound. Default 1024.
        breaker_on_status: The statuses that count as a failure of the host.
            Default 408, 429 and every 5xx but 501 and 505. Ints, ranges, or a
            string such as ``"500-504"``.
        should_break: Your own say on an attempt's outcome, a response or an
            exception: True counts it as a failure, False as a success, None
            leaves it to `breaker_on_status` (and, for an exception, the
            built-in rule). Never asked about a cancellation, an error the
            client caused itself or a refusal in this process. Default None.

    Raises:
        pydantic.ValidationError: On construction, naming every invalid field.

    Example:
        >>> BreakerOptions(minimum_throughput=5).failure_ratio
        0.1
    """

    model_config = FROZEN

    failure_ratio: Ratio = Field(default=DEFAULT_FAILURE_RATIO, gt=0.0, le=1.0)
    sampling_duration: Duration = Field(
        default=DEFAULT_SAMPLING_DURATION, gt=timedelta(0)
    )
    minimum_throughput: Count = Field(default=DEFAULT_MINIMUM_THROUGHPUT, ge=1)
    break_duration: Duration = Field(default=DEFAULT_BREAK_DURATION, gt=timedelta(0))
    breaker_per_host: bool = DEFAULT_BREAKER_PER_HOST
    maximum_hosts: Count = Field(default=DEFAULT_MAXIMUM_HOSTS, ge=1)
    breaker_on_status: StatusCodes = DEFAULT_FAILURE_STATUSES
    should_break: Classifier | None = None

    if TYPE_CHECKING:
        # Durations in every form pydantic reads; see `HttpResilienceOptions`.
        def __init__(
            self,
            *,
            failure_ratio: float = DEFAULT_FAILURE_RATIO,
            sampling_duration: DurationInput = DEFAULT_SAMPLING_DURATION,
            minimum_throughput: int = DEFAULT_MINIMUM_THROUGHPUT,
            break_duration: DurationInput = DEFAULT_BREAK_DURATION,
            breaker_per_host: bool = DEFAULT_BREAKER_PER_HOST,
            maximum_hosts: int = DEFAULT_MAXIMUM_HOSTS,
            breaker_on_status: Iterable[int | range | str]
            | str
            | int = DEFAULT_FAILURE_STATUSES,
            should_break: Classifier | None = None,
        ) -> None: ...

    is_deadline: ClassVar[bool] = False
    repeats: ClassVar[bool] = False

    @property
    def label(self) -> str:
        """``"breaker"``."""
        return "breaker"

    @property
    def waits_outside_attempts(self) -> bool:
        """A breaker never waits."""
        return False

    def will_repeat(self, request: httpx.Request) -> bool:
        """Never: a breaker sends nothing twice."""
        return False

    def build_async(
        self, next: AsyncHandler, context: BuildContext, place: Placement
    ) -> AsyncBreaker:
        """This transport's breakers, around `next`."""
        return AsyncBreaker(
            next,
            BreakerStrategy(
                options=self, clock=context.clock, telemetry=context.telemetry
            ),
        )

    def build_sync(
        self, next: SyncHandler, context: BuildContext, place: Placement
    ) -> SyncBreaker:
        """This transport's breakers, behind a lock, around `next`."""
        return SyncBreaker(
            next,
            BreakerStrategy(
                options=self, clock=context.clock, telemetry=context.telemetry
            ),
        )


NewBreaker = Callable[[TransitionListener], CircuitBreaker]
"""Builds a breaker that reports its transitions to the callable it is given."""
HostTransition = Callable[[str, BreakerState, BreakerState], None]


class HostRegistry:
    """Breakers by host key, at most `maximum` of them (see the module's notes).

    Args:
        maximum: The bound; at least 1.
        new_breaker: Builds a breaker for a new host, given the callable it must
            report its transitions to.
        on_transition: Told (host key, previous, current) on every transition
            of every breaker it holds.

    Example:
        >>> registry = HostRegistry(
        ...     2,
        ...     lambda on_transition: CircuitBreaker(
        ...         failure_ratio=0.5, minimum_throughput=1,
        ...         sampling_duration=10, break_duration=5,
        ...         on_transition=on_transition,
        ...     ),
        ... )
        >>> for key in ("http://a:80", "http://b:80", "http://c:80"):
        ...     _ = registry.breaker(key)
        >>> registry.keys()
        ['http://b:80', 'http://c:80']
    """

    __slots__ = (
        "_closed",
        "_held",
        "_maximum",
        "_moved_listener",
        "_new",
        "_on_transition",
        "_overflow",
    )

    def __init__(
        self,
        maximum: int,
        new_breaker: NewBreaker,
        on_transition: HostTransition | None = None,
    ) -> None:
        if maximum < 1:
            raise ValueError(f"maximum_hosts must be at least 1, got {maximum}")
        self._maximum = maximum
        self._new = new_breaker
        self._on_transition = on_transition
        # Least recently used first. Only closed breakers may be evicted.
        self._closed: OrderedDict[str, CircuitBreaker] = OrderedDict()
        self._held: dict[str, CircuitBreaker] = {}
        self._overflow: CircuitBreaker | None = None
        # One listener for every breaker, made once: each breaker carries its
        # own key, so a new host costs one object the cyclic collector tracks
        # (the breaker), not a listener too.
        self._moved_listener: TransitionListener = self._moved

    def __len__(self) -> int:
        """Hosts held, the overflow breaker not counted."""
        return len(self._closed) + len(self._held)

    def keys(self) -> list[str]:
        """The hosts held: closed ones least recently used first, then the rest."""
        return [*self._closed, *self._held]

    def items(self) -> list[tuple[str, CircuitBreaker]]:
        """Each host held and its breaker, then the overflow breaker if made.

        From another thread too: each part is copied in one step, which no
        other thread interrupts (the keys are strings: no Python code runs).
        """
        items = [*self._closed.items(), *self._held.items()]
        if self._overflow is not None:
            items.append((OVERFLOW_HOST, self._overflow))
        return items

    def find(self, key: str) -> CircuitBreaker | None:
        """The breaker of host `key` if one is held; nothing is made or marked."""
        found = self._closed.get(key)
        return self._held.get(key) if found is None else found

    def breaker(self, key: str) -> CircuitBreaker:
        """The breaker of host `key`, made on first use; marks it recently used."""
        found = self._closed.get(key)
        if found is not None:
            self._closed.move_to_end(key)
            return found
        found = self._held.get(key)
        if found is not None:
            return found
        return self._add(key)

    def _add(self, key: str) -> CircuitBreaker:
        if len(self._closed) + len(self._held) >= self._maximum:
            if not self._closed:
                return self._overflow_breaker()
            self._closed.popitem(last=False)

        # The breaker refers to the registry (through the listener), never the
        # other way round once it is evicted: no reference cycle, so an evicted
        # breaker is freed at once rather than by the cyclic collector.
        breaker = self._new(self._moved_listener)
        breaker.key = key
        self._closed[key] = breaker
        return breaker

    def _overflow_breaker(self) -> CircuitBreaker:
        if self._overflow is None:
            self._overflow = self._new(functools.partial(self._tell, OVERFLOW_HOST))
        return self._overflow

    def _moved(
        self,
        breaker: CircuitBreaker,
        previous: BreakerState,
        current: BreakerState,
    ) -> None:
        key = breaker.key
        if current == CLOSED:
            if self._held.get(key) is breaker:
                del self._held[key]
                self._closed[key] = breaker
        elif previous == CLOSED:
            if self._closed.get(key) is breaker:
                del self._closed[key]
                self._held[key] = breaker
            elif key not in self._closed and key not in self._held:
                # Evicted while an attempt was in flight, and that attempt
                # opened it: keep it, or the open breaker would be forgotten.
                if len(self) >= self._maximum and self._closed:
                    self._closed.popitem(last=False)
                self._held[key] = breaker
        self._tell(key, breaker, previous, current)

    def _tell(
        self,
        key: str,
        breaker: CircuitBreaker,
        previous: BreakerState,
        current: BreakerState,
    ) -> None:
        if self._on_transition is not None:
            self._on_transition(key, previous, current)


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
    """

    __slots__ = (
        "_classify",
        "_options",
        "_registry",
        "_shared",
        "_telemetry",
        "breaker",
        "breakers",
        "failed",
        "manual",
        "now",
    )

    def __init__(
        self,
        *,
        options: BreakerOptions,
        clock: Clock,
        telemetry: Telemetry,
        on_transition: HostTransition | None = None,
    ) -> None:
        self._options = options
        self.now = reader(clock)
        self._telemetry = telemetry
        self.failed = failure_table(options.breaker_on_status)
        self._classify = options.should_break
        self.manual = ManualState()
        self._registry: HostRegistry | None = None
        self._shared: CircuitBreaker | None = None
        tell: HostTransition = telemetry.breaker
        if on_transition is not None:
            tell = _both(telemetry.breaker, on_transition)

        if options.breaker_per_host:
            registry = HostRegistry(options.maximum_hosts, self._new_breaker, tell)
            self._registry = registry
            self.breaker: Callable[[str], CircuitBreaker] = registry.breaker
            self.breakers: Callable[[], list[tuple[str, CircuitBreaker]]] = (
                registry.items
            )
        else:

            def moved(
                breaker: CircuitBreaker, previous: BreakerState, current: BreakerState
            ) -> None:
                tell(SHARED_HOST, previous, current)

            shared = self._shared = self._new_breaker(moved)
            shared.key = SHARED_HOST
            self.breaker = lambda host: shared
            self.breakers = lambda: [(SHARED_HOST, shared)]

    @property
    def registry(self) -> HostRegistry | None:
        """The per-host breakers; None when one breaker is shared."""
        return self._registry

    @property
    def telemetry(self) -> Telemetry:
        """Where transitions and rejections are reported."""
        return self._telemetry

    @property
    def options(self) -> BreakerOptions:
        """The options the breakers were built from."""
        return self._options

    @property
    def maximum_hosts(self) -> int:
        """The per-host registry's bound."""
        return self._options.maximum_hosts

    def acquire(self, breaker: CircuitBreaker, call: Call) -> Ticket:
        """The ticket of an attempt the breaker lets through; raises if it does not.

        Raises:
            BrokenCircuitError: The breaker is open, or half-open with its
                probe in flight, or an operator isolated the host.
        """
        if self.manual.pending and self._obey(call):
            self._telemetry.rejection(call.method, call.host, "circuit_open")
            raise BrokenCircuitError(
                f"{call.where()}: circuit isolated by an operator, request not sent"
            )
        ticket = breaker.acquire(self.now())
        if ticket == REJECTED:
            self._telemetry.rejection(call.method, call.host, "circuit_open")
            raise BrokenCircuitError(
                f"{call.where()}: circuit open, request not sent",
                retry_after=breaker.retry_after(self.now()),
            )
        return ticket

    def _obey(self, call: Call) -> bool:
        """Carry out the resets waiting; whether the call's host is isolated."""
        manual = self.manual
        for key in manual.take_resets():
            if self._registry is not None:
                found = self._registry.find(key)
            else:
                found = self._shared if key == SHARED_HOST else None
            if found is not None:
                found.close()
        key = call.host if self._registry is not None else SHARED_HOST
        return key in manual.isolated

    def is_failure(self, response: httpx.Response) -> bool:
        """Whether an answer counts against the host."""
        if self._classify is None:
            return self.failed[response.status_code]
        return is_classified_failure(response, self.failed, self._classify)

    def answered(
        self, breaker: CircuitBreaker, ticket: Ticket, response: httpx.Response
    ) -> None:
        """Tell the breaker how an attempt that answered went."""
        breaker.record(ticket, self.is_failure(response), self.now())

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
            breaker.record(ticket, True, self.now())
        else:
            breaker.release(ticket)

    def _new_breaker(self, on_transition: TransitionListener) -> CircuitBreaker:
        options = self._options
        return CircuitBreaker(
            failure_ratio=options.failure_ratio,
            minimum_throughput=options.minimum_throughput,
            sampling_duration=options.sampling_duration.total_seconds(),
            break_duration=options.break_duration.total_seconds(),
            on_transition=on_transition,
        )


class AsyncBreaker:
    """`BreakerStrategy` on an event loop: no lock, one loop at a time."""

    __slots__ = ("_manual", "_next", "strategy")

    def __init__(self, next: AsyncHandler, strategy: BreakerStrategy) -> None:
        self._next = next
        self.strategy = strategy
        self._manual = strategy.manual

    def breakers(self) -> list[tuple[str, CircuitBreaker]]:
        """`BreakerStrategy.breakers`."""
        return self.strategy.breakers()

    async def handle(self, request: httpx.Request, call: Call) -> httpx.Response:
        """Ask the breaker, send one attempt, tell the breaker how it went."""
        strategy = self.strategy
        breaker = strategy.breaker(call.host)
        # Closed, the breaker lets every attempt through: no need to read time,
        # unless an operator has a say.
        ticket = (
            PASS
            if breaker.closed and not self._manual.pending
            else strategy.acquire(breaker, call)
        )
        try:
            response = await self._next.handle(request, call)
        except BaseException as exc:
            strategy.raised(breaker, ticket, exc)
            raise
        strategy.answered(breaker, ticket, response)
        return response


class SyncBreaker:
    """`BreakerStrategy` for threads: the breakers behind one lock, taken once.

    A closed breaker lets every attempt through, so the breaker a thread last
    saw for a host is read without the lock and without the clock (`_seen`,
    bounded, written under the lock); only a host not seen yet, or a breaker
    that is not closed, takes the lock before the attempt, where the probe is
    chosen. The outcome is told under the lock. A breaker that opens as a
    thread reads it closed lets that attempt through, as if it had asked just
    before: its outcome is ignored (`CircuitBreaker.record`), and exactly one
    probe still goes once the break is over.

    The registry's recency matters only when a new host arrives (it drops the
    least recently used closed breaker then), so a host read without the lock
    is marked recently used again once after each arrival (`_arrivals`), not
    on every call.
    """

    __slots__ = (
        "_arrivals",
        "_bound",
        "_classified",
        "_failed",
        "_lock",
        "_manual",
        "_next",
        "_now",
        "_seen",
        "strategy",
    )

    def __init__(self, next: SyncHandler, strategy: BreakerStrategy) -> None:
        self._next = next
        self.strategy = strategy
        self._now = strategy.now
        self._lock = threading.Lock()
        self._seen: dict[str, tuple[CircuitBreaker, int]] = {}
        self._arrivals = 0
        self._bound = strategy.maximum_hosts
        self._failed = strategy.failed
        self._classified = strategy.options.should_break is not None
        self._manual = strategy.manual

    def breakers(self) -> list[tuple[str, CircuitBreaker]]:
        """`BreakerStrategy.breakers`, read under the lock."""
        with self._lock:
            return self.strategy.breakers()

    def handle_sync(self, request: httpx.Request, call: Call) -> httpx.Response:
        """Ask the breaker, send one attempt, tell the breaker how it went."""
        strategy = self.strategy
        host = call.host
        manual = self._manual
        breaker, seen = self._seen.get(host, _UNSEEN)
        if breaker is None or not breaker.closed or manual.pending:
            with self._lock:
                breaker, seen = self._see(host)
                ticket = (
                    PASS
                    if breaker.closed and not manual.pending
                    else strategy.acquire(breaker, call)
                )
        else:
            ticket = PASS
        try:
            response = self._next.handle_sync(request, call)
        except BaseException as exc:
            with self._lock:
                strategy.raised(breaker, ticket, exc)
            raise
        # `strategy.answered`, written out, with what needs no lock outside it:
        # this runs on every attempt.
        failed = self._failed[response.status_code]
        if self._classified:
            failed = strategy.is_failure(response)
        now = self._now()
        with self._lock:
            if seen != self._arrivals:
                self._see(host)
            breaker.record(ticket, failed, now)
        return response

    def _see(self, host: str) -> tuple[CircuitBreaker, int]:
        """The host's breaker, marked recently used and remembered; under the lock."""
        breaker = self.strategy.breaker(host)
        seen = self._seen
        found = seen.get(host)
        if found is None or found[0] is not breaker:
            # A host new to the registry, or back in it: an arrival.
            self._arrivals += 1
            if len(seen) >= self._bound:
                # Hosts the registry may have dropped: forget them all, and
                # let the hosts in use take the lock once to come back.
                self._seen = seen = {}
        entry = seen[host] = (breaker, self._arrivals)
        return entry


_UNSEEN: Final[tuple[None, int]] = (None, -1)
