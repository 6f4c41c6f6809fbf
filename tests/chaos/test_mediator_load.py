"""The mediator under load: a thousand concurrent sends through the full chain.

Every send carries its id and a seeded plan: succeed, fail transiently k times
then succeed, fail transiently every time, raise a domain error, be cancelled
in its handler (after k transient failures) or during a backoff wait, fail
validation, or be refused. The chain is the real one: `use_defaults()` (audit,
validation, authorization, transaction) plus `ResilienceMediatorModule` on a
`FakeClock` with a seeded random source. A sync variant sends 200 requests
with `send_sync` from eight threads.

The unit of work is a counting fake, not SQLite: SQLite's units of work begin
with ``BEGIN IMMEDIATE``, so a thousand open transactions would queue on one
write lock, and the cancelled sends hold theirs open while they wait: the
plans would then meet "database is locked" retries of their own, and no send
could be told its exact attempt count. The per-attempt rollback on a real
database is covered by tests/mediator_resilience/test_in_the_default_chain.py.

Each send's request-scoped `SendTrace` records which send it belongs to, every
unit of work opened on it, and its cleanup, so a scope shared by two sends, a
scope changed between attempts, or a cleanup run twice or never all show.
"""

from __future__ import annotations

import asyncio
import random
import threading
from collections import Counter
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Literal, NoReturn, Self

import pytest
from injector import Binder, Injector, Module, inject

from mediator import (
    AsyncUnitOfWork,
    AuditRecord,
    AuditSink,
    Command,
    CommandHandler,
    ConflictError,
    FieldError,
    Mediator,
    MediatorModule,
    NotFoundError,
    Policy,
    Principal,
    ScopeError,
    SystemClock,
    TransientDatabaseError,
    UnitOfWork,
    Validator,
    acting_as,
    at_scope_exit,
    authorize,
    request_scope,
    transactional,
)
from mediator._core.scope import (
    current_scope,  # to see it back to empty, not just closed
)
from mediator_resilience import (
    ResilienceMediatorModule,
    ResilienceMediatorOptions,
    RetryEvent,
    retryable,
)
from mediator_resilience.testing import FakeClock
from tests.chaos.invariants import assert_back_to_baseline, leftovers
from tests.support.figures import record

pytestmark = pytest.mark.anyio

Plan = Literal[
    "ok",
    "flaky",  # k transient failures, then success
    "exhaust",  # transient failures on every attempt
    "conflict",
    "not_found",
    "cancel",  # k transient failures, then cancelled inside the handler
    "cancel_wait",  # k transient failures, cancelled during the k-th backoff wait
    "invalid",
    "forbidden",
]

MAX_RETRIES = 3  # so at most 4 attempts per send
SEED = 20_240_611
LIMIT = 15.0  # seconds the whole async run may take before it counts as hung
PRINCIPAL = Principal("loader")
TRANSIENT: tuple[type[Exception], ...] = (
    ConnectionError,
    TimeoutError,
    TransientDatabaseError,
)
CANCELLED = "CancelledError"
REACHES_HANDLER: frozenset[Plan] = frozenset(
    {"ok", "flaky", "exhaust", "conflict", "not_found", "cancel", "cancel_wait"}
)


# --- what every send records ---------------------------------------------------


@dataclass
class Ledger:
    """Everything the chain's parts saw, by send id; shared by all sends."""

    validations: Counter[int] = field(default_factory=Counter[int])
    authorizations: Counter[int] = field(default_factory=Counter[int])
    attempts: Counter[int] = field(default_factory=Counter[int])
    audit: dict[int, list[AuditRecord]] = field(
        default_factory=dict[int, list[AuditRecord]]
    )
    traces: list[SendTrace] = field(default_factory=list["SendTrace"])
    trace_of: dict[int, SendTrace] = field(default_factory=dict[int, "SendTrace"])
    units: list[CountingUnit] = field(default_factory=list["CountingUnit"])
    cancelled: dict[int, str] = field(default_factory=dict[int, str])  # and where
    leaks: list[str] = field(default_factory=list[str])
    lock: threading.Lock = field(default_factory=threading.Lock)

    def bump(self, counter: Counter[int], send_id: int) -> int:
        with self.lock:
            counter[send_id] += 1
            return counter[send_id]


