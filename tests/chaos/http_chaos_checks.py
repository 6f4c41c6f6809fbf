"""A chaos scenario's frame, the checks every scenario runs, and its figures.

`plan` is the seeded fault plan each scenario hands to its `chaos` fixture
(a `StartChaos`), with the server's planted secret in it. `watched` opens a
scenario's client side (a `Harness`), with the test process's own heap
frozen (`heap_frozen`), and when it ends holds it to invariants 8 and 9:
tasks, fds and sockets back to their baseline, and no planted secret in the
logs, events or exceptions it let out. httpx's own ``HTTP Request:`` lines,
which carry the whole URL, are dropped from the watch (only those).
`assert_attempts_bounded` (invariant 1), `assert_deadlines_kept` (invariant
2) and `assert_expected_outcomes` read the calls' records beside the server's
hits; `margins`, `latencies` and the rest turn them into the figures
`record` keeps.
"""

from __future__ import annotations

import contextlib
import gc
import math
from collections import Counter
from collections.abc import AsyncGenerator, Generator, Iterable
from typing import Protocol

import httpx

from http_resilience import (
    AttemptStalledError,
    AttemptTimeoutError,
    RateLimitedError,
    TotalTimeoutError,
)
from tests.chaos.http_chaos_harness import (
    ATTEMPT_TIMEOUT,
    MAX_ATTEMPTS,
    TOTAL_TIMEOUT,
    Call,
    Harness,
    Secrets,
    ms,
)
from tests.chaos.invariants import (
    assert_back_to_baseline,
    leftovers,
    watch_secrets,
    without_httpx_request_lines,
)
from tests.support.chaos_server import ChaosPlan, ChaosServer, Hit
from tests.support.fault_proxy import FaultProxy
from tests.support.load import LoadResult

# Invariant 2's tolerance on how long a call takes, and on how long a
# cancelled call takes to end.
OVERRUN = 0.1  # seconds
# A herd's calls start together and so reach their deadline together: the
# loop cuts them one after the other, each cut unwinding its call's pipeline.
# On a busy 2-core machine the last of 150 is cut up to ~0.12 s after its
# deadline with no single stall over 0.07 s: a queue, not a lost deadline.
HERD_QUEUE = 0.15  # seconds
# Between the pipeline deciding to send an attempt (with time left) and the
# attempt entering the transport under it there is no await, only a few calls:
# interpreter time and, at worst, two GIL switch intervals of the server's and
# the proxy's threads.
START_SLACK = 0.01  # seconds
# The server holds a `latency` answer four attempt timeouts: the client leaves.
LATENCY = 4 * ATTEMPT_TIMEOUT
# Slow closes from well within an attempt's time to twice it.
SLOW_CLOSE = (0.05, 2 * ATTEMPT_TIMEOUT)

# A slow close whose body is framed by the close, held past an attempt's time,
# stalls the body after the call returned: `AttemptStalledError`. A herd
# larger than the client's pool waits for connections: a wait the deadline
# cuts is the client's own refusal (`RateLimitedError`, concurrency_limit),
# never a timeout held against the host.
EXPECTED_FAILURES = (
    httpx.TransportError,
    AttemptTimeoutError,
    TotalTimeoutError,
    AttemptStalledError,
    RateLimitedError,
)


# --- a scenario's frame -------------------------------------------------------------


class StartChaos(Protocol):
    def __call__(self, plan: ChaosPlan) -> tuple[ChaosServer, FaultProxy]: ...


def plan(seed: int, secrets: Secrets) -> ChaosPlan:
    return ChaosPlan(
        seed=seed, latency=LATENCY, slow_close=SLOW_CLOSE, secret=secrets.server
    )


@contextlib.contextmanager
def heap_frozen() -> Generator[None]:
    """Keep the test process's own heap out of the collector meanwhile.

    pytest and everything imported are ~100k objects here: a full collection
    of them stops every thread, the server's and the proxy's too, for 60-80 ms,
    a pause of the test process that would land on whichever deadline is near.
    Frozen, they are skipped; what the scenario makes is collected as usual.
    """
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


@contextlib.asynccontextmanager
async def watched(server: ChaosServer, secrets: Secrets) -> AsyncGenerator[Harness]:
    """A scenario's client side, held to invariants 8 and 9 when it ends."""
    with without_httpx_request_lines(), watch_secrets() as watch, heap_frozen():
        baseline = leftovers()
        harness = Harness(watch, secrets)
        harness.lag.start()
        try:
            yield harness
        finally:
            harness.lag.stop()
        # 8: the client is closed; its connections, the proxy's and the
        # server's sockets, and every task are gone.
        await assert_back_to_baseline(baseline)
        await server.wait_idle()
    # 9: nothing the scenario let out holds a secret.
    for error in harness.exceptions():
        watch.exception(error)
    watch.assert_absent(*secrets.all())


# --- the checks every scenario runs --------------------------------------------------


