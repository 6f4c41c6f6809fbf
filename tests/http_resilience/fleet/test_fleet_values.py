"""No value in Redis refuses a host for longer than the client's own configuration.

Hostile values are planted with redis-py in the keys of a real redis-server;
replicas are transports given a `SharedState` each (a fake wall clock each, so
one can run a day ahead), synced with `sync_now`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import httpx
import pytest

from http_resilience import (
    BrokenCircuitError,
    CircuitControl,
    HttpResilienceOptions,
    RateLimitedError,
    ResilientTransport,
    SharedState,
    health,
)
from http_resilience._fleet.redis_client import client_keys
from http_resilience.asgi import readiness
from http_resilience.testing import FakeClock
from tests.support.redis_server import RedisServer

URL = "http://inventory.local/items"
HOST = "http://inventory.local:80"
BUDGET_KEY, BREAKERS_KEY, QUOTA_KEY, _ = client_keys("http_resilience", "inventory")
BREAK = 30.0
START = 1_000_000.0
NOW_MS = int(START * 1000)
DAY = 86_400.0

HOSTILE = [
    "99999999999999",  # decimal, 14 digits: the year 5138
    "nan",
    "inf",
    "1e300",
    str(2**63),
    "0x7fffffffffff",
    "-5",
    "garbage",
]


class Wall:
    """A fake Unix clock; `ahead` seconds in front of the shared `now`."""

    def __init__(self, ahead: float = 0.0) -> None:
        self.now = START
        self.ahead = ahead

    def __call__(self) -> float:
        return self.now + self.ahead


class Upstream:
    """Answers `answer(request)`; counts what reaches it."""

    def __init__(self, answer: Callable[[httpx.Request], httpx.Response]) -> None:
        self.answer = answer
        self.hits = 0

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.hits += 1
        return self.answer(request)


def always(status: int) -> Upstream:
    return Upstream(lambda request: httpx.Response(status))


def options(**changes: object) -> HttpResilienceOptions:
    return HttpResilienceOptions.model_validate(
        {
            "max_retry_attempts": 0,
            "base_delay": 0.01,
            "minimum_throughput": 2,
            "failure_ratio": 0.5,
            "break_duration": BREAK,
            "quota_reserve": None,
            **changes,
        }
    )


class Fleet:
    """Replicas of one service, each its own `SharedState`, on one Redis."""

    def __init__(self, redis_server: RedisServer) -> None:
        self.url = redis_server.url
        self.states: list[SharedState] = []
        self.clients: list[httpx.Client] = []
        self.transports: dict[int, ResilientTransport] = {}

    def replica(
        self,
        upstream: Upstream,
        opts: HttpResilienceOptions,
        *,
        wall: Wall,
        clock: FakeClock | None = None,
    ) -> tuple[httpx.Client, SharedState]:
        state = SharedState(
            self.url, sync_interval=60.0, wall_clock=wall, background=False
        )
        transport = ResilientTransport(
            httpx.MockTransport(upstream),
            options=opts,
            name="inventory",
            clock=clock or FakeClock(),
            shared=state,
        )
        client = httpx.Client(transport=transport)
        self.states.append(state)
        self.clients.append(client)
        self.transports[id(client)] = transport
        return client, state

    def transport(self, client: httpx.Client) -> ResilientTransport:
        """What `CircuitControl`, `health` and `readiness` are given."""
        return self.transports[id(client)]

    def close(self) -> None:
        for client in self.clients:
            client.close()
        for state in self.states:
            state.close()


@pytest.fixture
def fleet(redis_server: RedisServer) -> Iterator[Fleet]:
    made = Fleet(redis_server)
    yield made
    made.close()


def field(redis_server: RedisServer, key: str, host: str = HOST) -> str | None:
    client = redis_server.client()
    try:
        raw = client.hget(key, host)  # pyright: ignore[reportUnknownMemberType]
    finally:
        client.close()
    return raw.decode() if isinstance(raw, bytes) else None


def plant(redis_server: RedisServer, key: str, value: str, host: str = HOST) -> None:
    client = redis_server.client()
    try:
        client.hset(key, host, value)  # pyright: ignore[reportUnknownMemberType]
    finally:
        client.close()


def open_breaker(client: httpx.Client) -> None:
    """Two failures open the local breaker (minimum throughput 2, ratio 0.5)."""
    client.get(URL)
    client.get(URL)
    with pytest.raises(BrokenCircuitError):
        client.get(URL)


# -- breakers ---------------------------------------------------------------


@pytest.mark.parametrize("until", HOSTILE)
def test_a_hostile_break_refuses_a_host_for_one_break_at_most(
    redis_server: RedisServer, fleet: Fleet, until: str
) -> None:
    wall = Wall()
    upstream = always(200)
    client, state = fleet.replica(upstream, options(), wall=wall)
    plant(redis_server, BREAKERS_KEY, f"{until},0,0")
    assert state.sync_now()
    stored = field(redis_server, BREAKERS_KEY)
    if stored is not None:
        # Kept only as a decimal time, rewritten within one break from now.
        assert stored == f"{NOW_MS + int(BREAK * 1000)},0,0"
        with pytest.raises(BrokenCircuitError) as refused:
            client.get(URL)
        assert refused.value.retry_after is not None
        assert refused.value.retry_after <= BREAK
        wall.now += BREAK
        assert state.sync_now()  # the break is over: this replica claims the probe
    assert client.get(URL).status_code == 200  # the probe, or no break at all
    assert upstream.hits == 1
    assert state.sync_now()
    assert field(redis_server, BREAKERS_KEY) is None


@pytest.mark.parametrize("claim", HOSTILE)
def test_a_hostile_probe_claim_lapses_within_one_break(
    redis_server: RedisServer, fleet: Fleet, claim: str
) -> None:
    wall = Wall()
    upstream = always(200)
    client, state = fleet.replica(upstream, options(), wall=wall)
    plant(redis_server, BREAKERS_KEY, f"{NOW_MS - 1000},{claim},77")
    assert state.sync_now()
    stored = field(redis_server, BREAKERS_KEY)
    if stored is not None:
        # Kept only as a decimal time, bounded within one break from now.
        claim_until = NOW_MS + int(BREAK * 1000)
        assert stored == f"{NOW_MS - 1000},{claim_until},77"
        with pytest.raises(BrokenCircuitError):
            client.get(URL)  # the claim is another's: refused
        wall.now += BREAK
        assert state.sync_now()
    assert client.get(URL).status_code == 200
    assert upstream.hits == 1


def test_a_replica_a_day_ahead_opens_a_host_for_one_break_only(
    redis_server: RedisServer, fleet: Fleet
) -> None:
    on_time, ahead = Wall(), Wall(ahead=DAY)
    failing, healthy = always(503), always(200)
    skewed, skewed_state = fleet.replica(failing, options(), wall=ahead)
    open_breaker(skewed)
    assert skewed_state.sync_now()  # publishes a break ending a day from now
    # Its clock says every break of the others is long over: a sync of it after
    # another replica has bounded the break would forget it. So it is stopped
    # before the other exists: that one's thread syncs at once when attached
    # (whatever the interval), and may read the break before this line.
    skewed_state.close()
    client, state = fleet.replica(healthy, options(), wall=on_time)
    assert state.sync_now()  # bounded on receipt, and rewritten
    stored = field(redis_server, BREAKERS_KEY)
    assert stored is not None
    assert int(stored.split(",")[0]) <= NOW_MS + int(BREAK * 1000)
    with pytest.raises(BrokenCircuitError, match="across the replicas") as refused:
        client.get(URL)
    assert refused.value.retry_after is not None
    assert refused.value.retry_after <= BREAK
    on_time.now += BREAK
    assert state.sync_now()
    assert client.get(URL).status_code == 200
    assert healthy.hits == 1


def test_the_probe_is_claimed_at_the_sync_when_the_break_ends(
    redis_server: RedisServer, fleet: Fleet
) -> None:
    wall = Wall()
    failing, healthy = always(503), always(200)
    first, first_state = fleet.replica(failing, options(), wall=wall)
    second, second_state = fleet.replica(healthy, options(), wall=wall)
    open_breaker(first)
    assert first_state.sync_now()
    assert second_state.sync_now()
    with pytest.raises(BrokenCircuitError, match="across the replicas"):
        second.get(URL)
    wall.now += BREAK
    assert second_state.sync_now()  # the break is over: the claim is taken now
    # The first call after the break is the probe, as with a local breaker.
    assert second.get(URL).status_code == 200
    assert healthy.hits == 1
    assert second_state.sync_now()
    assert field(redis_server, BREAKERS_KEY) is None


def test_twenty_thousand_foreign_fields_are_trimmed_within_one_sync(
    redis_server: RedisServer, fleet: Fleet
) -> None:
    client = redis_server.client()
    try:
        for key in (BREAKERS_KEY, BUDGET_KEY):
            pipe = client.pipeline(transaction=False)  # pyright: ignore[reportUnknownMemberType]
            for start in range(0, 20_000, 1000):
                pipe.hset(  # pyright: ignore[reportUnknownMemberType]
                    key,
                    mapping={f"foreign-{n}": "x" for n in range(start, start + 1000)},
                )
            pipe.execute()  # pyright: ignore[reportUnknownMemberType]
    finally:
        client.close()
    wall = Wall()
    # Synced by hand, with a socket timeout (the interval) a busy machine
    # keeps: what is held is the count, not how long the sync took.
    state = SharedState(
        redis_server.url, sync_interval=5.0, wall_clock=wall, background=False
    )
    transport = ResilientTransport(
        httpx.MockTransport(always(503)),
        options=options(),
        name="inventory",
        clock=FakeClock(),
        shared=state,
    )
    with httpx.Client(transport=transport) as replica, state:
        open_breaker(replica)
        assert state.sync_now()  # the one sync that trims
        assert max(fields_held(redis_server)) <= 1024
        assert state.sync_now()  # and the next finds them trimmed
        assert state.up
    assert max(fields_held(redis_server)) <= 1024


def fields_held(redis_server: RedisServer) -> tuple[int, int]:
    """How many fields the breakers' and the budgets' hashes hold."""
    client = redis_server.client()
    try:
        breakers = client.hlen(BREAKERS_KEY)  # pyright: ignore[reportUnknownMemberType]
        budgets = client.hlen(BUDGET_KEY)  # pyright: ignore[reportUnknownMemberType]
    finally:
        client.close()
    assert isinstance(breakers, int)
    assert isinstance(budgets, int)
    return breakers, budgets


# -- operators --------------------------------------------------------------


def test_reset_lifts_a_break_that_redis_holds_for_years(
    redis_server: RedisServer, fleet: Fleet
) -> None:
    wall = Wall()
    upstream = always(200)
    client, state = fleet.replica(upstream, options(), wall=wall)
    other, other_state = fleet.replica(upstream, options(), wall=wall)
    plant(redis_server, BREAKERS_KEY, "99999999999999,0,0")
    assert state.sync_now()
    assert other_state.sync_now()
    with pytest.raises(BrokenCircuitError, match="across the replicas"):
        client.get(URL)
    CircuitControl(fleet.transport(client)).reset(HOST)
    assert client.get(URL).status_code == 200  # lifted here at once
    assert state.sync_now()  # and in Redis
    assert field(redis_server, BREAKERS_KEY) is None
    assert other_state.sync_now()
    assert other.get(URL).status_code == 200  # and for every replica


def test_isolate_acts_across_the_replicas_until_reset(
    redis_server: RedisServer, fleet: Fleet
) -> None:
    wall = Wall()
    upstream = always(200)
    operator, operator_state = fleet.replica(upstream, options(), wall=wall)
    client, state = fleet.replica(upstream, options(), wall=wall)
    control = CircuitControl(fleet.transport(operator))
    control.isolate(HOST)
    with pytest.raises(BrokenCircuitError, match="circuit isolated"):
        operator.get(URL)
    for _ in range(3):  # renewed at every sync, so it outlasts a break
        assert operator_state.sync_now()
        assert state.sync_now()
        with pytest.raises(BrokenCircuitError, match="across the replicas"):
            client.get(URL)
        wall.now += BREAK / 2
    (host,) = health(fleet.transport(client)).hosts
    assert host.host == HOST
    assert host.state == "open"
    assert host.fleet
    assert host.refusing
    control.reset(HOST)
    assert operator_state.sync_now()
    assert state.sync_now()
    assert client.get(URL).status_code == 200
    assert operator.get(URL).status_code == 200
    assert upstream.hits == 2


@pytest.mark.anyio
async def test_readiness_reports_a_host_refused_across_the_replicas(
    redis_server: RedisServer, fleet: Fleet
) -> None:
    wall = Wall()
    first, first_state = fleet.replica(always(503), options(), wall=wall)
    second, second_state = fleet.replica(always(200), options(), wall=wall)
    ready = httpx.ASGITransport(app=readiness(fleet.transport(second)))
    async with httpx.AsyncClient(transport=ready) as probe:
        assert (await probe.get("http://service/ready")).status_code == 200
        open_breaker(first)
        assert first_state.sync_now()
        assert second_state.sync_now()
        answer = await probe.get("http://service/ready")
        assert answer.status_code == 503
        assert answer.json() == {
            "status": "degraded",
            "open": [
                {"client": "inventory", "host": HOST, "state": "open", "fleet": True}
            ],
        }
        wall.now += BREAK  # the fleet's break is over: the next call probes
        assert (await probe.get("http://service/ready")).status_code == 200


# -- budgets and quotas -----------------------------------------------------


def retried_once(request: httpx.Request) -> httpx.Response:
    """503 to a first attempt, 200 to a retry."""
    return httpx.Response(200 if "X-Retry-Attempt" in request.headers else 503)


def budget_options() -> HttpResilienceOptions:
    return options(
        max_retry_attempts=1,
        minimum_throughput=10_000,
        retry_budget_ratio=1.0,
        retry_budget_min_per_second=10,
    )


@pytest.mark.parametrize(
    "value",
    [
        *(",".join([part] * 22) for part in HOSTILE),
        ",".join(["99999999999999"] + ["0"] * 21),  # a bucket in the future
        ",".join(["0", "99999999999999"] + ["0"] * 20),  # a first sync too
        "1,2,3",
    ],
)
def test_a_spoilt_budget_never_refuses_a_retry_the_local_budget_allows(
    redis_server: RedisServer, fleet: Fleet, value: str
) -> None:
    wall = Wall()
    upstream = Upstream(retried_once)
    client, state = fleet.replica(upstream, budget_options(), wall=wall)
    plant(redis_server, BUDGET_KEY, value)
    assert client.get(URL).status_code == 200  # before any sync: local
    assert state.sync_now()  # reads the spoilt field: rewritten, nothing leased
    stored = field(redis_server, BUDGET_KEY)
    assert stored is not None
    parts = stored.split(",")
    assert len(parts) == 22
    assert all(part.isdigit() for part in parts)
    for _ in range(3):
        assert client.get(URL).status_code == 200  # the retry went
        assert state.sync_now()
    assert upstream.hits == 8


@pytest.mark.parametrize("rate", [1, 5, 30])
def test_leases_are_kept_while_a_replica_calls(
    redis_server: RedisServer, fleet: Fleet, rate: int
) -> None:
    wall = Wall()
    clocks = [FakeClock(), FakeClock()]
    upstreams = [Upstream(retried_once), Upstream(retried_once)]
    replicas = [
        fleet.replica(upstream, budget_options(), wall=wall, clock=clock)
        for upstream, clock in zip(upstreams, clocks, strict=True)
    ]
    calls = 0
    every = round(10 / rate) or 1  # steps of 100 ms between calls
    per_step = max(rate // 10, 1)
    for step in range(100):  # ten seconds, a sync every 100 ms
        wall.now += 0.1
        for clock in clocks:
            clock.advance(0.1)
        for client, state in replicas:
            if step % every == 0:
                for _ in range(per_step):
                    assert client.get(URL).status_code == 200, (rate, step)
                    calls += 1
            assert state.sync_now()
    assert calls == 2 * 10 * rate
    assert sum(upstream.hits for upstream in upstreams) == 2 * calls


class QuotaHost:
    """Publishes an allowance of `limit` per minute; counts every hit."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.hits = 0

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.hits += 1
        left = max(self.limit - self.hits, 0)
        return httpx.Response(
            200,
            headers={
                "RateLimit-Policy": f'"w";q={self.limit};w=60',
                "RateLimit": f'"w";r={left};t=60',
            },
        )


