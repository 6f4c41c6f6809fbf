"""Bounded redelivery on a fake wall clock: a transient failure waits with jittered
exponential backoff, up to `max_attempts`, then the message is dead; a domain error
is dead at once; dead messages are visible and redelivered on request; delivered
ones are purged by age."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from tests.mediator.sqlalchemy.outbox import app
from tests.mediator.sqlalchemy.outbox.conftest import Shop, place

pytestmark = pytest.mark.anyio

BASE = timedelta(seconds=4)


def secret_free(row: Any) -> bool:
    """No column of the row holds the fake secret of the transient error."""
    values: tuple[object, ...] = tuple(row)
    return all(app.SECRET not in str(value) for value in values)


async def test_a_transient_failure_backs_off_then_goes_dead_then_is_redelivered(
    shop: Shop,
) -> None:
    app.Faults.plan["f1"] = ["transient"] * 3
    [message_id] = await shop.send(place("o1", ("flaky", "f1")))
    relay = shop.relay(max_attempts=3, base_delay=BASE, max_delay=timedelta(hours=1))

    for attempt in (1, 2):
        assert await shop.run_once(relay) == 1
        row = shop.backend.message(message_id)
        # base * 2**(n-1) * jitter, the factor 0.5 with random() == 0.0
        wait = BASE * 2 ** (attempt - 1) * 0.5
        assert (row.state, row.attempts) == ("pending", attempt)
        assert row.next_attempt_at == shop.clock.now() + wait
        assert row.last_error == "RuntimeError"  # the type only: no message text
        assert secret_free(row)
        assert (row.lease_token, row.finished_at) == (None, None)
        shop.clock.advance(wait - timedelta(microseconds=1))
        assert await shop.run_once(relay) == 0  # not due yet
        shop.clock.advance(timedelta(microseconds=1))

    assert await shop.run_once(relay) == 1
    dead = shop.backend.message(message_id)
    assert (dead.state, dead.attempts, dead.last_error) == ("dead", 3, "RuntimeError")
    assert dead.finished_at == shop.clock.now()
    assert secret_free(dead)
    shop.clock.advance(timedelta(days=1))
    assert await shop.run_once(relay) == 0  # dead: never tried again by itself
    stats = await shop.stats(relay)
    assert (stats.pending, stats.in_flight, stats.dead) == (0, 0, 1)
    assert stats.oldest_pending_age is None
    [listed] = await shop.dead_messages(relay)
    assert (listed.id, listed.state, listed.last_error) == (
        message_id,
        "dead",
        "RuntimeError",
    )
    assert len(app.Observed.of("flaky")) == 3

    # The receiver is back (no failure planned): redeliver makes it due now.
    assert await shop.redeliver(relay, message_id) is True
    again = shop.backend.message(message_id)
    assert (again.state, again.attempts) == ("pending", 0)
    assert again.next_attempt_at == shop.clock.now()
    assert await shop.run_once(relay) == 1
    delivered = shop.backend.message(message_id)
    assert (delivered.state, delivered.attempts) == ("delivered", 1)
    assert len(app.Observed.of("flaky")) == 4
    assert await shop.run_once(relay) == 0

    assert await shop.redeliver(relay, message_id) is False  # delivered
    assert await shop.redeliver(relay, "no-such-message") is False
    assert await shop.run_once(relay) == 0
    assert len(app.Observed.of("flaky")) == 4


async def test_the_backoff_is_capped_at_max_delay(shop: Shop) -> None:
    app.Faults.plan["f1"] = ["transient"] * 5
    [message_id] = await shop.send(place("o1", ("flaky", "f1")))
    cap = timedelta(seconds=6)
    relay = shop.relay(base_delay=BASE, max_delay=cap)
    waits: list[timedelta] = []
    for _ in range(4):
        assert await shop.run_once(relay) == 1
        wait = shop.backend.message(message_id).next_attempt_at - shop.clock.now()
        waits.append(wait)
        shop.clock.advance(wait)

    # Capped, then jittered: never above max_delay (uncapped: 2 s, 4 s, 8 s, 16 s).
    assert waits == [BASE * 0.5, cap * 0.5, cap * 0.5, cap * 0.5]


async def test_a_domain_error_is_dead_at_once_with_its_reason(shop: Shop) -> None:
    app.Faults.plan["f1"] = ["domain"]
    [message_id] = await shop.send(place("o1", ("flaky", "f1")))
    relay = shop.relay(max_attempts=10)

    assert await shop.run_once(relay) == 1

    row = shop.backend.message(message_id)
    assert (row.state, row.attempts) == ("dead", 1)
    assert row.last_error == "BusinessRuleError: out of stock for f1"
    assert [message.id for message in await shop.dead_messages(relay)] == [message_id]
    assert len(app.Observed.of("flaky")) == 1


async def test_stats_show_pending_dead_and_the_oldest_pending_age(shop: Shop) -> None:
    app.Faults.plan["waits"] = ["transient"]
    app.Faults.plan["refused"] = ["domain"]
    relay = shop.relay()
    empty = await shop.stats(relay)
    assert (empty.pending, empty.in_flight, empty.dead) == (0, 0, 0)
    assert empty.oldest_pending_age is None
    [waiting_id, _] = await shop.send(
        place("o1", ("flaky", "waits"), ("flaky", "refused"))
    )
    await shop.send(place("o2", ("reserve", "later")))

    assert await shop.run_once(relay) == 3

    stats = await shop.stats(relay)
    assert (stats.pending, stats.in_flight, stats.dead) == (1, 0, 1)
    created = shop.backend.message(waiting_id).created_at
    assert stats.oldest_pending_age == shop.clock.now() - created
    assert stats.read_at == shop.clock.now()
    assert relay.last_stats == stats
    shop.clock.advance(timedelta(minutes=5))
    later = await shop.stats(relay)
    assert stats.oldest_pending_age is not None
    assert later.oldest_pending_age == stats.oldest_pending_age + timedelta(minutes=5)


async def test_purge_delivered_removes_only_delivered_messages_older_than_the_bound(
    shop: Shop,
) -> None:
    app.Faults.plan["refused"] = ["domain"]
    app.Faults.plan["waits"] = ["transient"]
    old = await shop.send(place("o1", ("reserve", "old-1"), ("reserve", "old-2")))
    [dead_id, pending_id] = await shop.send(
        place("o2", ("flaky", "refused"), ("flaky", "waits"))
    )
    relay = shop.relay(base_delay=timedelta(hours=5), max_delay=timedelta(hours=5))
    assert await shop.run_once(relay) == 4
    shop.clock.advance(timedelta(hours=2))
    [recent_id] = await shop.send(place("o3", ("reserve", "recent")))
    assert await shop.run_once(relay) == 1

    assert await shop.purge_delivered(relay, timedelta(hours=1)) == 2

    remaining = {row.id: row.state for row in shop.backend.messages()}
    assert remaining == {dead_id: "dead", pending_id: "pending", recent_id: "delivered"}
    assert not set(old) & set(remaining)
    assert await shop.purge_delivered(relay, timedelta(hours=1)) == 0
    shop.clock.advance(timedelta(hours=1, seconds=1))
    assert await shop.purge_delivered(relay, timedelta(hours=1)) == 1
    assert {row.id for row in shop.backend.messages()} == {dead_id, pending_id}
