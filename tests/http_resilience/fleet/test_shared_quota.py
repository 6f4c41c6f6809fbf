"""The published quota shared through Redis: the allowance is spent once.

Replicas are transports given one `SharedState`; syncs run with `sync_now`;
the fleet's time is a fake wall clock.
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from http_resilience import (
    BrokenCircuitError,
    HttpClientFactory,
    HttpResilienceOptions,
    RateLimitedError,
    ResilientTransport,
    SharedState,
    create_client,
)
from http_resilience._fleet.quota import usable
from http_resilience.testing import FakeClock
from tests.support.redis_server import RedisServer

URL = "http://inventory.local/items"
QUOTA_KEY = "http_resilience:{inventory}:quota"


class Wall:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


class QuotaHost:
    """Publishes a quota of `limit` per window of `window` s, counting every hit."""

    def __init__(self, limit: int = 100, window: int = 60) -> None:
        self.limit = limit
        self.window = window
        self.hits = 0

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.hits += 1
        left = max(self.limit - self.hits, 0)
        status = 200 if self.hits <= self.limit else 429
        return httpx.Response(
            status,
            headers={
                "RateLimit-Policy": f'"w";q={self.limit};w={self.window}',
                "RateLimit": f'"w";r={left};t={self.window}',
            },
        )


def options(**changes: object) -> HttpResilienceOptions:
    return HttpResilienceOptions.model_validate(
        {"max_retry_attempts": 0, "quota_reserve": 0.1, **changes}
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


def replica(shared: SharedState | None, host: QuotaHost) -> httpx.Client:
    transport = ResilientTransport(
        httpx.MockTransport(host),
        options=options(),
        name="inventory",
        clock=FakeClock(),
        shared=shared,
    )
    return httpx.Client(transport=transport)


def test_usable_is_what_is_left_above_the_reserve() -> None:
    from http_resilience._core.quota_headers import Quota

    assert usable([Quota(remaining=99, limit=100, reset=60.0)], 0.1) == (89, 60.0)
    assert usable([Quota(remaining=5, limit=100, reset=60.0)], 0.1) == (0, 60.0)
    assert usable([Quota(remaining=5, limit=None, reset=None)], 0.1) is None
    tight = [
        Quota(remaining=50, limit=100, reset=60.0),
        Quota(remaining=8, limit=10, reset=1.0),
    ]
    assert usable(tight, 0.1) == (7, 1.0)


def test_four_replicas_spend_a_quota_of_100_once(shared: SharedState) -> None:
    host = QuotaHost()
    clients = [replica(shared, host) for _ in range(4)]
    try:
        for client in clients:  # each sees the quota once
            assert client.get(URL).status_code == 200
        assert shared.sync_now()
        sent = refused = 0
        reasons: set[str] = set()
        for _ in range(60):
            for client in clients:
                for _ in range(3):
                    try:
                        client.get(URL)
                        sent += 1
                    except RateLimitedError as error:
                        reasons.add(error.reason)
                        refused += 1
            assert shared.sync_now()
        # 100, less the reserve of 10: the fleet together, not each replica.
        assert host.hits <= 90
        assert refused > 0
        assert reasons == {"quota"}
    finally:
        for client in clients:
            client.close()


def test_once_the_fleet_has_spent_it_a_fresh_replica_refuses_unsent(
    shared: SharedState, wall: Wall
) -> None:
    host = QuotaHost(limit=20)

    def stripped(request: httpx.Request) -> httpx.Response:
        # As through a proxy that drops the quota fields: only the fleet knows.
        answer = host(request)
        return httpx.Response(answer.status_code)

    fresh = httpx.Client(
        transport=ResilientTransport(
            httpx.MockTransport(stripped),
            options=options(),
            name="inventory",
            clock=FakeClock(),
            shared=shared,
        )
    )
    with replica(shared, host) as spender, fresh:
        spender.get(URL)
        assert shared.sync_now()
        for _ in range(40):
            try:
                spender.get(URL)
            except RateLimitedError:
                assert shared.sync_now()
        hits = host.hits
        assert hits <= 18
        fresh.get(URL)  # its first call: no fleet view of the host yet
        assert shared.sync_now()
        with pytest.raises(RateLimitedError, match="replicas have spent") as refused:
            fresh.get(URL)
        assert refused.value.retry_after == pytest.approx(60.0, abs=2.0)
        assert host.hits <= hits + 1
        # The window ends: the fleet's view is gone, the host is tried again.
        wall.now += 61
        assert shared.sync_now()
        host.hits = 0
        assert fresh.get(URL).status_code == 200
        assert shared.sync_now()
        assert fresh.get(URL).status_code == 200


def test_the_quota_key_has_a_ttl_and_bad_data_is_overwritten(
    redis_server: RedisServer, shared: SharedState
) -> None:
    redis = redis_server.client()
    try:
        redis.hset(QUOTA_KEY, "http://inventory.local:80", "not,a,window")
        host = QuotaHost()
        with replica(shared, host) as client:
            client.get(URL)
            assert shared.sync_now()
            client.get(URL)  # spent from the lease the sync brought
            assert shared.sync_now()
        assert 0 < redis.pttl(QUOTA_KEY) <= 61_000
        value = redis.hget(QUOTA_KEY, "http://inventory.local:80")
        assert isinstance(value, bytes)
        until, left = value.split(b",")
        assert int(until) > 0
        assert 0 <= int(left) <= 89
    finally:
        redis.close()


def test_a_host_without_a_quota_is_never_refused(shared: SharedState) -> None:
    calls = [0]

    def plain(request: httpx.Request) -> httpx.Response:
        calls[0] += 1
        return httpx.Response(200)

    transport = ResilientTransport(
        httpx.MockTransport(plain), options=options(), name="inventory", shared=shared
    )
    with httpx.Client(transport=transport) as client:
        for _ in range(5):
            assert client.get(URL).status_code == 200
            assert shared.sync_now()
    assert calls[0] == 5


# -- shared= on the clients, the factory and the injector module --------------


def failing(request: httpx.Request) -> httpx.Response:
    return httpx.Response(503)


BREAKS = {
    "max_retry_attempts": 0,
    "minimum_throughput": 2,
    "failure_ratio": 0.5,
    "break_duration": 30,
}


def test_create_client_takes_shared(shared: SharedState) -> None:
    opts = HttpResilienceOptions.model_validate(BREAKS)
    first = create_client(
        "inventory", opts, shared=shared, transport=httpx.MockTransport(failing)
    )
    second = create_client(
        "inventory", opts, shared=shared, transport=httpx.MockTransport(failing)
    )
    with first, second:
        first.get(URL)
        first.get(URL)
        assert shared.sync_now()
        with pytest.raises(BrokenCircuitError, match="across the replicas"):
            second.get(URL)


async def test_create_async_client_takes_shared(shared: SharedState) -> None:
    from http_resilience import create_async_client

    opts = HttpResilienceOptions.model_validate(BREAKS)
    with create_client(
        "inventory", opts, shared=shared, transport=httpx.MockTransport(failing)
    ) as opener:
        opener.get(URL)
        opener.get(URL)
    assert shared.sync_now()
    async with create_async_client(
        "inventory", opts, shared=shared, transport=httpx.MockTransport(failing)
    ) as client:
        assert shared.sync_now()
        with pytest.raises(BrokenCircuitError, match="across the replicas"):
            await client.get(URL)


def test_the_factory_shares_every_client(shared: SharedState) -> None:
    opts = HttpResilienceOptions.model_validate(BREAKS)

    def configure(factory: HttpClientFactory) -> None:
        factory.add("inventory", opts, transport=httpx.MockTransport(failing))

    with (
        HttpClientFactory(configure, shared=shared) as one,
        HttpClientFactory(configure, shared=shared) as other,
    ):
        opened, refused = one.client("inventory"), other.client("inventory")
        opened.get(URL)
        opened.get(URL)
        assert shared.sync_now()
        with pytest.raises(BrokenCircuitError, match="across the replicas"):
            refused.get(URL)


def test_a_client_added_with_its_own_shared_state_uses_it(
    shared: SharedState, redis_server: RedisServer
) -> None:
    own = SharedState(redis_server.url, namespace="own", sync_interval=60.0)
    try:
        factory = HttpClientFactory(
            lambda clients: clients.add(
                "inventory",
                HttpResilienceOptions.model_validate(BREAKS),
                shared=own,
                transport=httpx.MockTransport(failing),
            ),
            shared=shared,
        )
        with factory:
            factory.client("inventory").get(URL)
            assert own.sync_now()
        redis = redis_server.client()
        try:
            assert redis.exists("own:{inventory}:budget")
            assert not redis.exists("http_resilience:{inventory}:budget")
        finally:
            redis.close()
    finally:
        own.close()


def test_shared_must_be_a_shared_state() -> None:
    with pytest.raises(TypeError, match="shared must be a SharedState or None"):
        HttpClientFactory(shared="redis://localhost")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="HTTP client 'inventory': shared must be"):
        HttpClientFactory().add("inventory", shared="redis://localhost")
    with pytest.raises(TypeError, match="shared must be a SharedState or None"):
        create_client("inventory", shared=object())  # type: ignore[arg-type]


def test_the_injector_module_takes_shared(
    shared: SharedState, redis_server: RedisServer
) -> None:
    from injector import Injector

    from http_resilience.injector import HttpClientsModule

    module = HttpClientsModule(
        lambda clients: clients.add(
            "inventory",
            HttpResilienceOptions.model_validate(BREAKS),
            transport=httpx.MockTransport(failing),
        ),
        shared=shared,
    )
    factory = Injector([module]).get(HttpClientFactory)
    with factory:
        factory.client("inventory").get(URL)
        assert shared.sync_now()
    redis = redis_server.client()
    try:
        assert redis.exists("http_resilience:{inventory}:budget")
    finally:
        redis.close()


pytestmark = pytest.mark.anyio
