"""The SQL migration shipped in the package (0002_outbox) makes the table
`create_outbox_table` makes, and the relay works on it, on SQLite and PostgreSQL."""

from __future__ import annotations

from importlib import resources
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.exc import IntegrityError

from mediator.sqlalchemy import create_outbox_table, outbox_table
from tests.mediator.sqlalchemy.outbox import app
from tests.mediator.sqlalchemy.outbox.conftest import Backend, Shop, place
from tests.mediator.sqlalchemy.test_idempotency_migrations import apply

pytestmark = pytest.mark.anyio


def migration(dialect: str) -> str:
    files = resources.files("mediator.sqlalchemy") / "migrations"
    return (files / f"0002_outbox.{dialect}.sql").read_text(encoding="utf-8")


def schema(engine: sa.Engine) -> dict[str, Any]:
    """What reflection sees of the table: columns, key, indexes, checks, uniques."""
    inspector = sa.inspect(engine)
    name = outbox_table.name
    return {
        "columns": [
            (column["name"], str(column["type"]), column["nullable"])
            for column in inspector.get_columns(name)
        ],
        "primary key": inspector.get_pk_constraint(name)["constrained_columns"],
        "indexes": sorted(
            (
                index["name"],
                tuple(index["column_names"]),
                bool(index["unique"]),
                where(index),
            )
            for index in inspector.get_indexes(name)
        ),
        "checks": sorted(
            (check["name"], " ".join(str(check["sqltext"]).split()))
            for check in inspector.get_check_constraints(name)
        ),
        "uniques": sorted(
            (unique["name"], tuple(unique["column_names"]))
            for unique in inspector.get_unique_constraints(name)
        ),
    }


def where(index: Any) -> str:
    """An index's partial condition as text ("" for a full index)."""
    options: dict[str, Any] = index.get("dialect_options", {})
    found = [str(value) for key, value in options.items() if key.endswith("_where")]
    return " ".join(" ".join(found).split())


def test_the_migration_makes_the_table_create_outbox_table_makes(
    backend: Backend,
) -> None:
    outbox_table.drop(backend.engine)
    apply(backend.engine, migration(backend.dialect))
    migrated = schema(backend.engine)
    outbox_table.drop(backend.engine)
    create_outbox_table(backend.engine)

    created = schema(backend.engine)

    assert migrated == created
    assert [column[0] for column in created["columns"]] == [
        column.name for column in outbox_table.columns
    ]
    assert created["primary key"] == ["seq"]
    indexes = {index[0]: index[1:] for index in created["indexes"]}
    indexes.pop("mediator_outbox_id", None)  # PostgreSQL's index of the unique id
    pending = ("state = 'pending'", "((state)::text = 'pending'::text)")
    assert indexes["mediator_outbox_due"][:2] == (("next_attempt_at",), False)
    assert indexes["mediator_outbox_due"][2] in pending
    assert indexes["mediator_outbox_ordering"][:2] == (("ordering_key", "seq"), False)
    assert indexes["mediator_outbox_ordering"][2] in pending
    assert indexes["mediator_outbox_finished"] == (("state", "finished_at"), False, "")
    assert len(indexes) == 3
    assert [name for name, _ in created["checks"]] == [
        "mediator_outbox_kind",
        "mediator_outbox_state",
    ]
    assert created["uniques"] == [("mediator_outbox_id", ("id",))]


async def test_the_relay_works_on_the_migrated_table(shop: Shop) -> None:
    engine = shop.backend.engine
    outbox_table.drop(engine)
    apply(engine, migration(shop.backend.dialect))
    app.Faults.plan["f1"] = ["transient"]
    [reserve_id, flaky_id] = await shop.send(
        place("o1", ("reserve", "o1", "k"), ("flaky", "f1", "k"))
    )
    relay = shop.relay()

    assert await shop.drain(relay) == [1, 1]
    assert (await shop.stats(relay)).pending == 1
    wait = shop.backend.message(flaky_id).next_attempt_at - shop.clock.now()
    assert wait.total_seconds() == 0.5  # base_delay 1 s, the jitter factor 0.5
    shop.clock.advance(wait)
    assert await shop.drain(relay) == [1]

    assert shop.backend.applied() == [("o1", reserve_id)]
    assert [row.state for row in shop.backend.messages()] == ["delivered"] * 2
    assert [row.seq for row in shop.backend.messages()] == [1, 2]


def test_the_table_refuses_a_state_or_kind_it_does_not_know(backend: Backend) -> None:
    now = sa.func.current_timestamp()
    row = {
        "id": "m-1",
        "kind": "send",
        "message_type": "m:T",
        "payload": "{}",
        "state": "pending",
        "attempts": 0,
        "created_at": now,
        "next_attempt_at": now,
    }
    for wrong in ({"state": "done"}, {"kind": "shout"}):
        with pytest.raises(IntegrityError), backend.engine.begin() as connection:
            connection.execute(sa.insert(outbox_table).values({**row, **wrong}))
    with backend.engine.begin() as connection:
        connection.execute(sa.insert(outbox_table).values(row))
    with pytest.raises(IntegrityError), backend.engine.begin() as connection:
        connection.execute(sa.insert(outbox_table).values(row))  # the same id
    assert [found.id for found in backend.messages()] == ["m-1"]
