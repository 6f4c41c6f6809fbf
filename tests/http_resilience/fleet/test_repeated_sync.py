"""A sync whose script ran but whose answer was lost counts once when sent again.

A slow Redis runs the script (the news is applied) and answers after the
socket timeout: the replica sees a failure. `LosingAnswers` is that, made
deterministic: a client of the real redis-server that runs each script call
and then, while `losing`, raises the timeout instead of returning the answer.
The fleet's time is a fake wall clock; syncs are run by hand.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
import redis

from http_resilience import (
    HttpResilienceOptions,
    RateLimitedError,
    ResilientTransport,
    SharedState,
)
from http_resilience._fleet.budget import BudgetTerms, SharedRetryBudget
from http_resilience._fleet.link import ClientShare
from http_resilience._fleet.redis_batch import LEASE_HOLD, RedisBatch
from http_resilience._fleet.redis_client import client_keys
from http_resilience.testing import FakeClock
from tests.support.redis_server import RedisServer

HOST = "http://inventory.local:80"
URL = "http://inventory.local/items"
BUDGET_KEY, _, QUOTA_KEY, REPLICAS_KEY = client_keys("http_resilience", "inventory")
NOW = 1_000_000.0


class LosingAnswers(redis.Redis):
    """Runs every command; while `losing`, a script's answer is lost (a timeout)."""

    losing = False
    lost = 0

    def execute_command(self, *args: Any, **options: Any) -> object:
        run: Callable[..., object] = super().execute_command  # pyright: ignore[reportUnknownMemberType, reportUnknownVariableType]
        answer = run(*args, **options)
        if self.losing and args and args[0] == "EVALSHA":
            self.lost += 1
            raise redis.TimeoutError("Timeout reading from socket (the test's)")
        return answer


@pytest.fixture
def losing(redis_server: RedisServer) -> Iterator[LosingAnswers]:
    client = LosingAnswers.from_url(redis_server.url, socket_timeout=2.0)  # pyright: ignore[reportUnknownMemberType]
    assert isinstance(client, LosingAnswers)
    yield client
    client.close()


def fleet_budget(redis_server: RedisServer) -> tuple[int, int]:
    """The first attempts and the retries leased (withdrawn) Redis holds."""
    client = redis_server.client()
    try:
        raw = client.hget(BUDGET_KEY, HOST)
    finally:
        client.close()
    assert isinstance(raw, bytes)
    counts = [int(float(part)) for part in raw.decode().split(",")]
    return sum(counts[2:12]), sum(counts[12:22])


def budget_share() -> tuple[ClientShare, SharedRetryBudget]:
    share = ClientShare(
        "inventory",
        wall=lambda: NOW,
        wake=lambda: None,
        interval=0.1,
        detach=lambda share: None,
    )
    share.budget_terms = BudgetTerms(ratio=0.5, min_per_second=0, window=10.0)
    budget = SharedRetryBudget(
        ratio=0.5, min_per_second=0, window=10.0, now=0.0, share=share
    )
    share.budget_items = lambda: [(HOST, budget)]
    return share, budget


def test_a_sync_answered_too_late_counts_once_and_its_lease_arrives(
    redis_server: RedisServer, losing: LosingAnswers
) -> None:
    batch = RedisBatch(
        losing, namespace="http_resilience", maximum_batch=256, maximum_hosts=1024
    )
    share, budget = budget_share()
    for _ in range(10):
        budget.deposit(0.0)
    batch.sync(share, NOW)
    assert fleet_budget(redis_server) == (10, 1)
    assert budget.granted == 1

    for _ in range(10):
        budget.deposit(0.0)
    assert budget.withdraw(0.0)  # spends the leased retry
    losing.losing = True
    for _ in range(3):  # Redis is slow: each script runs, each answer is late
        with pytest.raises(redis.TimeoutError):
            batch.sync(share, NOW)
        share.fall_back()
    assert losing.lost == 3
    # Applied once, however many times it was sent: 20 first attempts, and
    # 1 retry spent + 3 leased (what one retry's demand asks: 2 x 1 + 1).
    assert fleet_budget(redis_server) == (20, 4)
    assert budget.granted == 1  # the lease is in the lost answer

    for _ in range(5):  # while Redis is away: news for the next batch
        budget.deposit(0.0)
    losing.losing = False
    batch.sync(share, NOW + 1)  # the same batch again: answered from memory
    assert fleet_budget(redis_server) == (20, 4)
    assert budget.granted == 4  # the lease granted in the lost answer arrived
    assert share.up
    batch.sync(share, NOW + 1)  # then the news since: the 3 leases are kept
    assert fleet_budget(redis_server) == (25, 4)
    assert budget.deposited == 25
    assert budget.granted - budget.returned == 4  # 1 spent, 3 held: as Redis has
    batch.sync(share, NOW + 1 + LEASE_HOLD)  # expired: the 3 are handed back
    assert fleet_budget(redis_server) == (25, 1)
    assert budget.granted - budget.returned == 1


