"""A message commits with the handler's writes or rolls back with them, and no relay
sees it before the commit: sync and async handlers, SQLite and PostgreSQL."""

from __future__ import annotations

import json

import pytest

from mediator.sqlalchemy import OutboxRelay
from tests.mediator.sqlalchemy.outbox import app
from tests.mediator.sqlalchemy.outbox.conftest import Shop, outgoing_of, place

pytestmark = pytest.mark.anyio

RESERVE = "tests.mediator.sqlalchemy.outbox.app:Reserve"


async def test_a_handler_that_fails_after_recording_leaves_no_message(
    shop: Shop,
) -> None:
    request = place("o1", ("reserve", "o1"), ("notify", "o1"))
    failing = request.model_copy(update={"fail": True})

    with pytest.raises(RuntimeError, match="the handler fails after recording"):
        await shop.send(failing)

    assert shop.backend.messages() == []
    assert shop.backend.orders() == []
    assert await shop.run_once(shop.relay()) == 0


async def test_a_committed_handler_leaves_exactly_one_pending_message(
    shop: Shop,
) -> None:
    [message_id] = await shop.send(place("o1", ("reserve", "o1", "order-o1")))

    [row] = shop.backend.messages()
    assert row.id == message_id
    assert (row.kind, row.message_type) == ("send", RESERVE)
    assert json.loads(row.payload) == {"order_id": "o1"}
    assert (row.state, row.attempts, row.ordering_key) == ("pending", 0, "order-o1")
    assert row.next_attempt_at == row.created_at
    assert (row.lease_token, row.finished_at, row.last_error) == (None, None, None)
    assert shop.backend.orders() == ["o1"]
    assert app.Observed.of("reserve") == []  # recorded, not sent


async def test_each_commit_leaves_its_own_messages(shop: Shop) -> None:
    sent = [await shop.send(place(f"o{n}", ("reserve", f"o{n}"))) for n in range(5)]

    assert [row.id for row in shop.backend.messages()] == [ids[0] for ids in sent]
    assert len({ids[0] for ids in sent}) == 5


async def test_no_relay_sees_a_message_before_its_commit(shop: Shop) -> None:
    """Another connection reads no row while the handler's transaction is open;
    on PostgreSQL a relay's round claims nothing then (on SQLite the claim is a
    write, and waits for the handler's write lock, the one writer at a time)."""
    relay = shop.relay()
    postgres = shop.backend.dialect == "postgresql"
    before_commit: list[tuple[int, int | None]] = []

    def visible() -> int:
        return len(shop.backend.messages())

    def peek() -> None:
        before_commit.append((visible(), relay.run_once_sync() if postgres else None))

    async def apeek() -> None:
        before_commit.append((visible(), await relay.run_once() if postgres else None))

    app.during.hook, app.during.ahook = peek, apeek

    await shop.send(place("o1", ("reserve", "o1")))

    assert before_commit == [(0, 0 if postgres else None)]  # flushed, not committed
    assert app.Observed.of("reserve") == []
    assert visible() == 1
    assert await shop.run_once(relay) == 1
    assert [seen.value for seen in app.Observed.of("reserve")] == ["o1"]


async def test_a_retried_attempt_leaves_only_the_message_of_the_attempt_that_committed(
    shop: Shop,
) -> None:
    app.Attempts.reset(failures=1)
    request = app.PlaceOrderRetried(
        order_id="o1", outgoing=outgoing_of(("reserve", "o1"))
    )

    [message_id] = await shop.send(request)

    assert app.Attempts.made == 2  # the first attempt recorded, flushed and failed
    [row] = shop.backend.messages()
    assert row.id == message_id
    assert shop.backend.orders() == ["o1"]
    assert await shop.run_once(shop.relay()) == 1
    assert shop.backend.applied() == [("o1", message_id)]


async def test_a_rolled_back_nested_send_drops_its_message_and_keeps_the_outer_ones(
    shop: Shop,
) -> None:
    request = app.PlaceOrderNested(
        order_id="o1",
        outgoing=outgoing_of(("reserve", "outer")),
        inner=outgoing_of(("reserve", "inner"), ("notify", "inner")),
    )

    [outer_id] = await shop.send(request)

    assert len(app.Observed.of("inner")) == 1  # the nested send recorded, then failed
    [row] = shop.backend.messages()
    assert row.id == outer_id
    assert json.loads(row.payload) == {"order_id": "outer"}
    relay: OutboxRelay = shop.relay()
    assert await shop.run_once(relay) == 1
    assert shop.backend.applied() == [("outer", outer_id)]
