"""Messages with one ordering key are delivered in the order recorded, even with a
wide batch and many deliveries at once; messages without a key run in parallel, up
to the relay's concurrency."""

from __future__ import annotations

import pytest

from tests.mediator.sqlalchemy.outbox import app
from tests.mediator.sqlalchemy.outbox.conftest import Shop, outgoing_of

pytestmark = pytest.mark.anyio

KEYS = ("cart-a", "cart-b", "cart-c")
PER_KEY = 10
FREE = 5


def reserve(value: str, key: str | None) -> tuple[app.What, str, str | None]:
    return ("reserve", value, key)


async def test_one_keys_messages_are_delivered_in_recorded_order(shop: Shop) -> None:
    outgoing: list[tuple[app.What, str, str | None]] = []
    for n in range(PER_KEY):
        outgoing += [reserve(f"{key}-{n}", key) for key in KEYS]
        if n < FREE:
            outgoing.append(reserve(f"free-{n}", None))
    # Two transactions, so the order spans commits too.
    half = len(outgoing) // 2
    await shop.send(
        app.PlaceOrder(order_id="o1", outgoing=outgoing_of(*outgoing[:half]))
    )
    await shop.send(
        app.PlaceOrder(order_id="o2", outgoing=outgoing_of(*outgoing[half:]))
    )
    relay = shop.relay(batch=100, concurrency=8)

    rounds = await shop.drain(relay)

    # Each round takes the head of each key only (and every unkeyed message).
    assert rounds == [len(KEYS) + FREE] + [len(KEYS)] * (PER_KEY - 1)
    applied = [order_id for order_id, _ in shop.backend.applied()]
    assert sorted(applied) == sorted(value for _, value, _ in outgoing)
    for key in KEYS:
        assert [value for value in applied if value.startswith(key)] == [
            f"{key}-{n}" for n in range(PER_KEY)
        ]
    assert {row.state for row in shop.backend.messages()} == {"delivered"}


async def test_a_dead_message_does_not_hold_its_key_back(shop: Shop) -> None:
    app.Faults.plan["first"] = ["domain"]
    await shop.send(
        app.PlaceOrder(
            order_id="o1",
            outgoing=outgoing_of(("flaky", "first", "k"), ("reserve", "second", "k")),
        )
    )
    relay = shop.relay()

    assert await shop.drain(relay) == [1, 1]

    assert [row.state for row in shop.backend.messages()] == ["dead", "delivered"]


@pytest.mark.parametrize("concurrency", [8, 3])
async def test_unkeyed_messages_run_in_parallel_up_to_the_concurrency(
    shop: Shop, concurrency: int
) -> None:
    """Each `Slow` delivery waits (at most 5 s) until `concurrency` of them run at
    once: met only if the relay runs them in parallel; never passed if it keeps
    to its bound (an async delivery yields before it ends, so one more would
    start then; sync deliveries run on as many threads as the bound)."""
    app.Overlap.reset(target=concurrency)
    slow: list[tuple[app.What, str]] = [("slow", f"s{n}") for n in range(16)]
    outgoing = outgoing_of(*slow)
    await shop.send(app.PlaceOrder(order_id="o1", outgoing=outgoing))
    relay = shop.relay(batch=100, concurrency=concurrency)

    assert await shop.run_once(relay) == 16

    assert app.Overlap.most == concurrency
    assert app.Overlap.reached.is_set()
    runs = app.Observed.of("slow")
    assert sorted(seen.value for seen in runs) == sorted(f"s{n}" for n in range(16))
    if shop.kind == "sync":  # worker threads: as many as the bound, no more
        assert len({seen.thread for seen in runs}) == concurrency
    assert {row.state for row in shop.backend.messages()} == {"delivered"}