@request_scope
class SendTrace:
    """One per top-level send: the scope's own record of whom it served."""

    @inject
    def __init__(self, ledger: Ledger) -> None:
        self.send_id: int | None = None
        self.attempts = 0
        self.units: list[CountingUnit] = []
        self.cleanups = 0
        self.unfinished_at_close: int | None = None
        with ledger.lock:
            ledger.traces.append(self)
        at_scope_exit(self.close)

    def close(self) -> None:
        self.cleanups += 1
        self.unfinished_at_close = sum(not unit.finished for unit in self.units)


class CountingUnit:
    """A unit of work per attempt, kept on the send's trace."""

    @inject
    def __init__(self, trace: SendTrace, ledger: Ledger) -> None:
        self.steps: list[str] = []
        trace.units.append(self)
        with ledger.lock:
            ledger.units.append(self)

    @property
    def finished(self) -> bool:
        return self.steps in (["begin", "commit"], ["begin", "rollback"])

    async def begin(self) -> None:
        self.steps.append("begin")

    async def commit(self) -> None:
        self.steps.append("commit")

    async def rollback(self) -> None:
        self.steps.append("rollback")

    def savepoint(self) -> Self:
        raise AssertionError("the load sends no nested transactional requests")

    def translate_error(self, error: BaseException) -> BaseException:
        return error


class SyncCountingUnit(CountingUnit):
    """The same for `send_sync`."""

    def begin(self) -> None:  # type: ignore[override]
        self.steps.append("begin")

    def commit(self) -> None:  # type: ignore[override]
        self.steps.append("commit")

    def rollback(self) -> None:  # type: ignore[override]
        self.steps.append("rollback")


class CountingSink:
    @inject
    def __init__(self, ledger: Ledger) -> None:
        self.ledger = ledger

    def is_enabled(self) -> bool:
        return True

    def write(self, record: AuditRecord) -> None:
        send_id = record.fields["send_id"]
        with self.ledger.lock:
            self.ledger.audit.setdefault(send_id, []).append(record)


# --- the request, its checks and its handlers ----------------------------------


class CountingPolicy(Policy["LoadCommand"]):
    @inject
    def __init__(self, ledger: Ledger) -> None:
        self.ledger = ledger

    def allows(self, principal: Principal, request: LoadCommand) -> bool:
        self.ledger.bump(self.ledger.authorizations, request.send_id)
        return request.plan != "forbidden"


@retryable
@transactional
@authorize(policies=[CountingPolicy])
class LoadCommand(Command[str]):
    send_id: int
    plan: Plan
    failures: int = 0  # transient failures before the outcome


class SyncLoadCommand(LoadCommand):
    """Sent with `send_sync`; inherits the markers, the validator and the policy."""


class LoadValidator(Validator[LoadCommand]):
    @inject
    def __init__(self, ledger: Ledger) -> None:
        self.ledger = ledger

    def validate(self, request: LoadCommand) -> list[FieldError]:
        self.ledger.bump(self.ledger.validations, request.send_id)
        if request.plan == "invalid":
            return [FieldError(("plan",), "refused by the load test")]
        return []


def enter_attempt(ledger: Ledger, trace: SendTrace, request: LoadCommand) -> int:
    """Count the attempt and check the scope belongs to this send, and only it."""
    send_id = request.send_id
    attempt = ledger.bump(ledger.attempts, send_id)
    problems: list[str] = []
    if trace.send_id is None:
        trace.send_id = send_id
        with ledger.lock:
            if send_id in ledger.trace_of:
                problems.append("a second scope in one send")
            ledger.trace_of[send_id] = trace
    if trace.send_id != send_id:
        problems.append(f"the scope of send {trace.send_id}")
    if ledger.trace_of.get(send_id) is not trace:
        problems.append("another scope than on the first attempt")
    if trace.cleanups:
        problems.append("a scope already cleaned up")
    if not trace.units or trace.units[-1].steps != ["begin"]:
        problems.append("no unit of work begun on this scope for this attempt")
    if problems:
        with ledger.lock:
            ledger.leaks.extend(
                f"send {send_id}, attempt {attempt}: {p}" for p in problems
            )
    trace.attempts += 1
    return attempt


