"""Issue 30's proofs with relays as real processes (``mediator.sqlalchemy.outbox``).

- A relay SIGKILLed after the receiver committed, before it recorded the outcome
  (SQLite on `run_sync`, PostgreSQL on `run`): a second relay, started with its
  clock past the lease, delivers the message again, the ``@idempotent`` receiver
  replays it, and its effect is applied once.
- Four relays on PostgreSQL over 1,000 messages (50 ordering keys and some without
  one), one of them SIGKILLed half-way with a short real lease: every message
  delivered and applied once, no message in the hands of two relays at once, and
  each key's messages applied in the order recorded.

The receiver logs every delivery (pid, message, start, end) outside its own
transaction, so a duplicate delivery shows there even when the idempotent effect
hides it. Waits poll the database, bounded; nothing sleeps for time to pass.
"""

from __future__ import annotations

import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from mediator.sqlalchemy import outbox_table
from tests.support import outbox_relay_app as app
from tests.support.relay_processes import (
    drop_tables,
    outbox_states,
    relays_ended,
    reset_tables,
    start_relay,
    wait_until,
)

pytestmark = pytest.mark.timeout(480)

DEADLINE = 60.0  # seconds for one relay to do one thing
COMPLETION = 180.0  # seconds for four relays to deliver everything (52 s seen, loaded)
MESSAGES = 1_000
KEYS = 50
UNKEYED_EVERY = 10  # every tenth message has no ordering key
PER_SEND = 50  # messages recorded by one transactional command
RELAYS = 4
SHORT_LEASE = "3"  # seconds: the relays still running use real clocks
KILL_AFTER = 300  # effects applied before one relay is killed
PAST_THE_LEASE = "300"  # seconds the second relay's clock runs ahead (lease 30 s)


@dataclass(frozen=True)
class Database:
    name: str
    url: str
    engine: sa.Engine

    @property
    def is_async(self) -> bool:
        return self.name == "postgresql"  # PostgreSQL: `run` on an AsyncEngine

    def rows(self, table: sa.Table, *order: Any) -> list[Any]:
        with self.engine.connect() as connection:
            return list(connection.execute(sa.select(table).order_by(*order)))


@pytest.fixture(params=["sqlite", "postgresql"])
def database(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Database]:
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'outbox.db'}"
    else:
        url = str(request.getfixturevalue("postgres_url"))
    engine = sa.create_engine(url)
    reset_tables(engine)
    try:
        yield Database(str(request.param), url, engine)
    finally:
        drop_tables(engine)
        engine.dispose()


@pytest.fixture
def postgresql(postgres_url: str) -> Iterator[Database]:
    engine = sa.create_engine(postgres_url)
    reset_tables(engine)
    try:
        yield Database("postgresql", postgres_url, engine)
    finally:
        drop_tables(engine)
        engine.dispose()


def _message(database: Database) -> Any:
    (row,) = database.rows(outbox_table, outbox_table.c.seq)
    return row


def test_a_relay_killed_after_the_receiver_committed_is_replayed_once(
    database: Database, tmp_path: Path
) -> None:
    app.build_mediator(database.engine).send_sync(app.Record(items=[(1, "k", 0)]))
    held = tmp_path / "held"
    first = start_relay(
        database.url,
        tmp_path / "first.log",
        is_async=database.is_async,
        hold_after_commit=str(held),
    )
    with relays_ended([first]) as relays:
        wait_until(held.exists, within=DEADLINE, what="the commit", relays=relays)
        assert [row.pid for row in database.rows(app.effects)] == [first.pid]
        assert _message(database).state == "pending"  # its outcome not recorded
        first.kill()

        second = start_relay(
            database.url,
            tmp_path / "second.log",
            is_async=database.is_async,
            clock_offset=PAST_THE_LEASE,
        )
        relays.append(second)
        wait_until(
            lambda: _message(database).state == "delivered",
            within=DEADLINE,
            what="the message delivered again",
            relays=[second],
        )
        assert second.terminate() == 0, second.log_text()

    message = _message(database)
    assert (message.state, message.attempts) == ("delivered", 2)
    # Applied once, by the first relay; the second's delivery was a replay.
    assert [(row.n, row.pid) for row in database.rows(app.effects)] == [(1, first.pid)]
    log = database.rows(app.deliveries, app.deliveries.c.id)
    assert [(row.pid, row.outcome) for row in log] == [
        (first.pid, "done"),
        (second.pid, "done"),
    ]


