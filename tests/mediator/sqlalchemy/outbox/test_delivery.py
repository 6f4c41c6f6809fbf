"""A relay delivers a committed message under its id as the idempotency key, as the
principal that recorded it, with its correlation id; a message delivered twice (a
second relay took it over after the first one's lease ran out) is applied once,
and the first relay's late outcome is refused."""

from __future__ import annotations

import asyncio
import contextvars
import dataclasses
import json
import logging
from datetime import UTC, datetime, timedelta

import pytest

from mediator import (
    ForbiddenError,
    OutboxEntry,
    Principal,
    acting_as,
    correlation_id,
    idempotency_key,
)
from tests.mediator.sqlalchemy.outbox import app
from tests.mediator.sqlalchemy.outbox.conftest import Shop, place

pytestmark = pytest.mark.anyio

ADA = Principal(
    "ada",
    frozenset({"clerk", "buyer"}),
    {"tenant": "acme", "email": "ada@example.com", "scopes": ["orders:write"]},
)


async def test_a_round_delivers_as_recorded(shop: Shop) -> None:
    with acting_as(ADA), correlation_id("corr-7f3a"):
        reserve_id, notify_id = await shop.send(
            place("o1", ("reserve", "o1"), ("notify", "o1"))
        )
    relay = shop.relay()

    assert await shop.run_once(relay) == 2

    [reserved] = app.Observed.of("reserve")
    assert reserved.key == reserve_id
    recorder = Principal("ada", frozenset({"clerk", "buyer"}), {"tenant": "acme"})
    assert reserved.principal == recorder  # other claims are not stored
    assert reserved.correlation_id == "corr-7f3a"
    [notified] = app.Observed.of("notify")
    assert (notified.key, notified.principal) == (notify_id, recorder)
    assert shop.backend.applied() == [("o1", reserve_id)]
    rows = shop.backend.messages()
    assert [(row.state, row.attempts) for row in rows] == [("delivered", 1)] * 2
    assert all(row.finished_at == shop.clock.now() for row in rows)
    assert json.loads(rows[0].principal) == {
        "id": "ada",
        "roles": ["buyer", "clerk"],
        "tenant": "acme",
    }
    assert "ada@example.com" not in rows[0].principal
    assert await shop.run_once(relay) == 0  # delivered: never claimed again


async def test_a_message_is_recorded_at_the_bound_wall_clocks_time(
    shop: Shop,
) -> None:
    # Years behind the system's clock: a message recorded at the system's time
    # would not be due for this relay until then.
    shop.clock.current = datetime(2001, 3, 4, 5, 6, tzinfo=UTC)
    mediator = app.build(
        shop.kind,
        shop.backend.engine,
        shop.backend.async_engine,
        wall_clock=shop.clock,
    )
    shop = dataclasses.replace(shop, mediator=mediator)
    [message_id] = await shop.send(place("o1", ("reserve", "o1")))

    assert shop.backend.message(message_id).created_at == shop.clock.now()
    assert await shop.run_once(shop.relay()) == 1
    assert shop.backend.applied() == [("o1", message_id)]


async def test_an_anonymous_recorded_message_is_applied_by_an_idempotent_receiver(
    shop: Shop,
) -> None:
    [message_id] = await shop.send(place("o1", ("reserve", "o1")))
    assert shop.backend.message(message_id).principal is None

    assert await shop.run_once(shop.relay()) == 1

    [seen] = app.Observed.of("reserve")
    assert (seen.key, seen.principal) == (message_id, None)
    assert shop.backend.applied() == [("o1", message_id)]
    assert shop.backend.message(message_id).state == "delivered"


async def test_an_anonymous_direct_send_with_a_callers_key_is_still_refused(
    shop: Shop,
) -> None:
    with (
        idempotency_key("caller-key-1"),
        pytest.raises(ForbiddenError, match="principal"),
    ):
        await shop.send(app.Reserve(order_id="o1"))
    assert app.Observed.of("reserve") == []
    assert shop.backend.applied() == []


@pytest.mark.parametrize("who", [None, ADA], ids=["anonymous", "ada"])
async def test_a_message_delivered_twice_is_applied_once_and_the_late_outcome_fenced(
    shop: Shop, who: Principal | None, caplog: pytest.LogCaptureFixture
) -> None:
    """Relay A delivers; the receiver commits; before A records the outcome, its
    lease runs out (a fake clock) and relay B claims the message and delivers it
    again: the receiver answers from its idempotency record, and A's outcome,
    recorded last, is refused."""
    with acting_as(who):
        [message_id] = await shop.send(place("o1", ("reserve", "o1")))
    lease = timedelta(seconds=30)
    first, second = shop.relay(lease=lease), shop.relay(lease=lease)
    taken_over: list[int] = []

    def second_relay_sync() -> None:
        shop.clock.advance(lease + timedelta(seconds=1))
        # A context of its own: B's send is a send of its own, not nested in A's.
        taken_over.append(contextvars.Context().run(second.run_once_sync))

    async def second_relay() -> None:
        shop.clock.advance(lease + timedelta(seconds=1))
        task = asyncio.create_task(second.run_once(), context=contextvars.Context())
        taken_over.append(await task)

    app.after_reserve.then = second_relay_sync if shop.kind == "sync" else second_relay

    with caplog.at_level(logging.WARNING, logger="mediator.outbox"):
        assert await shop.run_once(first) == 1

    assert taken_over == [1]  # B claimed it, A's outcome not yet recorded
    assert len(app.Observed.of("reserve")) == 1  # the handler ran once
    assert shop.backend.applied() == [("o1", message_id)]
    row = shop.backend.message(message_id)
    assert (row.state, row.attempts, row.lease_token) == ("delivered", 2, None)
    fenced = [
        record
        for record in caplog.records
        if record.name == "mediator.outbox" and message_id in record.getMessage()
    ]
    assert [record.levelno for record in fenced] == [logging.WARNING]
    assert "the lease ran out before the outcome was recorded" in fenced[0].getMessage()
    assert await shop.run_once(first) == 0


async def test_an_entry_carried_by_a_queue_of_your_own_is_delivered_as_the_relay_would(
    shop: Shop,
) -> None:
    # What a Celery task or another carrier does with an entry it was handed:
    # `OutboxEntry.deliver` (or `deliver_sync`), twice, as a queue may.
    with acting_as(ADA), correlation_id("corr-own"):
        (reserve_id,) = await shop.send(place("o9", ("reserve", "o9")))
    [row] = shop.backend.messages()
    entry = OutboxEntry(
        id=row.id,
        kind=row.kind,
        message_type=row.message_type,
        payload=row.payload,
        ordering_key=row.ordering_key,
        principal=row.principal,
        correlation_id=row.correlation_id,
        created_at=row.created_at,
    )

    for _ in range(2):
        if shop.kind == "sync":
            await asyncio.to_thread(entry.deliver_sync, shop.mediator)
        else:
            await entry.deliver(shop.mediator)

    assert shop.backend.applied() == [("o9", reserve_id)]  # applied once
    [seen] = app.Observed.of("reserve")  # the second delivery was a replay
    assert (seen.key, seen.correlation_id) == (reserve_id, "corr-own")
    assert seen.principal == Principal(
        "ada", frozenset({"clerk", "buyer"}), {"tenant": "acme"}
    )
    assert OutboxEntry.is_final(ForbiddenError("no")) is True
    assert OutboxEntry.is_final(ConnectionError("down")) is False