def transient(send_id: int, attempt: int) -> Exception:
    kind = TRANSIENT[(send_id + attempt) % len(TRANSIENT)]
    return kind(f"send {send_id}: attempt {attempt} failed")


def settle(request: LoadCommand, attempt: int) -> str:
    """The attempt's end, by plan: a response or an exception."""
    send_id = request.send_id
    if request.plan == "conflict":
        raise ConflictError(f"send {send_id}: conflict")
    if request.plan == "not_found":
        raise NotFoundError(f"send {send_id}: not found")
    if request.plan == "exhaust" or attempt <= request.failures:
        raise transient(send_id, attempt)
    return f"send {send_id}: done on attempt {attempt}"


class Cues:
    """Where the async sends wait for the test and tell it where they are."""

    def __init__(self, *, reaching: int, cancelling: int) -> None:
        self.gate = asyncio.Event()  # opens when every send is in its handler
        self.never = asyncio.Event()  # never set: only cancellation ends the wait
        self.everyone_in = asyncio.Event()
        self.all_parked = asyncio.Event()
        self.reaching = reaching
        self.cancelling = cancelling
        self._in = 0
        self._parked = 0

    def arrived(self) -> None:
        self._in += 1
        if self._in == self.reaching:
            self.everyone_in.set()

    async def park(self) -> NoReturn:
        """Tell the test this send is ready to be cancelled, and wait for it."""
        self._parked += 1
        if self._parked == self.cancelling:
            self.all_parked.set()
        await self.never.wait()
        raise AssertionError("the event that is never set was set")


SENDING: ContextVar[LoadCommand | None] = ContextVar("sending", default=None)
"""The request each driving task sends; tasks copy their context, so it is per send."""


class ParkingClock(FakeClock):
    """A `FakeClock` whose wait parks a ``cancel_wait`` send before its next attempt."""

    def __init__(self, ledger: Ledger, cues: Cues) -> None:
        super().__init__()
        self.ledger = ledger
        self.cues = cues

    async def sleep(self, seconds: float) -> None:
        await super().sleep(seconds)
        request = SENDING.get()
        if (
            request is not None
            and request.plan == "cancel_wait"
            and self.ledger.attempts[request.send_id] == request.failures
        ):
            try:
                await self.cues.park()
            except asyncio.CancelledError:
                self.ledger.cancelled[request.send_id] = "backoff"
                raise


class LoadHandler(CommandHandler[LoadCommand, str]):
    @inject
    def __init__(self, ledger: Ledger, trace: SendTrace, cues: Cues) -> None:
        self.ledger = ledger
        self.trace = trace
        self.cues = cues

    async def handle(self, request: LoadCommand) -> str:
        attempt = enter_attempt(self.ledger, self.trace, request)
        if request.send_id in self.ledger.cancelled:
            # Fail this attempt (and end the send) rather than park again forever.
            raise AssertionError(f"send {request.send_id}: attempt after cancellation")
        if attempt == 1:
            self.cues.arrived()
        if request.plan == "cancel" and attempt > request.failures:
            try:
                await self.cues.park()
            except asyncio.CancelledError:
                self.ledger.cancelled[request.send_id] = "handler"
                raise
        if attempt == 1:
            await self.cues.gate.wait()  # every send in flight at once
        return settle(request, attempt)


@dataclass(frozen=True)
class SyncCues:
    """The first `barrier.parties` sends meet inside their handlers, one per thread."""

    barrier: threading.Barrier


class SyncLoadHandler(CommandHandler[SyncLoadCommand, str]):
    @inject
    def __init__(self, ledger: Ledger, trace: SendTrace, cues: SyncCues) -> None:
        self.ledger = ledger
        self.trace = trace
        self.cues = cues

    def handle(self, request: SyncLoadCommand) -> str:
        attempt = enter_attempt(self.ledger, self.trace, request)
        if attempt == 1 and request.send_id < self.cues.barrier.parties:
            self.cues.barrier.wait(timeout=LIMIT)
        return settle(request, attempt)


# --- what each plan must end with ----------------------------------------------


@dataclass(frozen=True)
class Expected:
    outcome: str  # "ok", or the exception's class name
    detail: str | None  # the response, or the exception's message
    attempts: int
    validations: int
    authorizations: int
    units: tuple[tuple[str, ...], ...]  # each attempt's unit of work, in order