def _items() -> list[tuple[int, str | None, int]]:
    """(number, ordering key, sequence number within its key), in recording order."""
    counts: Counter[str | None] = Counter()
    items: list[tuple[int, str | None, int]] = []
    for n in range(MESSAGES):
        unkeyed = n % UNKEYED_EVERY == UNKEYED_EVERY - 1
        key = None if unkeyed else f"key-{(n - n // UNKEYED_EVERY) % KEYS}"
        items.append((n, key, counts[key]))
        counts[key] += 1
    return items


def test_four_relays_deliver_a_thousand_messages_once_each_in_key_order(
    postgresql: Database, tmp_path: Path
) -> None:
    database = postgresql
    relays = [
        start_relay(
            database.url,
            tmp_path / f"relay-{i}.log",
            is_async=True,
            lease=SHORT_LEASE,
        )
        for i in range(RELAYS)
    ]
    with relays_ended(relays):
        mediator = app.build_mediator(database.engine)
        items = _items()
        for start in range(0, MESSAGES, PER_SEND):
            mediator.send_sync(app.Record(items=items[start : start + PER_SEND]))

        def applied() -> int:
            with database.engine.connect() as connection:
                return int(
                    connection.scalar(
                        sa.select(sa.func.count()).select_from(app.effects)
                    )
                    or 0
                )

        victim, survivors = relays[0], relays[1:]
        wait_until(
            lambda: applied() >= KILL_AFTER,
            within=COMPLETION,
            what=f"{KILL_AFTER} messages applied",
            relays=relays,
        )
        victim.kill()
        killed_at = time.time()  # the victim's deliveries ended by now
        wait_until(
            lambda: outbox_states(database.engine) == {"delivered": MESSAGES},
            within=COMPLETION,
            what=f"all {MESSAGES} messages delivered",
            relays=survivors,
        )
        for relay in survivors:
            assert relay.terminate() == 0, relay.log_text()

    effects = database.rows(app.effects, app.effects.c.id)
    # Every message applied, and once.
    assert sorted(row.n for row in effects) == list(range(MESSAGES))
    # The victim applied some before it died, and the others took over.
    by_relay = Counter(row.pid for row in effects)
    assert by_relay[victim.pid] > 0
    assert sum(by_relay[relay.pid] for relay in survivors) > 0
    # Each key's messages applied in the order recorded.
    applied_seqs: dict[str, list[int]] = defaultdict(list)
    for row in effects:
        if row.ordering_key is not None:
            applied_seqs[row.ordering_key].append(row.seq)
    assert len(applied_seqs) == KEYS
    for key, seqs in applied_seqs.items():
        assert seqs == sorted(set(seqs)), f"{key} applied out of order: {seqs}"
    # No message in the hands of two relays at once.
    log = database.rows(app.deliveries, app.deliveries.c.id)
    intervals: dict[int, list[tuple[float, float, int]]] = defaultdict(list)
    for row in log:
        if row.ended is None:
            assert row.pid == victim.pid, f"a delivery of {row.n} never ended"
            intervals[row.n].append((row.started, killed_at, row.pid))
        else:
            intervals[row.n].append((row.started, row.ended, row.pid))
    assert set(intervals) == set(range(MESSAGES))
    for n, spans in intervals.items():
        for i, (began, ended, pid) in enumerate(spans):
            for other_began, other_ended, other in spans[i + 1 :]:
                apart = ended <= other_began or other_ended <= began
                assert pid == other or apart, f"message {n} delivered twice: {spans}"
    redelivered = len(log) - MESSAGES
    assert redelivered >= 0
