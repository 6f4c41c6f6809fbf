"""Type-checked only (mypy --strict and pyright strict), never run.

`StreamHandoff` is a `Handoff` and an `AsyncHandoff` for `OutboxRelay`, with
a sync or an async client; `StreamConsumer` answers counts and runs until
stopped; an `OutboxMessage` is an `OutboxRecord`.
"""

from __future__ import annotations

from datetime import timedelta
from typing import assert_type

import redis
import redis.asyncio
import sqlalchemy as sa

from mediator import Mediator
from mediator.redis import OutboxRecord, StreamConsumer, StreamHandoff
from mediator.sqlalchemy import AsyncHandoff, Handoff, OutboxMessage, OutboxRelay


def relays(mediator: Mediator, engine: sa.Engine, client: redis.Redis) -> None:
    handoff = StreamHandoff(client, "shop:outbox", maxlen=100_000)
    sync_side: Handoff = handoff
    async_side: AsyncHandoff = handoff
    OutboxRelay(mediator, engine, handoff=handoff)
    OutboxRelay(mediator, engine, handoff=StreamHandoff(redis.asyncio.Redis(), "s"))
    assert_type(handoff.stream, str)
    del sync_side, async_side


def records(message: OutboxMessage) -> OutboxRecord:
    return message


async def consumes(mediator: Mediator, client: redis.asyncio.Redis) -> None:
    consumer = StreamConsumer(
        mediator,
        client,
        "shop:outbox",
        "inventory",
        consumer="worker-1",
        batch=10,
        block=timedelta(seconds=1),
        min_idle=timedelta(minutes=1),
        max_deliveries=10,
        dead_stream="shop:outbox:dead",
    )
    assert_type(await consumer.run_once(), int)
    await consumer.run()
    consumer.stop()
    assert_type(consumer.dead_stream, str)
    assert_type(consumer.consumer, str)


def consumes_sync(mediator: Mediator, client: redis.Redis) -> None:
    consumer = StreamConsumer(mediator, client, "shop:outbox", "inventory")
    assert_type(consumer.run_once_sync(), int)
    consumer.run_sync()