def expected(request: LoadCommand) -> Expected:
    send_id, k, name = request.send_id, request.failures, type(request).__qualname__
    failed = ("begin", "rollback")
    match request.plan:
        case "ok" | "flaky":
            return Expected(
                "ok",
                f"send {send_id}: done on attempt {k + 1}",
                k + 1,
                1,
                1,
                (*[failed] * k, ("begin", "commit")),
            )
        case "exhaust":
            last = transient(send_id, MAX_RETRIES + 1)
            return Expected(
                type(last).__qualname__,
                str(last),
                MAX_RETRIES + 1,
                1,
                1,
                (failed,) * (MAX_RETRIES + 1),
            )
        case "conflict":
            return Expected(
                "ConflictError", f"send {send_id}: conflict", 1, 1, 1, (failed,)
            )
        case "not_found":
            return Expected(
                "NotFoundError", f"send {send_id}: not found", 1, 1, 1, (failed,)
            )
        case "cancel":
            return Expected(CANCELLED, None, k + 1, 1, 1, (failed,) * (k + 1))
        case "cancel_wait":
            return Expected(CANCELLED, None, k, 1, 1, (failed,) * k)
        case "invalid":
            return Expected(
                "ValidationError", f"{name} is invalid: 1 error", 0, 1, 0, ()
            )
        case "forbidden":
            return Expected(
                "ForbiddenError",
                f"{name} refused: policy CountingPolicy refused",
                0,
                1,
                1,
                (),
            )


def actual(outcome: object) -> tuple[str, str | None]:
    if outcome == CANCELLED:
        return CANCELLED, None
    if isinstance(outcome, BaseException):
        return type(outcome).__qualname__, str(outcome)
    assert isinstance(outcome, str), f"unexpected response {outcome!r}"
    return "ok", outcome


def make_plans(rng: random.Random, mix: dict[Plan, int]) -> list[tuple[Plan, int]]:
    plans: list[tuple[Plan, int]] = []
    for plan, count in mix.items():
        for _ in range(count):
            failures = 0
            if plan == "flaky":
                failures = rng.randint(1, MAX_RETRIES)  # succeeds on the last at most
            elif plan == "cancel":
                failures = rng.randint(0, MAX_RETRIES)  # cancelled on a later attempt
            elif plan == "cancel_wait":
                failures = rng.randint(1, MAX_RETRIES)  # cancelled in the k-th wait
            plans.append((plan, failures))
    rng.shuffle(plans)
    return plans


def build(
    ledger: Ledger,
    clock: FakeClock,
    events: list[RetryEvent],
    handler: type[object],
    cues: object,
) -> tuple[Mediator, Injector]:
    class Fakes(Module):
        def configure(self, binder: Binder) -> None:
            binder.bind(Ledger, to=ledger)
            binder.bind(type(cues), to=cues)
            binder.bind(AuditSink, to=CountingSink)
            binder.bind(AsyncUnitOfWork, to=CountingUnit)
            binder.bind(UnitOfWork, to=SyncCountingUnit)

    injector = Injector(
        [
            Fakes(),
            MediatorModule(
                lambda m: (
                    m.add_handler(handler).add_validator(LoadValidator).use_defaults()
                )
            ),
            ResilienceMediatorModule(
                ResilienceMediatorOptions(max_retry_attempts=MAX_RETRIES),
                clock=clock,
                random=random.Random(SEED).random,
                listeners=(events.append,),
            ),
        ]
    )
    return injector.get(Mediator), injector


