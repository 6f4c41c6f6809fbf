"""SharedState against a real redis-server: budgets, breakers, outages, keys.

Two transports stand for two replicas. Syncs are run with `sync_now` (the
background thread's interval is set long), so each step is deterministic; the
fleet's time is a fake wall clock.
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from http_resilience import (
    BrokenCircuitError,
    HttpResilienceOptions,
    ResilientTransport,
    SharedState,
)
from http_resilience.testing import FakeClock
from tests.support.redis_server import RedisServer

URL = "http://inventory.local/items"


class Wall:
    """A fake Unix clock for the fleet."""

    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


class Upstream:
    """Always answers `status`; counts what reaches it."""

    def __init__(self, status: int = 503) -> None:
        self.status = status
        self.hits = 0

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.hits += 1
        return httpx.Response(self.status)


def budget_options(**changes: object) -> HttpResilienceOptions:
    return HttpResilienceOptions.model_validate(
        {
            "max_retry_attempts": 3,
            "base_delay": 0.01,
            "retry_budget_ratio": 0.0,
            "retry_budget_min_per_second": 10,
            "minimum_throughput": 10_000,
            **changes,
        }
    )


@pytest.fixture
def wall() -> Wall:
    return Wall()


@pytest.fixture
def shared(redis_server: RedisServer, wall: Wall) -> Iterator[SharedState]:
    state = SharedState(
        redis_server.url, sync_interval=60.0, wall_clock=wall, background=False
    )
    yield state
    state.close()


def replica(
    shared: SharedState | None, upstream: Upstream, options: HttpResilienceOptions
) -> httpx.Client:
    transport = ResilientTransport(
        httpx.MockTransport(upstream),
        options=options,
        name="inventory",
        clock=FakeClock(),
        shared=shared,
    )
    return httpx.Client(transport=transport)


def test_two_replicas_retry_within_one_budget(shared: SharedState) -> None:
    upstream = Upstream()
    options = budget_options()
    first, second = (replica(shared, upstream, options) for _ in range(2))
    with first, second:
        # Each replica's first call is decided before its host was ever synced.
        for client in (first, second):
            assert client.get(URL).status_code == 503
        unsynced = upstream.hits - 2
        assert shared.sync_now()
        calls = 2
        for _ in range(40):
            for client in (first, second):
                assert client.get(URL).status_code == 503
                calls += 1
            assert shared.sync_now()
    retries = upstream.hits - calls
    # One budget's floor (10 retries a second, one second up front), not two.
    assert retries - unsynced <= 10
    assert retries <= 10 + unsynced


def test_alone_each_replica_spends_its_own_budget() -> None:
    upstream = Upstream()
    options = budget_options()
    first, second = (replica(None, upstream, options) for _ in range(2))
    with first, second:
        for _ in range(41):
            for client in (first, second):
                client.get(URL)
    assert upstream.hits - 82 > 20


def test_one_replica_opens_the_breaker_for_both(
    shared: SharedState, wall: Wall
) -> None:
    upstream = Upstream()
    options = budget_options(
        max_retry_attempts=0,
        minimum_throughput=2,
        failure_ratio=0.5,
        break_duration=30,
    )
    first, second = (replica(shared, upstream, options) for _ in range(2))
    with first, second:
        first.get(URL)
        first.get(URL)
        with pytest.raises(BrokenCircuitError):
            first.get(URL)  # opened locally
        assert shared.sync_now()
        hits = upstream.hits
        with pytest.raises(BrokenCircuitError, match="across the replicas"):
            second.get(URL)
        assert upstream.hits == hits

        # The break is over: one replica claims the probe, the other waits.
        wall.now += 31
        upstream.status = 200
        with pytest.raises(BrokenCircuitError):
            second.get(URL)  # asks for the claim
        assert shared.sync_now()
        assert second.get(URL).status_code == 200  # the probe
        assert upstream.hits == hits + 1
        assert shared.sync_now()
        assert second.get(URL).status_code == 200


def test_exactly_one_probe_across_replicas(shared: SharedState, wall: Wall) -> None:
    upstream = Upstream()
    options = budget_options(
        max_retry_attempts=0,
        minimum_throughput=2,
        failure_ratio=0.5,
        break_duration=30,
    )
    clients = [replica(shared, upstream, options) for _ in range(3)]
    opener, *others = clients
    opener.get(URL)
    opener.get(URL)
    assert shared.sync_now()
    wall.now += 31
    for client in others:
        with pytest.raises(BrokenCircuitError):
            client.get(URL)
    assert shared.sync_now()
    hits = upstream.hits
    sent = 0
    for client in others:
        for _ in range(3):
            try:
                client.get(URL)
                sent += 1
            except BrokenCircuitError:
                pass
    assert sent == 1
    assert upstream.hits == hits + 1
    for client in clients:
        client.close()


def test_redis_killed_mid_run_no_request_fails(
    redis_server: RedisServer, shared: SharedState, caplog: pytest.LogCaptureFixture
) -> None:
    upstream = Upstream(200)
    options = budget_options()
    first, second = (replica(shared, upstream, options) for _ in range(2))
    with first, second:
        for client in (first, second):
            assert client.get(URL).status_code == 200
        assert shared.sync_now()
        redis_server.kill()
        for _ in range(5):
            for client in (first, second):
                assert client.get(URL).status_code == 200
            assert not shared.sync_now()
        assert not shared.up
        warnings = [r for r in caplog.records if "unavailable" in r.getMessage()]
        assert len(warnings) == 1  # once per transition
        redis_server.start()
        assert shared.sync_now()
        assert shared.up
        for client in (first, second):
            assert client.get(URL).status_code == 200
        assert shared.sync_now()
    client = redis_server.client()
    try:
        assert client.exists("http_resilience:{inventory}:budget")  # resumed
    finally:
        client.close()


def test_every_key_has_a_ttl(
    redis_server: RedisServer, shared: SharedState, wall: Wall
) -> None:
    upstream = Upstream()
    options = budget_options(
        max_retry_attempts=0, minimum_throughput=2, failure_ratio=0.5
    )
    with replica(shared, upstream, options) as client:
        for host in ("a", "b", "c"):
            client.get(f"http://{host}.local/")
            client.get(f"http://{host}.local/")  # opens its breaker
        assert shared.sync_now()
    redis = redis_server.client()
    try:
        keys: list[bytes] = list(redis.scan_iter("*"))  # pyright: ignore[reportUnknownMemberType, reportUnknownArgumentType]
        assert keys
        for key in keys:
            assert redis.pttl(key) > 0, key
    finally:
        redis.close()


def test_bad_data_is_ignored_and_overwritten(
    redis_server: RedisServer, shared: SharedState
) -> None:
    redis = redis_server.client()
    try:
        redis.set("http_resilience:{inventory}:budget", "not a hash")
        redis.hset(
            "http_resilience:{inventory}:breakers",
            "http://inventory.local:80",
            "garbage",
        )
        upstream = Upstream()
        with replica(shared, upstream, budget_options()) as client:
            client.get(URL)
            assert shared.sync_now()
            assert client.get(URL).status_code == 503
            assert shared.sync_now()
        assert redis.type("http_resilience:{inventory}:budget") == b"hash"
        assert not redis.hexists(
            "http_resilience:{inventory}:breakers", "http://inventory.local:80"
        )
    finally:
        redis.close()


def test_hosts_per_client_are_bounded(redis_server: RedisServer, wall: Wall) -> None:
    state = SharedState(
        redis_server.url, sync_interval=60.0, wall_clock=wall, maximum_hosts=3
    )
    try:
        with replica(state, Upstream(), budget_options()) as client:
            for index in range(8):
                client.get(f"http://host{index}.local/")
                assert state.sync_now()
        redis = redis_server.client()
        try:
            assert redis.hlen("http_resilience:{inventory}:budget") <= 3
        finally:
            redis.close()
    finally:
        state.close()


async def test_async_transport_shares_the_breaker(
    shared: SharedState, wall: Wall
) -> None:
    from http_resilience import AsyncResilientTransport

    upstream = Upstream()
    options = budget_options(
        max_retry_attempts=0, minimum_throughput=2, failure_ratio=0.5
    )
    opener = replica(shared, upstream, options)
    opener.get(URL)
    opener.get(URL)
    opener.close()
    assert shared.sync_now()
    transport = AsyncResilientTransport(
        httpx.MockTransport(upstream),
        options=options,
        name="inventory",
        clock=FakeClock(),
        shared=shared,
    )
    assert shared.sync_now()
    async with httpx.AsyncClient(transport=transport) as client:
        with pytest.raises(BrokenCircuitError):
            await client.get(URL)


pytestmark = pytest.mark.anyio


def test_a_breaker_opened_while_redis_was_away_is_published_on_return(
    redis_server: RedisServer, shared: SharedState
) -> None:
    upstream = Upstream()
    options = budget_options(
        max_retry_attempts=0,
        minimum_throughput=2,
        failure_ratio=0.5,
        break_duration=30,
    )
    first, second = (replica(shared, upstream, options) for _ in range(2))
    with first, second:
        assert shared.sync_now()
        redis_server.kill()
        assert not shared.sync_now()
        first.get(URL)
        first.get(URL)  # opens while Redis is away: nothing piles up
        for _ in range(3):
            assert not shared.sync_now()
        redis_server.start()
        assert shared.sync_now()  # published now
        assert shared.sync_now()  # and seen by the other replica
        hits = upstream.hits
        with pytest.raises(BrokenCircuitError, match="across the replicas"):
            second.get(URL)
        assert upstream.hits == hits