@pytest.mark.parametrize("rate", [1, 5, 30])
def test_quota_leases_are_kept_while_a_replica_calls(
    redis_server: RedisServer, fleet: Fleet, rate: int
) -> None:
    wall = Wall()
    host = QuotaHost(limit=10_000)
    replicas = [
        fleet.replica(Upstream(host), options(quota_reserve=0.1), wall=wall)
        for _ in range(2)
    ]
    every = round(10 / rate) or 1
    per_step = max(rate // 10, 1)
    for step in range(100):
        wall.now += 0.1
        for client, state in replicas:
            if step % every == 0:
                for _ in range(per_step):
                    try:
                        client.get(URL)
                    except RateLimitedError as error:
                        pytest.fail(f"{rate}/s, step {step}: {error}")
            assert state.sync_now()
    assert host.hits == 2 * 10 * rate


@pytest.mark.parametrize(
    "value",
    ["99999999999999,50", "nan,50", "0x7fffffffffff,50", "inf,inf", "-1,50"],
)
def test_a_hostile_quota_window_is_bounded_as_the_local_reader_bounds_it(
    redis_server: RedisServer, fleet: Fleet, value: str
) -> None:
    wall = Wall()
    host = QuotaHost(limit=100)
    client, state = fleet.replica(Upstream(host), options(quota_reserve=0.1), wall=wall)
    plant(redis_server, QUOTA_KEY, value)
    client.get(URL)
    assert state.sync_now()
    stored = field(redis_server, QUOTA_KEY)
    assert stored is not None
    reset, left = (int(part) for part in stored.split(","))
    assert reset <= NOW_MS + 86_400_000
    assert 0 <= left <= 100
    # Never a refusal for longer than a day, whatever the field said.
    wall.now += 86_400
    client.get(URL)
    assert state.sync_now()
    client.get(URL)
    assert host.hits == 3