def check_every_send(
    requests: Iterable[LoadCommand], outcomes: dict[int, object], ledger: Ledger
) -> Counter[str]:
    """Assert each send's outcome and what the chain did for it; count outcomes."""
    tally: Counter[str] = Counter()
    reaching = 0
    for request in requests:
        send_id, want = request.send_id, expected(request)
        got = actual(outcomes[send_id])
        tally[got[0]] += 1
        where = f"send {send_id} ({request.plan}, k={request.failures})"
        assert got == (want.outcome, want.detail), where
        assert ledger.attempts[send_id] == want.attempts, where
        assert ledger.validations[send_id] == want.validations, where
        assert ledger.authorizations[send_id] == want.authorizations, where
        records = ledger.audit.get(send_id, [])
        assert [(r.outcome, r.principal) for r in records] == [
            (want.outcome, PRINCIPAL.id)
        ], where
        trace = ledger.trace_of.get(send_id)
        if not want.attempts:
            assert trace is None, f"{where}: a scoped service for a send never handled"
            continue
        reaching += 1
        assert trace is not None, where
        assert trace.send_id == send_id, where
        assert trace.attempts == want.attempts, where
        assert tuple(tuple(unit.steps) for unit in trace.units) == want.units, where
        assert trace.cleanups == 1, where
        assert trace.unfinished_at_close == 0, f"{where}: cleaned up mid-transaction"
    assert ledger.leaks == []
    # Every scoped service and unit of work built belongs to exactly one send.
    assert len(ledger.traces) == reaching
    assert len({id(trace) for trace in ledger.traces}) == reaching
    assert sum(len(trace.units) for trace in ledger.traces) == len(ledger.units)
    assert sum(len(records) for records in ledger.audit.values()) == sum(tally.values())
    return tally


def retries_expected(requests: Iterable[LoadCommand]) -> Counter[int]:
    """How many retries each attempt number announces, over all sends."""
    counts: Counter[int] = Counter()
    for request in requests:
        want = expected(request)
        if request.plan in ("flaky", "cancel", "exhaust"):
            counts.update(range(1, want.attempts))  # no wait after the last attempt
        elif request.plan == "cancel_wait":
            counts.update(range(1, want.attempts + 1))  # cancelled in the last wait
    return counts


def assert_no_scope(injector: Injector) -> None:
    assert current_scope.get() is None
    with pytest.raises(ScopeError):
        injector.get(SendTrace)
    with pytest.raises(ScopeError):
        at_scope_exit(lambda: None)


# --- the async run ---------------------------------------------------------------

MIX: dict[Plan, int] = {
    "ok": 300,
    "flaky": 250,
    "exhaust": 100,
    "conflict": 75,
    "not_found": 75,
    "cancel": 60,
    "cancel_wait": 40,
    "invalid": 50,
    "forbidden": 50,
}


async def test_a_thousand_concurrent_sends_each_end_as_planned() -> None:
    baseline = leftovers()
    stopwatch = SystemClock()
    plans = make_plans(random.Random(SEED), MIX)
    requests = [
        LoadCommand(send_id=n, plan=plan, failures=k)
        for n, (plan, k) in enumerate(plans)
    ]
    cancelling = {
        r.send_id: "handler" if r.plan == "cancel" else "backoff"
        for r in requests
        if r.plan in ("cancel", "cancel_wait")
    }
    cues = Cues(
        reaching=sum(r.plan in REACHES_HANDLER for r in requests),
        cancelling=len(cancelling),
    )
    ledger = Ledger()
    clock = ParkingClock(ledger, cues)
    events: list[RetryEvent] = []
    mediator, injector = build(ledger, clock, events, LoadHandler, cues)
    outcomes: dict[int, object] = {}
    scope_after: dict[int, object] = {}

    async def drive(request: LoadCommand) -> None:
        SENDING.set(request)
        try:
            response = await mediator.send(request)
            outcomes[request.send_id] = response
        except Exception as error:
            outcomes[request.send_id] = error
        except asyncio.CancelledError:
            outcomes[request.send_id] = CANCELLED
            raise
        finally:
            scope_after[request.send_id] = current_scope.get()

    started = stopwatch.monotonic()
    with acting_as(PRINCIPAL):
        async with asyncio.timeout(LIMIT), asyncio.TaskGroup() as group:
            tasks = {r.send_id: group.create_task(drive(r)) for r in requests}
            await cues.everyone_in.wait()
            # Every send that reaches its handler is inside it now, each in
            # its own open scope; the invalid and refused ones are done.
            assert len(ledger.traces) == cues.reaching
            assert not any(trace.cleanups for trace in ledger.traces)
            assert len(outcomes) == MIX["invalid"] + MIX["forbidden"]
            cues.gate.set()
            await cues.all_parked.wait()
            for send_id in cancelling:
                tasks[send_id].cancel()
    seconds = stopwatch.monotonic() - started

    tally = check_every_send(requests, outcomes, ledger)
    for send_id, task in tasks.items():
        # Cancellation propagated out of the mediator, was not swallowed.
        assert task.cancelled() == (send_id in cancelling), f"send {send_id}"
    assert ledger.cancelled == cancelling  # each where it was planned
    assert scope_after == dict.fromkeys(tasks)  # every send reset the contextvar
    assert_no_scope(injector)
    want_retries = retries_expected(requests)
    assert Counter(event.attempt for event in events) == want_retries
    assert len(clock.sleeps) == want_retries.total()
    assert all(0.1 <= s < 0.8 for s in clock.sleeps)  # 0.2 * 2**(n-1) * [0.5, 1)
    await assert_back_to_baseline(baseline)

    assert tally == {
        "ok": MIX["ok"] + MIX["flaky"],
        "ConflictError": MIX["conflict"],
        "NotFoundError": MIX["not_found"],
        CANCELLED: MIX["cancel"] + MIX["cancel_wait"],
        "ValidationError": MIX["invalid"],
        "ForbiddenError": MIX["forbidden"],
        **Counter(
            type(transient(r.send_id, MAX_RETRIES + 1)).__qualname__
            for r in requests
            if r.plan == "exhaust"
        ),
    }
    record(
        "mediator_load",
        sends=len(requests),
        concurrency=len(requests),
        outcomes=dict(sorted(tally.items())),
        attempts=ledger.attempts.total(),
        retries=len(clock.sleeps),
        transactions=len(ledger.units),
        seconds=round(seconds, 3),
    )


