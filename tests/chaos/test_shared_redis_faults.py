"""Chaos: the fault proxy between the replicas and Redis (latency, resets, blackhole).

Two replicas, each its own `SharedState` (sync thread, Redis connection) and
async client, reach the session's ``redis-server`` through the fault proxy;
two control replicas, the same clients without ``shared=``, run beside them
in the same process. All four carry the same steady load (a constant arrival
rate, bounded in count and time) against the session's fault server, a flaky
host: one call in five goes to a route that always answers 503 (retried within
the budget, counted by the breaker), the others to one that answers 200. The
proxy goes through seven phases, each under load: pass-through, latency beyond
the sync interval (every sync times out; the scripts still run in Redis, only
their answers are late), pass-through, connection resets, pass-through, a
blackhole (connections accepted, nothing answered), pass-through. What holds:

- No call fails because of Redis: every answer is the host's (200 from the
  healthy route, 503 from the failing one), every exception a refusal by a
  strategy (an open breaker), no call is left hanging or dropped.
- No call waits on Redis: not one Redis command is sent from the event
  loop's thread, where every call runs (each is counted, by thread, in the
  Redis client). A count, not a timing: on two busy cores the replicas' p99s
  differ by tens of milliseconds whatever they do, so the p99 against the
  controls' is recorded here and compared in `benchmarks/shared_state.py`.
  Falling back from a blackholed Redis costs a call nothing: the socket
  waits (connect and answer, one interval each, no retry) are the sync
  thread's, and it holds no lock a call takes meanwhile.
- Each replica falls back to local state within two intervals of the fault
  (the next sync is due within one, and fails within the next: its socket
  timeout is one interval), stays down while the fault lasts, trying Redis
  with a growing backoff (fewer connections than one every two intervals),
  and resumes sharing once the proxy passes again, within the longest backoff
  (5 s) and an interval.
- Each replica logs one WARNING per outage and one INFO per return, in turn,
  however many syncs fail in between: each fault is one outage.
- Stray outages are allowed outside the faults, bounded: on two busy cores a
  sync through the proxy is now and then answered past its socket timeout (one
  interval) in a pass-through phase. A stray is a timeout (never another
  error: that would be a defect, not the machine), it ends within the resume
  bound, and a replica has at most `MOST_STRAYS`. One that is still on when a
  fault begins covers that fault: the replica is down already.
- After a reset or a blackhole (which let nothing reach Redis), the keys the
  test deleted during the fault are written again once sharing resumes: the
  syncs reach Redis again. Every key has a TTL, after each fault and after
  the run.

Real time and sockets are what is under test: the clock is `SystemClock`.
"""

from __future__ import annotations

import asyncio
import logging
import math
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import httpx
import pytest
import redis

from http_resilience import (
    BrokenCircuitError,
    HttpResilienceOptions,
    ResilientTransport,
    SharedState,
    SystemClock,
    create_async_client,
)
from http_resilience._core.clock import wall_time
from tests.support.fault_proxy import (
    Blackhole,
    Fault,
    FaultProxy,
    Latency,
    MakeProxy,
    PassThrough,
    Reset,
)
from tests.support.fault_server import FaultServer
from tests.support.figures import record
from tests.support.load import LoadResult, run_load
from tests.support.redis_server import RedisServer

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(180)]

CLOCK = SystemClock()
NAME = "redis-faults"
REPLICAS = 2
INTERVAL = 0.1  # the sync interval, and so the Redis socket timeout
LATENCY = 0.3  # added to every answer from Redis: three intervals
RATE = 50.0  # arrivals per second, per replica
FAILING_EVERY = 5  # one call in five goes to the route that always fails
PHASE = 2.0  # seconds of load per phase
# Scheduling slack: four replicas, the proxy, uvicorn and two sync threads
# share two cores and one GIL, on a machine that may be busy with other work.
SCHEDULING = 0.5
FALL_BACK_BOUND = 2 * INTERVAL + SCHEDULING
RESUME_BOUND = 5.0 + INTERVAL + SCHEDULING  # the longest backoff, then a sync
# Without backoff a replica would try Redis every interval during a fault.
MOST_CONNECTIONS = REPLICAS * PHASE / INTERVAL / 2
# Stray outages per replica, over the four pass-through phases: one a phase.
# Measured: none on a quiet machine, one now and then on a loaded one.
MOST_STRAYS = 4
# The one failure a busy machine explains: a sync answered past its timeout.
STRAY_CAUSE = "TimeoutError"
POLL = 0.01

