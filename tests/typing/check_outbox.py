"""Type-checked only (mypy --strict and pyright strict), never run.

The outbox at the call site: `Outbox.send` and `publish` answer the message id;
`OutboxRelay` takes an `Engine` or an `AsyncEngine` and its operator calls answer
counts, stats and messages; a class with ``hand_off`` is a `Handoff`.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import assert_type

import sqlalchemy as sa
from injector import inject
from sqlalchemy.ext.asyncio import create_async_engine

from mediator import (
    Command,
    CommandHandler,
    Mediator,
    Notification,
    Outbox,
    SystemWallClock,
    idempotent,
    transactional,
)
from mediator.sqlalchemy import (
    AsyncHandoff,
    Handoff,
    OutboxMessage,
    OutboxRelay,
    OutboxStats,
    acreate_outbox_table,
    create_outbox_table,
    outbox_table,
)


@idempotent
@transactional
class ReserveStock(Command[None]):
    order_id: str


class OrderPlaced(Notification):
    order_id: str


@transactional
class PlaceOrder(Command[str]):
    order_id: str


class PlaceOrderHandler(CommandHandler[PlaceOrder, str]):
    @inject
    def __init__(self, outbox: Outbox) -> None:
        self.outbox = outbox

    def handle(self, request: PlaceOrder) -> str:
        message_id = self.outbox.send(
            ReserveStock(order_id=request.order_id), ordering_key=request.order_id
        )
        assert_type(message_id, str)
        assert_type(self.outbox.publish(OrderPlaced(order_id=request.order_id)), str)
        # The wrong kind is a type error at the call site, before the runtime check.
        self.outbox.send(OrderPlaced(order_id="o1"))  # type: ignore[arg-type]  # pyright: ignore[reportArgumentType]
        self.outbox.publish(ReserveStock(order_id="o1"))  # type: ignore[arg-type]  # pyright: ignore[reportArgumentType]
        return message_id


class QueueHandoff:
    def hand_off(self, message: OutboxMessage) -> None:
        assert_type(message.id, str)
        assert_type(message.payload, str)
        assert_type(message.ordering_key, str | None)


class AsyncQueueHandoff:
    async def ahand_off(self, message: OutboxMessage) -> None:
        assert_type(message.attempts, int)


async def typed_relay(mediator: Mediator) -> None:
    engine = sa.create_engine("sqlite://")
    create_outbox_table(engine)
    await acreate_outbox_table(create_async_engine("sqlite+aiosqlite://"))
    assert_type(outbox_table, sa.Table)
    handoff: Handoff = QueueHandoff()
    async_handoff: AsyncHandoff = AsyncQueueHandoff()
    relay = OutboxRelay(
        mediator,
        engine,
        batch=100,
        lease=timedelta(seconds=30),
        max_attempts=10,
        base_delay=timedelta(seconds=1),
        max_delay=timedelta(minutes=10),
        concurrency=8,
        poll_interval=timedelta(seconds=1),
        handoff=handoff,
        clock=SystemWallClock(),
        random=lambda: 0.0,
    )
    OutboxRelay(
        mediator, create_async_engine("sqlite+aiosqlite://"), handoff=async_handoff
    )
    assert_type(await relay.run_once(), int)
    assert_type(relay.run_once_sync(), int)
    stats = await relay.stats()
    assert_type(stats, OutboxStats)
    assert_type(relay.stats_sync(), OutboxStats)
    assert_type(stats.pending, int)
    assert_type(stats.oldest_pending_age, timedelta | None)
    assert_type(stats.read_at, datetime)
    assert_type(relay.last_stats, OutboxStats | None)
    assert_type(await relay.dead_messages(), list[OutboxMessage])
    assert_type(relay.dead_messages_sync(limit=10), list[OutboxMessage])
    assert_type(await relay.redeliver("id"), bool)
    assert_type(relay.redeliver_sync("id"), bool)
    assert_type(await relay.purge_delivered(timedelta(days=7)), int)
    assert_type(relay.purge_delivered_sync(timedelta(days=7)), int)
    assert_type(await relay.run(), None)
    relay.stop()