# --- the sync run ------------------------------------------------------------------

SYNC_MIX: dict[Plan, int] = {
    "ok": 60,
    "flaky": 60,
    "exhaust": 20,
    "conflict": 15,
    "not_found": 15,
    "invalid": 15,
    "forbidden": 15,
}
THREADS = 8


def test_two_hundred_sync_sends_from_eight_threads_each_end_as_planned() -> None:
    baseline = leftovers()
    threads_before = threading.active_count()
    stopwatch = SystemClock()
    plans = make_plans(random.Random(SEED + 1), SYNC_MIX)
    # The first sends meet at the barrier inside their handlers: they must get there.
    plans.sort(key=lambda entry: entry[0] not in REACHES_HANDLER)
    plans[THREADS:] = random.Random(SEED + 2).sample(
        plans[THREADS:], len(plans) - THREADS
    )
    requests = [
        SyncLoadCommand(send_id=n, plan=plan, failures=k)
        for n, (plan, k) in enumerate(plans)
    ]
    ledger = Ledger()
    clock = FakeClock()
    events: list[RetryEvent] = []
    cues = SyncCues(threading.Barrier(THREADS))
    mediator, injector = build(ledger, clock, events, SyncLoadHandler, cues)
    scope_after: dict[int, object] = {}

    def drive(request: SyncLoadCommand) -> object:
        with acting_as(PRINCIPAL):
            try:
                return mediator.send_sync(request)
            except Exception as error:
                return error
            finally:
                scope_after[request.send_id] = current_scope.get()

    started = stopwatch.monotonic()
    with ThreadPoolExecutor(max_workers=THREADS) as pool:
        results = list(pool.map(drive, requests, timeout=LIMIT))
    seconds = stopwatch.monotonic() - started
    outcomes = {r.send_id: result for r, result in zip(requests, results, strict=True)}

    assert not cues.barrier.broken  # the first eight were in flight together
    tally = check_every_send(requests, outcomes, ledger)
    assert scope_after == dict.fromkeys(outcomes)
    assert_no_scope(injector)
    want_retries = retries_expected(requests)
    assert Counter(event.attempt for event in events) == want_retries
    assert len(clock.sleeps) == want_retries.total()
    assert threading.active_count() == threads_before
    assert leftovers().within(baseline)
    assert tally["ok"] == SYNC_MIX["ok"] + SYNC_MIX["flaky"]

    record(
        "mediator_load_sync",
        sends=len(requests),
        threads=THREADS,
        outcomes=dict(sorted(tally.items())),
        attempts=ledger.attempts.total(),
        retries=len(clock.sleeps),
        transactions=len(ledger.units),
        seconds=round(seconds, 3),
    )