OPTIONS: dict[str, Any] = {
    "base_delay": "1ms",
    "max_retry_attempts": 2,
    "retry_budget_ratio": 0.2,
    "retry_budget_min_per_second": 5,
    "minimum_throughput": 20,
    "failure_ratio": 0.5,
    "break_duration": 1,
}
PHASES: list[tuple[str, Fault]] = [
    ("pass-through", PassThrough()),
    ("latency", Latency(LATENCY)),
    ("pass-through", PassThrough()),
    ("reset", Reset()),
    ("pass-through", PassThrough()),
    ("blackhole", Blackhole()),
    ("pass-through", PassThrough()),
]
# Faults that let nothing reach Redis: keys deleted meanwhile stay deleted.
SILENT = ("reset", "blackhole")


class WatchedRedis(redis.Redis):
    """A Redis client that counts the commands sent from one thread."""

    watched: int | None = None
    from_watched = 0

    def execute_command(self, *args: Any, **options: Any) -> Any:
        if threading.get_ident() == self.watched:
            WatchedRedis.from_watched += 1
        return super().execute_command(*args, **options)  # type: ignore[no-untyped-call]  # pyright: ignore[reportUnknownMemberType, reportUnknownVariableType]


class WrongAnswerError(Exception):
    """An answer the host would not give: the status of another route."""


@dataclass
class Replica:
    """One client under load, and what its calls got."""

    label: str
    client: httpx.AsyncClient
    shared: SharedState | None
    answers: Counter[str] = field(default_factory=Counter[str])

    async def call(self, index: int) -> None:
        failing = index % FAILING_EVERY == 0
        route = "/status/503" if failing else "/healthy"
        response = await self.client.get(f"{route}?key={self.key(failing)}")
        expected = 503 if failing else 200
        if response.status_code != expected:
            raise WrongAnswerError(f"{route}: {response.status_code}")
        self.answers[str(response.status_code)] += 1

    def key(self, failing: bool) -> str:
        """The fault server's counter of this replica's calls to one route."""
        return f"{NAME}-{self.label}-{'503' if failing else '200'}"

    def hits(self, fault_server: FaultServer) -> int:
        return sum(fault_server.hits(self.key(failing)) for failing in (True, False))


@dataclass(frozen=True)
class Row:
    """One phase's figures."""

    phase: str
    calls: int
    shared_p99_ms: float
    control_p99_ms: float
    shared_max_ms: float
    control_max_ms: float
    shared_slow: int
    control_slow: int
    shared_refused: int
    control_refused: int
    redis_connections: int
    # Requests the host got beyond one per answered call: retries, mostly.
    shared_retries: int
    control_retries: int


@dataclass(frozen=True)
class Outage:
    """One replica's fall back to local state, until sharing resumed.

    Attributes:
        began: When it logged the WARNING, wall-clock seconds.
        ended: When it logged the INFO; the run's end if it did not (a stray
            begun after the last resume).
        cause: The WARNING's message, naming the exception.
    """

    began: float
    ended: float
    cause: str

    def covers(self, fault: Phase, cleared: float) -> bool:
        """Whether the replica fell back in time for `fault` and stayed down."""
        return (
            self.began <= fault.switched_at + FALL_BACK_BOUND and self.ended >= cleared
        )