def test_the_memory_of_replicas_is_bounded_and_has_a_ttl(
    redis_server: RedisServer, losing: LosingAnswers
) -> None:
    batch = RedisBatch(
        losing, namespace="http_resilience", maximum_batch=256, maximum_hosts=2
    )
    shares = [budget_share() for _ in range(5)]
    for share, budget in shares:
        budget.deposit(0.0)
        batch.sync(share, NOW)
    client = redis_server.client()
    try:
        assert client.hlen(REPLICAS_KEY) <= 2
        assert 0 < client.pttl(REPLICAS_KEY) <= 60_000
        # A replica quiet for a minute is forgotten as others sync.
        for share, budget in shares[:2]:
            budget.deposit(0.0)
            batch.sync(share, NOW + 61)
        assert client.hlen(REPLICAS_KEY) <= 2
    finally:
        client.close()


def fleet_quota(client: redis.Redis) -> int:
    """The allowance left that Redis holds for the host."""
    raw = client.hget(QUOTA_KEY, HOST)
    assert isinstance(raw, bytes)
    return int(float(raw.decode().split(",")[1]))


class QuotaHost:
    """Publishes a quota of `limit` a minute; counts every request that reaches it."""

    def __init__(self, limit: int = 100) -> None:
        self.limit = limit
        self.hits = 0

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.hits += 1
        left = max(self.limit - self.hits, 0)
        return httpx.Response(
            200 if self.hits <= self.limit else 429,
            headers={
                "RateLimit-Policy": f'"w";q={self.limit};w=60',
                "RateLimit": f'"w";r={left};t=60',
            },
        )


def test_quota_leases_granted_in_a_lost_answer_are_received_on_the_retry(
    losing: LosingAnswers,
) -> None:
    state = SharedState(
        losing, sync_interval=60.0, wall_clock=lambda: NOW, background=False
    )
    host = QuotaHost()
    transport = ResilientTransport(
        httpx.MockTransport(host),
        options=HttpResilienceOptions.model_validate(
            {"max_retry_attempts": 0, "quota_reserve": 0.1}
        ),
        name="inventory",
        clock=FakeClock(),
        shared=state,
    )
    try:
        with httpx.Client(transport=transport) as client:
            assert client.get(URL).status_code == 200  # the quota is seen
            assert state.sync_now()
            for _ in range(3):  # spends the lease (2 x 1 + 1)
                assert client.get(URL).status_code == 200
            with pytest.raises(RateLimitedError):  # and asks for more
                client.get(URL)
            losing.losing = True  # Redis is slow: it leases, its answer is late
            assert not state.sync_now()
            assert not state.sync_now()
            assert losing.lost == 2
            assert fleet_quota(losing) < 89  # those syncs leased, all the same
            losing.losing = False
            assert state.sync_now()  # the same batch: answered from memory
            reasons: set[str] = set()
            for _ in range(300):  # then until the fleet's allowance is gone
                try:
                    client.get(URL)
                except RateLimitedError as error:
                    reasons.add(error.reason)
                    assert state.sync_now()
    finally:
        state.close()
    # 100 less the reserve of 10; the first call, which the quota seen counts
    # already, is taken off again (the documented safe side). Every lease
    # Redis granted reached the replica and was spent: none lost, none twice.
    assert host.hits == 89
    assert reasons == {"quota"}
