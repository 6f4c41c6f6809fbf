"""A chaos server: every physical request's fate drawn from a seeded plan.

An ASGI app under uvicorn on 127.0.0.1, in a thread of the test process (as
`serve_faults` runs the fault server), with one route: ``/chaos?call=N``. The
client names the logical call a request belongs to; the server counts each
physical request of the call as it arrives, with the time it arrived, and
draws its fate from the plan: from the plan's seed, the call and the request's
number within the call (``random.Random(f"{seed}/{call}/{hit}")``), so the
same run meets the same faults whatever order the requests arrive in.

| fate | the answer |
| --- | --- |
| `ok` | 200, a small JSON body |
| `503-retry-after` | 503, a valid ``Retry-After`` (`VALID_RETRY_AFTER`) |
| `503-bad-retry-after` | 503, an invalid ``Retry-After`` (`INVALID_RETRY_AFTER`) |
| `429` | 429, no ``Retry-After`` |
| `latency` | 200 after `ChaosPlan.latency` seconds, unless the client leaves first |
| `reset` | a TCP reset (by the proxy) |
| `blackhole` | nothing, ever (the proxy swallows the answer) |
| `cut` | half an answer, then a close (by the proxy) |
| `slow-close` | an answer up to a close that comes late (`ChaosPlan.slow_close`) |

The last four are TCP faults: the server answers and marks its answer with an
``x-chaos`` header, which a `fault_proxy.Mix` in front of it turns into the
fault. So every physical attempt reaches the server and is counted here, the
ones the client never gets an answer to included. Error bodies (503, 429,
cut) carry `ChaosPlan.secret`, a planted secret no client log may repeat.

``fate=NAME`` in the query forces a fate, for tests of the server itself.
`ChaosServer.outage` takes the server down for a stretch of real time: every
request that arrives meanwhile meets one fate (a 503), whatever the plan and
the query say, and the `Outage` it yields records when it began and ended.
The server sends its own ``Date`` on every answer. Times are read on the
process's monotonic clock (`SystemClock`), the one the client reads too.
"""

from __future__ import annotations

import json
import math
import random
import threading
from collections import Counter
from collections.abc import Callable, Generator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from email.utils import formatdate
from time import time as wall_time
from types import MappingProxyType
from typing import Final, Literal, get_args
from urllib.parse import parse_qs

import anyio.to_thread

from http_resilience import SystemClock
from tests.support.fault_server import (
    Message,
    Receive,
    Send,
    read_body,
    run_lifespan,
    serve_app,
    stayed,
)

__all__ = [
    "FATES",
    "INVALID_RETRY_AFTER",
    "STANDARD_MIX",
    "VALID_RETRY_AFTER",
    "ChaosPlan",
    "ChaosServer",
    "Decision",
    "Fate",
    "Hit",
    "Outage",
    "serve_chaos",
]

Fate = Literal[
    "ok",
    "503-retry-after",
    "503-bad-retry-after",
    "429",
    "latency",
    "reset",
    "blackhole",
    "cut",
    "slow-close",
]
FATES: Final[tuple[Fate, ...]] = get_args(Fate)

STANDARD_MIX: Final[Mapping[Fate, float]] = MappingProxyType(
    {
        "ok": 60,
        "503-retry-after": 6,
        "503-bad-retry-after": 6,
        "429": 8,
        "reset": 5,
        "latency": 5,
        "blackhole": 4,
        "cut": 3,
        "slow-close": 3,
    }
)
"""The issue's mix, in percent."""

# "date": an HTTP date one second after the answer's own Date header.
VALID_RETRY_AFTER: Final = ("0", "1", "date")
INVALID_RETRY_AFTER: Final = ("soon", "-5", "1e309", "1.5", "+1")

MARK = b"x-chaos"
# The body of a `cut` answer is padded to this size: half of it goes through.
CUT_BODY = 2048

_CLOCK = SystemClock()


@dataclass(frozen=True)
class Decision:
    """One request's fate; the ``Retry-After`` of a 503, the delay of a slow close."""

    fate: Fate
    retry_after: str | None = None
    close_delay: float | None = None


