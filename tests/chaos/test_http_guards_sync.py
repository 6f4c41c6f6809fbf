"""Chaos: the sync client's guards hold with 100 threads against a real server.

`ResilientTransport`, behind `create_client` or an `httpx.Client` of its own,
has thread-safe twins of the async guards: the per-host breakers and the
concurrency limiter each behind a lock. Every scenario here releases `THREADS`
threads together (a `threading.Barrier`) against the fault server (uvicorn on
127.0.0.1, counting per ``?key=``) and checks its bound where it matters, at
the server: an open breaker lets no thread through, a half-open one exactly
one probe, and the limiter at most its permits, with at most `CONNECTIONS`
connections in the client's pool.

Every scenario also ends with nothing left behind (its threads joined and
the thread count back to where it was, file descriptors and sockets back to
their baseline once the client is closed) and with the two planted secrets of
the async guard scenarios, a bearer token in ``Authorization`` and a
``?token=`` query parameter, in none of the log records, events and
exceptions it produced (httpx's own ``HTTP Request:`` line, which carries the
whole URL, is dropped meanwhile, as there).

The breaker's break runs on a `FakeClock`, advanced by the test: no test waits
for time to pass. Real time passes only at the server (``/sleep``); the tests
wait for what the server's counters show by bounded polls, and for threads by
bounded joins.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Generator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Generic, TypeAlias, TypeVar

import httpx

from http_resilience import (
    BreakerEvent,
    BrokenCircuitError,
    Clock,
    HttpEvent,
    HttpResilienceOptions,
    RateLimitedError,
    RejectionEvent,
    ResilientTransport,
    SystemClock,
    create_client,
)
from http_resilience.testing import FakeClock
from tests.chaos.http_guards_harness import SECRET, TOKEN, key, kinds
from tests.chaos.invariants import (
    SecretWatch,
    assert_back_to_baseline_sync,
    leftovers,
    watch_secrets,
    without_httpx_request_lines,
)
from tests.support.fault_server import FaultServer
from tests.support.figures import record

T = TypeVar("T")
E = TypeVar("E")
Outcome: TypeAlias = httpx.Response | Exception

THREADS = 100
CONNECTIONS = 16
LIMITS = httpx.Limits(
    max_connections=CONNECTIONS, max_keepalive_connections=CONNECTIONS
)
CLOCK = SystemClock()
JOIN_LIMIT = 10.0  # seconds a wave's threads get to start together and end
POLL = 0.005  # seconds, between two looks at the server's counters
POLL_LIMIT = 5.0  # seconds

BREAK = 3.0  # seconds, on the fake clock
FAILURES_TO_OPEN = 5
BREAKER = HttpResilienceOptions.model_validate(
    {
        "max_retry_attempts": 0,  # one attempt per call: every hit is one call
        "minimum_throughput": FAILURES_TO_OPEN,
        "failure_ratio": 0.5,
        "sampling_duration": 10,
        "break_duration": BREAK,
        # On the fake clock an attempt's httpx timeouts are the whole attempt
        # timeout, in real seconds: a wave of THREADS through CONNECTIONS
        # waits in the pool for far less.
        "attempt_timeout": 5,
        "total_request_timeout": 10,
    }
)
# The probe stays this long at the server: every other thread of its wave has
# been refused long before it answers and closes the breaker.
SLOW_PROBE = "/sleep/0.5"


# --- the frame: threads, a client, the checks after ---------------------------------


class Wave(Generic[T]):
    """`count` calls, each on a thread of its own, released together by a barrier.

    An exception a call raises is its outcome. `join` waits, bounded, for every
    thread and fails if one is still running.
    """

    def __init__(self, count: int, call: Callable[[int], T]) -> None:
        self._call = call
        self._start = threading.Barrier(count, timeout=JOIN_LIMIT)
        self._lock = threading.Lock()
        self._outcomes: dict[int, T | Exception] = {}
        self._threads = [
            # Daemons: a thread stuck in a broken library fails the test
            # (`join`) without keeping the interpreter from exiting.
            threading.Thread(
                target=self._one,
                args=(index,),
                name=f"sync-guard-{index}",
                daemon=True,
            )
            for index in range(count)
        ]

    def _one(self, index: int) -> None:
        outcome: T | Exception
        try:
            self._start.wait()
            outcome = self._call(index)
        except Exception as error:
            outcome = error
        with self._lock:
            self._outcomes[index] = outcome

    @property
    def ended(self) -> int:
        """Calls that have ended so far."""
        with self._lock:
            return len(self._outcomes)

    def start(self) -> Wave[T]:
        for thread in self._threads:
            thread.start()
        return self

    def join(self) -> list[T | Exception]:
        deadline = CLOCK.monotonic() + JOIN_LIMIT
        for thread in self._threads:
            thread.join(max(deadline - CLOCK.monotonic(), 0.0))
        running = sum(thread.is_alive() for thread in self._threads)
        assert not running, f"{running} thread(s) still running after {JOIN_LIMIT} s"
        return [self._outcomes[index] for index in range(len(self._threads))]


def at_once(count: int, call: Callable[[int], T]) -> list[T | Exception]:
    """`call(0)` ... `call(count - 1)` on threads released together; joined."""
    return Wave(count, call).start().join()


@dataclass
class SyncRun:
    """A sync client with secrets planted in every request, and what it let out."""

    client: httpx.Client
    server: FaultServer
    watch: SecretWatch
    events: list[HttpEvent]

    def url(self, route: str, key: str, *, base: str | None = None) -> str:
        return f"{base or self.server.url}{route}?key={key}&token={TOKEN}"

    def get(self, route: str, key: str, *, base: str | None = None) -> httpx.Response:
        return self.client.get(self.url(route, key, base=base))

    def of(self, kind: type[E]) -> list[E]:
        return [event for event in self.events if isinstance(event, kind)]

    def keep(self, outcomes: list[Outcome]) -> list[Outcome]:
        """Show every exception to the secret watch."""
        for outcome in outcomes:
            if isinstance(outcome, Exception):
                self.watch.exception(outcome)
        return outcomes

    def wave(self, route: str, key: str) -> list[Outcome]:
        """`THREADS` gets of `route` under `key` at once, kept for the watch."""
        return self.keep(at_once(THREADS, lambda index: self.get(route, key)))


@contextmanager
def scenario(
    server: FaultServer,
    *,
    options: HttpResilienceOptions,
    clock: Clock | None = None,
    own_client: bool = False,
) -> Generator[SyncRun]:
    """Run a scenario; afterwards check it left nothing behind and leaked nothing.

    The client comes from `create_client`, or with `own_client` is an
    `httpx.Client` around a `ResilientTransport` built here.
    """
    threads = threading.active_count()
    baseline = leftovers()
    with without_httpx_request_lines(), watch_secrets() as watch:
        events: list[HttpEvent] = []
        listeners = [watch.event, events.append]
        headers = {"Authorization": f"Bearer {SECRET}"}
        if own_client:
            transport = ResilientTransport(
                httpx.HTTPTransport(limits=LIMITS),
                options=options,
                name="chaos-sync",
                clock=clock,
                listeners=listeners,
            )
            client = httpx.Client(transport=transport, headers=headers)
        else:
            client = create_client(
                "chaos-sync",
                options,
                clock=clock,
                listeners=listeners,
                headers=headers,
                limits=LIMITS,
            )
        try:
            yield SyncRun(client, server, watch, events)
        finally:
            client.close()
        # Every wave joined its threads; the client started none of its own.
        assert threading.active_count() <= threads, (
            f"threads left: {threading.active_count()} > baseline {threads}"
        )
        assert_back_to_baseline_sync(baseline)
    watch.assert_absent(SECRET, TOKEN)


def until(condition: Callable[[], bool], what: str) -> None:
    """Wait, a bounded time, for a condition the server or the threads show."""
    deadline = CLOCK.monotonic() + POLL_LIMIT
    while not condition():
        assert CLOCK.monotonic() < deadline, f"not within {POLL_LIMIT} s: {what}"
        CLOCK.sleep_sync(POLL)


# --- the breaker ---------------------------------------------------------------------


def transitions(run: SyncRun) -> list[tuple[str, str]]:
    return [(event.previous, event.current) for event in run.of(BreakerEvent)]


@contextmanager
def opened_breaker(server: FaultServer) -> Generator[tuple[SyncRun, FakeClock]]:
    """A scenario on the `BREAKER` options and a `FakeClock`, its breaker open."""
    clock = FakeClock()
    with scenario(server, options=BREAKER, clock=clock) as run:
        failing = key("sync-failing")
        for _ in range(FAILURES_TO_OPEN):
            assert run.get("/status/503", failing).status_code == 503
        assert server.hits(failing) == FAILURES_TO_OPEN
        assert transitions(run) == [("closed", "open")]
        yield run, clock


def all_refused(run: SyncRun, name: str) -> list[Outcome]:
    """`THREADS` threads at once while the breaker is open: none reaches the server."""
    refused = key(name)
    outcomes = run.wave("/healthy", refused)
    assert kinds(outcomes) == {"BrokenCircuitError": THREADS}
    assert run.server.hits(refused) == 0
    return outcomes


def waits(outcomes: list[Outcome]) -> set[float | None]:
    return {
        error.retry_after for error in outcomes if isinstance(error, BrokenCircuitError)
    }


def test_an_open_breaker_lets_no_thread_reach_its_host(
    fault_server: FaultServer,
) -> None:
    with opened_breaker(fault_server) as (run, clock):
        started = CLOCK.monotonic()
        outcomes = all_refused(run, "sync-open")
        elapsed = CLOCK.monotonic() - started
        assert waits(outcomes) == {BREAK}
        rejections = [event.reason for event in run.of(RejectionEvent)]
        assert rejections == ["circuit_open"] * THREADS
        # Half-way through the break, still nothing gets through.
        clock.advance(BREAK / 2)
        assert waits(all_refused(run, "sync-still-open")) == {BREAK / 2}
        # The breaker is per host: half the threads go to the same server under
        # another host name, at the same time, and all of them are answered.
        blocked, other = key("sync-blocked"), key("sync-other-host")
        localhost = run.server.url.replace("127.0.0.1", "localhost")

        def mixed(index: int) -> httpx.Response:
            if index % 2:
                return run.get("/healthy", other, base=localhost)
            return run.get("/healthy", blocked)

        split = run.keep(at_once(THREADS, mixed))
        assert kinds(split[0::2]) == {"BrokenCircuitError": THREADS // 2}
        assert kinds(split[1::2]) == {"200": THREADS // 2}
        assert fault_server.hits(blocked) == 0
        assert fault_server.hits(other) == THREADS // 2
        assert transitions(run) == [("closed", "open")]
    record(
        "sync_breaker_open",
        threads=THREADS,
        reached_server=0,
        rejected=2 * THREADS + THREADS // 2,
        other_host_through=fault_server.hits(other),
        batch_ms=round(elapsed * 1000, 1),
    )


def test_a_half_open_breaker_lets_exactly_one_thread_probe(
    fault_server: FaultServer,
) -> None:
    with opened_breaker(fault_server) as (run, clock):
        clock.advance(BREAK)
        probe = key("sync-probe")
        first = Wave(THREADS, lambda index: run.get(SLOW_PROBE, probe)).start()
        try:
            # The probe reaches the server and sleeps there; every other thread
            # of its wave is refused meanwhile, and a second wave comes.
            until(
                lambda: fault_server.hits(probe) >= 1 and first.ended >= THREADS - 1,
                "the probe arrives and the rest of its wave is refused",
            )
            second = run.wave(SLOW_PROBE, probe)
            probe_in_flight = first.ended < THREADS
        finally:
            outcomes = run.keep(first.join())  # the probe's 0.5 s, at most
        assert kinds(outcomes) == {"200": 1, "BrokenCircuitError": THREADS - 1}
        fault_server.wait_idle_sync(probe)
        assert fault_server.hits(probe) == 1
        assert fault_server.max_in_flight(probe) == 1
        assert probe_in_flight, "the probe ended before the second wave came"
        assert kinds(second) == {"BrokenCircuitError": THREADS}
        assert transitions(run) == [
            ("closed", "open"),
            ("open", "half_open"),
            ("half_open", "closed"),
        ]
        # Closed again: the next wave all goes through.
        after = key("sync-after")
        assert kinds(run.wave("/healthy", after)) == {"200": THREADS}
        assert fault_server.hits(after) == THREADS
    record(
        "sync_breaker_half_open",
        probe="slow (0.5 s at the server)",
        threads=2 * THREADS,
        probes_at_server=fault_server.hits(probe),
        probe_max_in_flight=fault_server.max_in_flight(probe),
        rejected=2 * THREADS - 1,
        after_close_threads=THREADS,
        after_close_at_server=fault_server.hits(after),
    )


def test_a_failed_probe_opens_the_sync_breaker_again(
    fault_server: FaultServer,
) -> None:
    with opened_breaker(fault_server) as (run, clock):
        clock.advance(BREAK)
        probe = key("sync-failing-probe")
        # The probe's 503 is the answer; it opens the breaker again for a whole
        # break of the fake clock, so a thread that comes after it is refused.
        outcomes = run.wave("/status/503", probe)
        assert kinds(outcomes) == {"503": 1, "BrokenCircuitError": THREADS - 1}
        fault_server.wait_idle_sync(probe)
        assert fault_server.hits(probe) == 1
        assert transitions(run) == [
            ("closed", "open"),
            ("open", "half_open"),
            ("half_open", "open"),
        ]
        # A fresh break: nothing through until it is over, then one probe again.
        assert waits(all_refused(run, "sync-reopened")) == {BREAK}
        clock.advance(BREAK)
        second = key("sync-second-probe")
        outcomes = run.wave(SLOW_PROBE, second)
        assert kinds(outcomes) == {"200": 1, "BrokenCircuitError": THREADS - 1}
        fault_server.wait_idle_sync(second)
        assert fault_server.hits(second) == 1
        assert fault_server.max_in_flight(second) == 1
        assert transitions(run)[-2:] == [("open", "half_open"), ("half_open", "closed")]
    record(
        "sync_breaker_probe_failed",
        threads=THREADS,
        probes_at_server=fault_server.hits(probe),
        reopened_at_server=0,
        second_probes_at_server=fault_server.hits(second),
    )


# --- the concurrency limiter ---------------------------------------------------------

LIMIT = 4
QUEUE = 8
LIMITER = HttpResilienceOptions.model_validate(
    {
        "max_retry_attempts": 0,
        "concurrency_limit": LIMIT,
        "queue_limit": QUEUE,
        "attempt_timeout": 5,
        "total_request_timeout": 10,
    }
)
LIMITED_THREADS = 64
WORK = 0.05  # seconds each burst request spends at the server
ROUNDS = 5  # calls each thread makes back to back in the second phase
STEADY_WORK = 0.01  # seconds each of those spends at the server


def test_the_sync_limiter_keeps_the_server_within_its_limit(
    fault_server: FaultServer,
) -> None:
    with scenario(fault_server, options=LIMITER, own_client=True) as run:
        # A burst: every thread at once on a route that holds its permit.
        burst = key("sync-burst")
        outcomes = run.keep(
            at_once(LIMITED_THREADS, lambda index: run.get(f"/sleep/{WORK}", burst))
        )
        counted = kinds(outcomes)
        assert set(counted) == {"200", "RateLimitedError"}
        admitted, refused = counted["200"], counted["RateLimitedError"]
        # The permits and the queue are taken before the first permit frees.
        assert admitted == LIMIT + QUEUE
        refusals = [e for e in outcomes if isinstance(e, RateLimitedError)]
        assert all("concurrency limit" in str(e) for e in refusals)
        fault_server.wait_idle_sync(burst)
        assert fault_server.hits(burst) == admitted
        assert fault_server.max_in_flight(burst) <= LIMIT
        burst_peak = fault_server.max_in_flight(burst)

        # Then every thread calls ROUNDS times back to back: permits change
        # hands, through the queue, thousands of times a second.
        steady = key("sync-steady")

        def calls(index: int) -> list[Outcome]:
            ended: list[Outcome] = []
            for _ in range(ROUNDS):
                try:
                    ended.append(run.get(f"/sleep/{STEADY_WORK}", steady))
                except Exception as error:
                    ended.append(error)
            return ended

        per_thread = at_once(LIMITED_THREADS, calls)
        flat: list[Outcome] = []
        for ended in per_thread:
            assert isinstance(ended, list), ended
            flat.extend(ended)
        run.keep(flat)
        steady_counted = kinds(flat)
        assert set(steady_counted) <= {"200", "RateLimitedError"}
        fault_server.wait_idle_sync(steady)
        assert fault_server.hits(steady) == steady_counted["200"]
        assert fault_server.max_in_flight(steady) <= LIMIT
        rejections = run.of(RejectionEvent)
        assert {event.reason for event in rejections} == {"concurrency_limit"}
        assert len(rejections) == refused + steady_counted["RateLimitedError"]
    record(
        "sync_limiter",
        limit=LIMIT,
        queue=QUEUE,
        burst_threads=LIMITED_THREADS,
        burst_admitted=admitted,
        burst_rejected=refused,
        burst_max_in_flight_at_server=burst_peak,
        steady_threads=LIMITED_THREADS,
        steady_calls=len(flat),
        steady_completed=steady_counted["200"],
        steady_rejected=steady_counted["RateLimitedError"],
        steady_max_in_flight_at_server=fault_server.max_in_flight(steady),
    )