def outages(lines: list[logging.LogRecord], run_ended: float) -> list[Outage]:
    """One replica's outages, from its log lines: a WARNING, then an INFO, in turn."""
    levels = [r.levelno for r in lines]
    alternating = [logging.WARNING, logging.INFO] * (len(lines) // 2)
    alternating += [logging.WARNING] * (len(lines) % 2)
    assert levels == alternating, [r.getMessage() for r in lines]
    ends = [r.created for r in lines[1::2]] + [run_ended]
    return [
        Outage(warning.created, ended, warning.getMessage())
        for warning, ended in zip(lines[::2], ends, strict=False)
    ]


def check_outages(
    found: list[Outage], phases: list[Phase]
) -> tuple[list[float], list[float], list[Outage]]:
    """Assert one replica's outages; its fall-back and resume lags (ms), its strays.

    Each fault is covered by one outage: begun within `FALL_BACK_BOUND` of
    the switch (or before it, by a stray timeout), lasting until the fault
    cleared, ended within `RESUME_BOUND` of that. Every other outage is a
    stray: a timeout, ended within `RESUME_BOUND`, at most `MOST_STRAYS`.
    """
    fell: list[float] = []
    came: list[float] = []
    covering: list[Outage] = []
    for index, phase in enumerate(phases):
        if phase.name == "pass-through":
            continue
        cleared = phases[index + 1].switched_at
        covered = [o for o in found if o.covers(phase, cleared)]
        assert len(covered) == 1, (phase.name, found)
        outage = covered[0]
        if outage.began < phase.switched_at:
            # Down before the fault: a stray that lasted into it.
            assert STRAY_CAUSE in outage.cause, (phase.name, outage)
        assert outage.ended - cleared <= RESUME_BOUND, (phase.name, outage)
        fell.append(round((outage.began - phase.switched_at) * 1000, 1))
        came.append(round((outage.ended - cleared) * 1000, 1))
        covering.append(outage)
    extra = [o for o in found if o not in covering]
    for stray in extra:
        assert STRAY_CAUSE in stray.cause, stray
        assert stray.ended - stray.began <= RESUME_BOUND, stray
    assert len(extra) <= MOST_STRAYS, extra
    return fell, came, extra


@dataclass
class Phase:
    """What one phase measured."""

    name: str
    switched_at: float
    loads: list[LoadResult]
    attempts: int
    retries: list[int]


def percentile(latencies: list[float], fraction: float) -> float:
    ordered = sorted(latencies)
    return ordered[max(1, math.ceil(fraction * len(ordered))) - 1]


def shared_records(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "http_resilience.shared"]


def keys_and_ttls(redis_server: RedisServer) -> dict[str, int]:
    """Every key in Redis and its TTL in ms (-1: none), read past the proxy."""
    client = redis_server.client()
    try:
        found: dict[str, int] = {}
        for key in client.scan_iter("*", count=100):  # pyright: ignore[reportUnknownMemberType, reportUnknownVariableType]
            name = key.decode() if isinstance(key, bytes) else str(key)  # pyright: ignore[reportUnknownArgumentType]
            found[name] = int(client.pttl(name))  # pyright: ignore[reportUnknownMemberType, reportUnknownArgumentType]
        return found
    finally:
        client.close()


def delete_all(redis_server: RedisServer) -> None:
    client = redis_server.client()
    try:
        client.flushall()  # pyright: ignore[reportUnknownMemberType]
    finally:
        client.close()


async def wait_for(condition: Callable[[], bool], limit: float) -> bool:
    """Poll `condition()` every `POLL` s for at most `limit` s (bounded in count)."""
    for _ in range(math.ceil(limit / POLL) + 1):
        if condition():
            return True
        await CLOCK.sleep(POLL)
    return condition()


async def test_redis_behind_latency_resets_and_a_blackhole_never_fails_a_call(
    redis_server: RedisServer,
    fault_server: FaultServer,
    fault_proxy: MakeProxy,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="httpx")
    caplog.set_level(logging.ERROR, logger="http_resilience")  # a line per retry
    caplog.set_level(logging.INFO, logger="http_resilience.shared")
    proxy: FaultProxy = fault_proxy(redis_server.url)
    options = HttpResilienceOptions.model_validate(OPTIONS)
    WatchedRedis.watched = threading.get_ident()  # the event loop's
    WatchedRedis.from_watched = 0
    redis_clients = [
        WatchedRedis.from_url(  # pyright: ignore[reportUnknownMemberType]
            proxy.url, socket_timeout=INTERVAL, socket_connect_timeout=INTERVAL
        )
        for _ in range(REPLICAS)
    ]
    states = [SharedState(client, sync_interval=INTERVAL) for client in redis_clients]
    replicas = [
        Replica(
            f"shared{index}",
            create_async_client(NAME, options, shared=state, base_url=fault_server.url),
            state,
        )
        for index, state in enumerate(states)
    ]
    # Without shared state: each its own client name, as separate processes.
    controls = [
        Replica(
            f"control{index}",
            create_async_client(
                f"{NAME}-control{index}", options, base_url=fault_server.url
            ),
            None,
        )
        for index in range(REPLICAS)
    ]
    everyone = [*replicas, *controls]
    phases: list[Phase] = []
    try:
        # One call each, alike: the shared replicas' make their keys.
        for replica in everyone:
            await replica.call(1)
        assert await wait_for(lambda: all(s.up for s in states), 1.0)
        for name, fault in PHASES:
            accepted = proxy.stats().accepted
            hits = [r.hits(fault_server) for r in everyone]
            switched_at = wall_time()  # before: lags are measured long, not short
            await asyncio.to_thread(proxy.set_fault, fault)
            loads = list(
                await asyncio.gather(
                    *(run_load(r.call, rate=RATE, duration=PHASE) for r in everyone)
                )
            )
            if name == "pass-through":
                resumed = await wait_for(
                    lambda: all(s.up for s in states),
                    max(RESUME_BOUND - (wall_time() - switched_at), 0.0),
                )
                assert resumed, "sharing did not resume after the fault cleared"
                # One more sync, so every replica has written since it resumed.
                await CLOCK.sleep(2 * INTERVAL)
                ttls = keys_and_ttls(redis_server)
                assert ttls, "no key in Redis: sharing did not resume"
                assert all(ttl > 0 for ttl in ttls.values()), ttls
            else:
                assert not any(s.up for s in states)
                if name in SILENT:
                    delete_all(redis_server)  # written again only once it resumes
            sent = [
                r.hits(fault_server) - h for r, h in zip(everyone, hits, strict=True)
            ]
            phases.append(
                Phase(
                    name,
                    switched_at,
                    loads,
                    proxy.stats().accepted - accepted,
                    retries=[
                        physical - load.completed
                        for physical, load in zip(sent, loads, strict=True)
                    ],
                )
            )
    finally:
        run_ended = wall_time()
        for replica in everyone:
            await replica.client.aclose()
        for state in states:
            await asyncio.to_thread(state.close)
        for client in redis_clients:
            client.close()

    # No call failed because of Redis; none was left hanging.
    for phase in phases:
        for load in phase.loads:
            assert set(load.failed) <= {BrokenCircuitError.__name__}, (
                phase.name,
                load.failed,
            )
            assert load.abandoned == 0, phase.name
            assert load.dropped == 0, phase.name

    # Each phase's figures: recorded, compared in benchmarks/shared_state.py.
    rows: list[Row] = []
    for phase in phases:
        mine = [t for load in phase.loads[:REPLICAS] for t in load.latencies]
        theirs = [t for load in phase.loads[REPLICAS:] for t in load.latencies]
        rows.append(
            Row(
                phase=phase.name,
                calls=len(mine) + len(theirs),
                shared_p99_ms=round(percentile(mine, 0.99) * 1000, 1),
                control_p99_ms=round(percentile(theirs, 0.99) * 1000, 1),
                shared_max_ms=round(max(mine) * 1000, 1),
                control_max_ms=round(max(theirs) * 1000, 1),
                shared_slow=sum(t > INTERVAL for t in mine),
                control_slow=sum(t > INTERVAL for t in theirs),
                shared_refused=sum(
                    load.failed[BrokenCircuitError.__name__]
                    for load in phase.loads[:REPLICAS]
                ),
                control_refused=sum(
                    load.failed[BrokenCircuitError.__name__]
                    for load in phase.loads[REPLICAS:]
                ),
                redis_connections=phase.attempts,
                shared_retries=sum(phase.retries[:REPLICAS]),
                control_retries=sum(phase.retries[REPLICAS:]),
            )
        )

    # One outage per fault, strays bounded, per replica (thread).
    records = shared_records(caplog)
    by_thread: dict[int | None, list[logging.LogRecord]] = {}
    for found in records:
        by_thread.setdefault(found.thread, []).append(found)
    assert len(by_thread) == REPLICAS, [r.getMessage() for r in records]
    faults = [(i, p) for i, p in enumerate(phases) if p.name != "pass-through"]
    fall_back_ms: list[list[float]] = []
    resume_ms: list[list[float]] = []
    strays: list[list[str]] = []
    for lines in by_thread.values():
        fell, came, extra = check_outages(outages(lines, run_ended), phases)
        fall_back_ms.append(fell)
        resume_ms.append(came)
        strays.append([o.cause for o in extra])

    ttls = keys_and_ttls(redis_server)
    record(
        "shared_redis_faults",
        replicas=REPLICAS,
        rate_per_replica=RATE,
        phase_seconds=PHASE,
        interval_ms=INTERVAL * 1000,
        latency_ms=LATENCY * 1000,
        commands_from_the_loop=WatchedRedis.from_watched,
        phases=[asdict(row) for row in rows],
        fall_back_ms={
            p.name: [f[i] for f in fall_back_ms] for i, (_, p) in enumerate(faults)
        },
        resume_ms={
            p.name: [c[i] for c in resume_ms] for i, (_, p) in enumerate(faults)
        },
        strays=strays,
        keys_after=len(ttls),
        answers={
            "shared": sum((r.answers for r in replicas), Counter[str]()),
            "control": sum((r.answers for r in controls), Counter[str]()),
        },
    )
    # No call waited on Redis: not one command went from the calls' thread.
    assert WatchedRedis.from_watched == 0
    for row in rows:
        if row.phase != "pass-through":
            assert row.redis_connections <= MOST_CONNECTIONS, row
    # Nothing is left behind without a TTL.
    assert ttls
    assert all(ttl > 0 for ttl in ttls.values()), ttls


TIMEOUT = "shared state unavailable (TimeoutError: Timeout reading from socket)"
REFUSED = "shared state unavailable (ConnectionError: Connection refused)"
# Made-up phases: pass-through from 0 s, latency from 2 s, pass-through from 4 s.
FAULT_AT_TWO = [
    ("pass-through", 0.0),
    ("latency", 2.0),
    ("pass-through", 4.0),
]
FAULT = Outage(2.1, 4.2, REFUSED)
NOT_OUTAGES_OF_ONE_FAULT: dict[str, list[Outage]] = {
    "no fall back": [],
    "a late fall back": [Outage(2.0 + FALL_BACK_BOUND + 0.1, 4.2, REFUSED)],
    "a resume during the fault": [Outage(2.1, 3.0, TIMEOUT), Outage(3.1, 4.2, TIMEOUT)],
    "a late resume": [Outage(2.1, 4.0 + RESUME_BOUND + 0.1, TIMEOUT)],
    "down before the fault, not by a timeout": [Outage(1.9, 4.2, REFUSED)],
    "a stray that is not a timeout": [Outage(0.5, 0.6, REFUSED), FAULT],
    "a long stray": [FAULT, Outage(4.5, 4.6 + RESUME_BOUND, TIMEOUT)],
    "too many strays": [
        *(Outage(0.1 * i, 0.1 * i + 0.05, TIMEOUT) for i in range(MOST_STRAYS + 1)),
        FAULT,
    ],
}


def made_up_phases() -> list[Phase]:
    return [Phase(name, at, [], 0, []) for name, at in FAULT_AT_TWO]


def line(level: int, created: float, message: str = TIMEOUT) -> logging.LogRecord:
    found = logging.LogRecord("http_resilience.shared", level, "", 0, message, (), None)
    found.created = created
    return found


def test_the_outage_rule_allows_stray_timeouts() -> None:
    """The rule above, on made-up outages: what it lets through."""
    phases = made_up_phases()
    stray = Outage(0.5, 0.6, TIMEOUT)
    fell, came, extra = check_outages([stray, FAULT], phases)
    assert (fell, came, extra) == ([100.0], [200.0], [stray])
    # A stray timeout still on when the fault begins covers it.
    assert check_outages([Outage(1.9, 4.2, TIMEOUT)], phases) == ([-100.0], [200.0], [])


@pytest.mark.parametrize("case", list(NOT_OUTAGES_OF_ONE_FAULT))
def test_the_outage_rule_fails_a_replica_that_misbehaves(case: str) -> None:
    with pytest.raises(AssertionError):
        check_outages(NOT_OUTAGES_OF_ONE_FAULT[case], made_up_phases())


def test_the_log_gives_one_warning_per_outage_then_its_info() -> None:
    lines = [line(logging.WARNING, 2.1), line(logging.INFO, 4.2, "available")]
    assert outages(lines, 9.0) == [Outage(2.1, 4.2, TIMEOUT)]
    # Not resumed when the run ended: the outage lasts until then.
    assert outages([*lines, line(logging.WARNING, 5.0)], 9.0)[1:] == [
        Outage(5.0, 9.0, TIMEOUT)
    ]
    # A WARNING per failed sync is not one per outage.
    with pytest.raises(AssertionError):
        outages([line(logging.WARNING, 2.0), *lines], 9.0)


def settles(condition: Callable[[], bool], limit: float) -> bool:
    """`wait_for`, on this thread: poll every `POLL` s for at most `limit` s."""
    for _ in range(math.ceil(limit / POLL) + 1):
        if condition():
            return True
        CLOCK.sleep_sync(POLL)
    return condition()


def fleet_budget(redis_server: RedisServer, name: str) -> tuple[int, int]:
    """The first attempts and the retries leased that Redis holds for `name`."""
    client = redis_server.client()
    try:
        fields = client.hvals(f"http_resilience:{{{name}}}:budget")  # pyright: ignore[reportUnknownMemberType, reportUnknownVariableType]
    finally:
        client.close()
    assert len(fields) == 1  # pyright: ignore[reportUnknownArgumentType]
    raw = fields[0]  # pyright: ignore[reportUnknownVariableType]
    assert isinstance(raw, bytes)
    counts = [int(float(part)) for part in raw.decode().split(",")]
    return sum(counts[2:12]), sum(counts[12:22])


def test_a_sync_answered_past_the_socket_timeout_counts_once(
    redis_server: RedisServer, fault_proxy: MakeProxy
) -> None:
    """Redis behind latency runs the script; its answer comes after the timeout.

    The sync fails, and is sent again once the latency is gone: the first
    attempts it carried are counted once, and the lease it granted reaches the
    replica (kept while it lasts, `LEASE_HOLD`: Redis holds it leased). The
    sync thread's first sync (at attach) may come at any point: the figures
    checked are those it cannot change.
    """
    import redis

    name = f"{NAME}-once"
    proxy = fault_proxy(redis_server.url)
    # Generous, so a sync through the proxy on a busy machine answers within
    # it; the latency twice as long, so that sync cannot.
    timeout = 1.0
    client = redis.Redis.from_url(proxy.url, socket_timeout=timeout)  # pyright: ignore[reportUnknownMemberType]
    # A long interval: the syncs are the test's (the thread only starts).
    state = SharedState(client, sync_interval=60.0)
    options = HttpResilienceOptions.model_validate(
        {"max_retry_attempts": 1, "retry_budget_ratio": 0.5}
        | {"retry_budget_min_per_second": 0}
    )
    transport = ResilientTransport(
        httpx.MockTransport(lambda request: httpx.Response(200)),
        options=options,
        name=name,
        shared=state,
    )
    try:
        with httpx.Client(transport=transport, base_url="http://inventory") as http:
            for _ in range(10):
                assert http.get("/").status_code == 200
            assert state.sync_now()
            assert fleet_budget(redis_server, name)[0] == 10
            for _ in range(10):
                assert http.get("/").status_code == 200
            proxy.set_fault(Latency(2 * timeout))
            assert not state.sync_now()  # runs in Redis; answered too late
            # On a busy machine the proxy may forward it past the timeout.
            assert settles(lambda: fleet_budget(redis_server, name)[0] == 20, 5.0)
            proxy.set_fault(PassThrough())
            assert state.sync_now()  # the same batch again: counted once
            assert fleet_budget(redis_server, name)[0] == 20
            assert state.sync_now()  # nothing new: the lease is kept, not doubled
            assert fleet_budget(redis_server, name) == (20, 1)
    finally:
        state.close()
        client.close()