@dataclass(frozen=True)
class ChaosPlan:
    """Which fate each physical request meets.

    Attributes:
        seed: Seeds every draw.
        mix: Weight of each fate (fates left out never happen).
        latency: Seconds the `latency` fate holds its answer.
        slow_close: The range, in seconds, the `slow-close` fate draws the
            delay of its close from (uniformly).
        secret: Planted in every error body.

    Raises:
        ValueError: An unknown fate, a negative or non-finite weight or
            duration, or weights that add up to nothing.
    """

    seed: int
    mix: Mapping[Fate, float] = field(default_factory=lambda: STANDARD_MIX)
    latency: float = 1.0
    slow_close: tuple[float, float] = (0.05, 0.2)
    secret: str = ""

    def __post_init__(self) -> None:
        unknown = set(self.mix) - set(FATES)
        if unknown:
            raise ValueError(f"ChaosPlan.mix: unknown fates {sorted(unknown)}")
        weights = list(self.mix.values())
        if not all(0 <= weight < math.inf for weight in weights) or not sum(weights):
            raise ValueError("ChaosPlan.mix: weights must be finite, >= 0, not all 0")
        low, high = self.slow_close
        if not 0 <= self.latency < math.inf:
            raise ValueError("ChaosPlan.latency must be finite and >= 0")
        if not 0 <= low <= high < math.inf:
            raise ValueError("ChaosPlan.slow_close must be a range within [0, inf)")

    def decide(self, call: int, hit: int, *, fate: Fate | None = None) -> Decision:
        """The fate of request `hit` (from 1) of logical call `call`.

        `fate` forces the fate; the rest (a ``Retry-After`` value) is drawn.
        """
        draw = random.Random(f"{self.seed}/{call}/{hit}")
        if fate is None:
            fates = list(self.mix)
            (fate,) = draw.choices(fates, weights=[self.mix[name] for name in fates])
        if fate == "503-retry-after":
            return Decision(fate, draw.choice(VALID_RETRY_AFTER))
        if fate == "503-bad-retry-after":
            return Decision(fate, draw.choice(INVALID_RETRY_AFTER))
        if fate == "slow-close":
            return Decision(fate, close_delay=draw.uniform(*self.slow_close))
        return Decision(fate)


@dataclass(frozen=True)
class Hit:
    """One physical request, as the server received it.

    Attributes:
        call: The logical call it belongs to.
        number: 1 for the call's first request the server saw.
        fate: What the plan made of it.
        method: The HTTP method.
        keyed: Whether it carried an ``Idempotency-Key``.
        received: When its head arrived, on the process's monotonic clock.
    """

    call: int
    number: int
    fate: Fate
    method: str
    keyed: bool
    received: float


@dataclass
class Outage:
    """A stretch in which the server met every request with one fate.

    Attributes:
        fate: The fate every request met.
        began: When it began, on the process's monotonic clock.
        ended: When it ended; None while it lasts.
    """

    fate: Fate
    began: float
    ended: float | None = None


@dataclass
class _Log:
    """Every hit, written on the server's thread and read on the tests'."""

    changed: threading.Condition = field(default_factory=threading.Condition)
    hits: dict[int, list[Hit]] = field(default_factory=dict[int, list[Hit]])
    in_flight: int = 0
    aborted: Counter[Fate] = field(default_factory=Counter[Fate])

    def enter(
        self, call: int, method: str, keyed: bool, decide: Callable[[int], Decision]
    ) -> tuple[Hit, Decision]:
        received = _CLOCK.monotonic()
        with self.changed:
            hits = self.hits.setdefault(call, [])
            decision = decide(len(hits) + 1)
            hit = Hit(call, len(hits) + 1, decision.fate, method, keyed, received)
            hits.append(hit)
            self.in_flight += 1
            return hit, decision

    def leave(self, fate: Fate, *, aborted: bool) -> None:
        with self.changed:
            self.in_flight -= 1
            if aborted:
                self.aborted[fate] += 1
            self.changed.notify_all()

    def wait_idle(self, timeout: float) -> None:
        with self.changed:
            if not self.changed.wait_for(lambda: not self.in_flight, timeout):
                raise TimeoutError(
                    f"chaos server: {self.in_flight} request(s) still in flight "
                    f"after {timeout} s"
                )


def _error_body(plan: ChaosPlan, status: int) -> bytes:
    document = {"error": f"chaos {status}", "detail": plan.secret}
    return json.dumps(document).encode()


def _date(now: float) -> tuple[bytes, bytes]:
    return (b"date", formatdate(math.floor(now), usegmt=True).encode())


def _retry_after(value: str, now: float) -> bytes:
    if value == "date":
        return formatdate(math.floor(now) + 1, usegmt=True).encode()
    return value.encode()