def assert_attempts_bounded(harness: Harness, hits: dict[int, list[Hit]]) -> None:
    """Invariant 1: at most MAX_ATTEMPTS per call, at the server and the client."""
    assert set(hits) <= set(harness.calls), "the server saw calls nobody made"
    for index, call in harness.calls.items():
        seen = hits.get(index, [])
        assert len(seen) <= MAX_ATTEMPTS, (call, seen)
        assert len(call.attempts) <= MAX_ATTEMPTS, call
        # Each request the server saw is one the client sent.
        assert len(seen) <= len(call.attempts), (call, seen)


def assert_deadlines_kept(harness: Harness, hits: dict[int, list[Hit]]) -> None:
    """Invariant 2: each call ends in time; no attempt starts after its deadline.

    The pipeline's part (up to the response's head, or its failure) ends
    within the total timeout. The body is read afterwards by httpx, outside
    the pipeline, each read bounded by the time its attempt had left when it
    began: so the whole call ends at most one attempt timeout later.
    """
    for call in harness.calls.values():
        if call.cancelled_at is not None:
            continue  # held to its cancellation instead, a stricter bound
        stall = harness.lag.near(call.deadline)
        late = OVERRUN + HERD_QUEUE
        assert call.pipeline_duration <= TOTAL_TIMEOUT + late, (call, stall)
        assert call.duration <= TOTAL_TIMEOUT + ATTEMPT_TIMEOUT + late, (
            call,
            stall,
        )
        assert call.pipeline_started is not None, call
        assert call.started <= call.pipeline_started, call
        for started in call.attempts:
            assert started <= call.deadline + START_SLACK, call
        assert_written_before(call, call.deadline + OVERRUN, hits)


def assert_written_before(call: Call, limit: float, hits: dict[int, list[Hit]]) -> None:
    """Nothing of `call` went on the wire after `limit`, and the server saw no more.

    Held on this side, where a request is written: one written in time still
    crosses the proxy's and the server's loops, threads of this busy process,
    and may reach the server well after it.
    """
    for began in call.writes:
        assert began <= limit, call
    assert len(hits.get(call.index, [])) <= len(call.writes), call


def assert_expected_outcomes(harness: Harness) -> None:
    """Each call got an answer or a failure of the mix, never anything else."""
    for call in harness.calls.values():
        if call.error is None:
            assert call.outcome in ("200", "429", "503", "CancelledError"), call
        else:
            assert isinstance(call.error, EXPECTED_FAILURES), repr(call.error)
            if isinstance(call.error, RateLimitedError):
                # Only the pool wait refuses here: no limiter, no quota.
                assert call.error.reason == "concurrency_limit", repr(call.error)


# --- the figures ---------------------------------------------------------------------


def margins(harness: Harness, hits: dict[int, list[Hit]]) -> dict[str, object]:
    """Invariant 2's worst margins (ms; negative: to spare), for the figures."""
    calls = [call for call in harness.calls.values() if call.cancelled_at is None]
    starts = [start - call.deadline for call in calls for start in call.attempts]
    arrivals = [
        hit.received - call.deadline
        for call in calls
        for hit in hits.get(call.index, [])
    ]
    return {
        "max_overrun_past_total_ms": ms(
            max(c.pipeline_duration - TOTAL_TIMEOUT for c in calls)
        ),
        "max_overrun_past_total_with_body_ms": ms(
            max(c.duration - TOTAL_TIMEOUT for c in calls)
        ),
        "latest_attempt_start_vs_deadline_ms": ms(max(starts)),
        "latest_server_arrival_vs_deadline_ms": ms(max(arrivals, default=-math.inf)),
        "worst_loop_stall_ms": ms(harness.lag.worst()),
    }


def latencies(calls: Iterable[Call], prefix: str = "") -> dict[str, object]:
    """Nearest-rank percentiles of the calls' whole durations, in ms."""
    ended = sorted(call.duration for call in calls if call.cancelled_at is None)

    def rank(fraction: float) -> float:
        return ms(ended[max(1, math.ceil(fraction * len(ended))) - 1])

    return {
        f"{prefix}p50_ms": rank(0.5),
        f"{prefix}p95_ms": rank(0.95),
        f"{prefix}p99_ms": rank(0.99),
    }


def load_figures(result: LoadResult) -> dict[str, object]:
    return {
        "arrivals": result.arrivals,
        "dropped": result.dropped,
        "abandoned": result.abandoned,
        "max_arrival_lateness_ms": ms(result.max_lateness),
    }


def attempts_histogram(
    calls: Iterable[Call], hits: dict[int, list[Hit]]
) -> dict[int, int]:
    """How many calls the server saw once, twice, ..."""
    counts = Counter(len(hits.get(call.index, [])) for call in calls)
    return dict(sorted(counts.items()))


def fates(hits: dict[int, list[Hit]]) -> dict[str, int]:
    return dict(Counter(hit.fate for seen in hits.values() for hit in seen))
