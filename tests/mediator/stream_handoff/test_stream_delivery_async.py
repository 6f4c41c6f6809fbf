"""The stream hand-off and its consumer on the async path, against real Redis.

`OutboxRelay.run_once` awaits `StreamHandoff.ahand_off` on a
``redis.asyncio.Redis``; `StreamConsumer.run_once` and `run` deliver with
`Mediator.send`. A sync ``redis.Redis`` works there too, in a worker thread.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import Any, cast

import anyio
import pytest
import redis
import redis.asyncio

from mediator import SyncPathError
from mediator._core.clock import utc_now
from mediator._dispatch.outbox import OutboxEntry
from mediator.redis import StreamConsumer, StreamHandoff
from mediator.sqlalchemy import OutboxRelay
from tests.support.redis_server import RedisServer

from .app import App, Place, make_app

pytestmark = pytest.mark.anyio

STREAM = "orders:outbox"
GROUP = "inventory"


@pytest.fixture
def app(tmp_path: Path) -> App:
    return make_app(tmp_path / "orders.db")


@pytest.fixture
async def client(redis_server: RedisServer) -> AsyncIterator[redis.asyncio.Redis]:
    found = redis.asyncio.Redis(
        host="127.0.0.1", port=redis_server.port, socket_timeout=5.0
    )
    yield found
    await found.aclose()


def consumer_of(app: App, client: Any, **options: Any) -> StreamConsumer:
    options.setdefault("block", timedelta(milliseconds=50))
    return StreamConsumer(app.mediator, client, STREAM, GROUP, **options)


async def handed_off(app: App, client: Any, *orders: str) -> list[str]:
    ids = [await app.mediator.send(Place(order_id=order)) for order in orders]
    relay = OutboxRelay(app.mediator, app.engine, handoff=StreamHandoff(client, STREAM))
    assert await relay.run_once() == len(orders)
    assert (await relay.stats()).pending == 0
    return ids


Entries = list[tuple[bytes, dict[bytes, bytes]]]


async def read(client: redis.asyncio.Redis, stream: str = STREAM) -> Entries:
    """The stream's entries, as this client (bytes, not decoded) reads them."""
    return cast(Entries, await client.xrange(stream))


async def pending_count(client: redis.asyncio.Redis) -> int:
    summary: Any = await client.xpending(STREAM, GROUP)
    return int(summary["pending"])


async def test_the_relay_hands_off_and_the_consumer_applies_it(
    app: App, client: redis.asyncio.Redis
) -> None:
    [message_id] = await handed_off(app, client, "o-1")
    [(_, fields)] = await read(client)
    assert fields[b"id"] == message_id.encode()

    consumer = consumer_of(app, client)
    assert await consumer.run_once() == 1

    assert app.applications() == ["o-1"]
    assert await pending_count(client) == 0


class Crash(BaseException):
    """The consumer's process died."""


class CrashBeforeAck(redis.asyncio.Redis):
    async def xack(self, *args: Any, **kwargs: Any) -> Any:
        raise Crash


async def test_a_crashed_consumers_entry_is_taken_over_and_applied_once(
    app: App, client: redis.asyncio.Redis, redis_server: RedisServer
) -> None:
    await handed_off(app, client, "o-1")
    crashing = CrashBeforeAck(
        host="127.0.0.1", port=redis_server.port, socket_timeout=5.0
    )
    with pytest.raises(Crash):
        await consumer_of(app, crashing, consumer="first").run_once()
    await crashing.aclose()
    assert app.applications() == ["o-1"]
    assert await pending_count(client) == 1

    second = consumer_of(app, client, consumer="second", min_idle=timedelta(0))
    assert await second.run_once() == 1

    assert app.sightings.calls == ["o-1"]  # the second delivery was a replay
    assert app.applications() == ["o-1"]
    assert await pending_count(client) == 0


async def test_a_domain_error_and_a_garbled_entry_go_dead(
    app: App, client: redis.asyncio.Redis
) -> None:
    await client.xadd(STREAM, {"id": "m 1", "kind": "send"})
    await app.mediator.send(Place(order_id="o-9", refused=True))
    relay = OutboxRelay(app.mediator, app.engine, handoff=StreamHandoff(client, STREAM))
    await relay.run_once()
    consumer = consumer_of(app, client)

    assert await consumer.run_once() == 2

    dead = [fields[b"error"] for _, fields in await read(client, consumer.dead_stream)]
    assert dead == [
        b"GarbledEntryError: the entry has no message_type, payload, created_at",
        b"BusinessRuleError: order o-9 cannot be reserved",
    ]
    assert await pending_count(client) == 0


async def test_stop_ends_run(app: App, client: redis.asyncio.Redis) -> None:
    consumer = consumer_of(app, client)
    with anyio.fail_after(30):
        async with anyio.create_task_group() as group:
            group.start_soon(consumer.run)
            await handed_off(app, client, "o-1")
            assert await anyio.to_thread.run_sync(app.sightings.seen.wait, 20)
            consumer.stop()  # the task group waits for run() to return
    assert app.applications() == ["o-1"]


async def test_a_sync_client_serves_the_async_path_in_a_thread(
    app: App, redis_server: RedisServer
) -> None:
    client = redis_server.client()
    try:
        await handed_off(app, client, "o-1")
        assert await consumer_of(app, client).run_once() == 1
        assert app.applications() == ["o-1"]
    finally:
        client.close()


async def test_an_async_client_refuses_the_sync_path(
    client: redis.asyncio.Redis, app: App
) -> None:
    consumer = consumer_of(app, client)
    with pytest.raises(SyncPathError, match=r"run_sync\(\) needs a redis.Redis"):
        consumer.run_sync()
    with pytest.raises(SyncPathError, match=r"run_once_sync\(\) needs a redis.Redis"):
        consumer.run_once_sync()
    message = OutboxEntry(
        id="m-1",
        kind="send",
        message_type="x:Y",
        payload="{}",
        ordering_key=None,
        principal=None,
        correlation_id=None,
        created_at=utc_now(),
    )
    with pytest.raises(SyncPathError, match=r"has a redis\.asyncio\.Redis client"):
        StreamHandoff(client, STREAM).hand_off(message)
    assert await client.exists(STREAM) == 0