@dataclass
class ChaosApp:
    """The ASGI app: decides, answers and logs every request to ``/chaos``."""

    plan: ChaosPlan
    log: _Log = field(default_factory=_Log)
    started: threading.Event = field(default_factory=threading.Event)
    # Read and written under the log's lock: a request is in the outage or not.
    down: Fate | None = None

    async def __call__(self, scope: Message, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await run_lifespan(receive, send, self.started)
            return
        query = parse_qs(scope["query_string"].decode("latin-1"))
        calls, forced = query.get("call", []), query.get("fate", [])
        if (
            scope["path"] != "/chaos"
            or len(calls) != 1
            or not calls[0].isdigit()
            or (forced and forced[0] not in FATES)
        ):
            await _answer(send, 404, b"chaos server: no such route", [])
            return
        headers: list[tuple[bytes, bytes]] = scope["headers"]
        keyed = any(name == b"idempotency-key" for name, _ in headers)
        call = int(calls[0])
        fate: Fate | None = None
        for name in FATES:
            if forced and name == forced[0]:
                fate = name

        def decide(hit: int) -> Decision:
            # Called under the log's lock, as the outage switches.
            return self.plan.decide(call, hit, fate=self.down or fate)

        hit, decision = self.log.enter(call, scope["method"], keyed, decide)
        answered = False
        try:
            if not await read_body(receive):
                return
            answered = await self._respond(hit, decision, receive, send)
        finally:
            self.log.leave(hit.fate, aborted=not answered)

    async def _respond(
        self, hit: Hit, decision: Decision, receive: Receive, send: Send
    ) -> bool:
        """Answer as `decision` says; False if the client left first."""
        plan, fate = self.plan, decision.fate
        now = wall_time()
        headers = [_date(now)]
        ok = json.dumps({"call": hit.call, "hit": hit.number}).encode()
        if fate == "ok":
            await _answer(send, 200, ok, headers)
        elif decision.retry_after is not None:
            headers.append((b"retry-after", _retry_after(decision.retry_after, now)))
            await _answer(send, 503, _error_body(plan, 503), headers)
        elif fate == "429":
            await _answer(send, 429, _error_body(plan, 429), headers)
        elif fate == "latency":
            if not await stayed(receive, plan.latency):
                return False
            await _answer(send, 200, ok, [_date(wall_time())])
        elif fate == "cut":
            body = _error_body(plan, 200)
            body += b" " * max(0, CUT_BODY - len(body))
            await _answer(send, 200, body, [*headers, (MARK, b"cut")])
        elif decision.close_delay is not None:
            mark = f"slow-close {decision.close_delay:.3f}".encode()
            await _answer(send, 200, ok, [*headers, (MARK, mark)])
        else:  # reset, blackhole: the answer never reaches the client
            await _answer(send, 200, ok, [*headers, (MARK, fate.encode())])
        return True


async def _answer(
    send: Send, status: int, body: bytes, headers: list[tuple[bytes, bytes]]
) -> None:
    headers = [
        *headers,
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
    ]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


@dataclass(frozen=True)
class ChaosServer:
    """A running chaos server.

    Attributes:
        url: The base URL, ``http://127.0.0.1:PORT``.
        plan: The plan it answers by.
    """

    url: str
    plan: ChaosPlan
    app: ChaosApp

    def hits(self) -> dict[int, list[Hit]]:
        """Every call's hits so far, in the order they arrived."""
        with self.app.log.changed:
            return {call: list(hits) for call, hits in self.app.log.hits.items()}

    def aborted(self) -> Counter[Fate]:
        """Requests whose client left before their answer, by fate."""
        with self.app.log.changed:
            return Counter(self.app.log.aborted)

    @contextmanager
    def outage(self, fate: Fate = "503-retry-after") -> Generator[Outage, None, None]:
        """Meet every request that arrives inside the block with `fate`.

        The plan and a forced ``fate=`` aside: the server is down. Requests
        already begun keep the fate they drew.
        """
        log = self.app.log
        with log.changed:
            self.app.down = fate
            down = Outage(fate, _CLOCK.monotonic())
        try:
            yield down
        finally:
            with log.changed:
                self.app.down = None
                down.ended = _CLOCK.monotonic()

    async def wait_idle(self, *, limit: float = 5.0) -> None:
        """Wait until the server has finished every request it has begun.

        Waits in a worker thread, so the test's loop keeps closing its side.

        Raises:
            TimeoutError: some are still in flight after `limit` seconds.
        """
        await anyio.to_thread.run_sync(self.app.log.wait_idle, limit)


@contextmanager
def serve_chaos(plan: ChaosPlan) -> Generator[ChaosServer, None, None]:
    """Run a chaos server answering by `plan`; stop it on exit.

    Raises:
        RuntimeError: uvicorn did not start, or its thread outlived the stop.
    """
    app = ChaosApp(plan)
    with serve_app(app, app.started, date_header=False, name="chaos server") as url:
        yield ChaosServer(url=url, plan=plan, app=app)
