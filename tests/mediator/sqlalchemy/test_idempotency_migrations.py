"""The SQL migrations shipped in the package make the table `idempotency_table`
describes, and the store works on it, on SQLite and PostgreSQL."""

from __future__ import annotations

from importlib import resources
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.exc import IntegrityError

from mediator import Claim
from mediator.sqlalchemy import (
    AsyncSqlAlchemyIdempotencyStore,
    SqlAlchemyIdempotencyStore,
    create_idempotency_table,
    idempotency_table,
)
from tests.mediator.sqlalchemy.idempotency_db import (
    KEY,
    NOW,
    RESPONSE,
    SCOPE,
    Backend,
    SyncAsAsync,
    claim,
)

pytestmark = pytest.mark.anyio


def migration(dialect: str) -> str:
    files = resources.files("mediator.sqlalchemy") / "migrations"
    return (files / f"0001_idempotency.{dialect}.sql").read_text(encoding="utf-8")


def apply(engine: sa.Engine, script: str) -> None:
    """Run a migration the way a migration tool would: the file, as it is."""
    raw = engine.raw_connection()
    try:
        cursor = raw.cursor()
        if engine.dialect.name == "sqlite":
            raw.driver_connection.executescript(script)  # type: ignore[union-attr]
        else:
            cursor.execute(script)  # psycopg runs several statements unparametrised
        cursor.close()
        raw.commit()
    finally:
        raw.close()


def schema(engine: sa.Engine) -> dict[str, Any]:
    """What reflection sees of the table: columns, key, index, checks."""
    inspector = sa.inspect(engine)
    name = idempotency_table.name
    return {
        "columns": [
            (column["name"], str(column["type"]), column["nullable"])
            for column in inspector.get_columns(name)
        ],
        "primary key": inspector.get_pk_constraint(name),
        "indexes": inspector.get_indexes(name),
        "checks": sorted(
            (check["name"], " ".join(str(check["sqltext"]).split()))
            for check in inspector.get_check_constraints(name)
        ),
        "uniques": inspector.get_unique_constraints(name),
    }


def test_the_migration_makes_the_table_create_all_makes(backend: Backend) -> None:
    idempotency_table.drop(backend.engine)
    apply(backend.engine, migration(backend.dialect))
    migrated = schema(backend.engine)
    idempotency_table.drop(backend.engine)
    create_idempotency_table(backend.engine)

    created = schema(backend.engine)

    assert migrated == created
    assert [column[0] for column in created["columns"]] == [
        column.name for column in idempotency_table.columns
    ]
    assert created["primary key"]["constrained_columns"] == ["scope", "key"]
    assert [index["column_names"] for index in created["indexes"]] == [["expires_at"]]
    assert [name for name, _ in created["checks"]] == [
        "mediator_idempotency_outcome_kind",
        "mediator_idempotency_state",
    ]


@pytest.mark.parametrize("kind", ["sync", "async"])
async def test_the_store_works_on_the_migrated_table(
    backend: Backend, kind: str
) -> None:
    idempotency_table.drop(backend.engine)
    apply(backend.engine, migration(backend.dialect))
    store = (
        SyncAsAsync(SqlAlchemyIdempotencyStore(backend.engine))
        if kind == "sync"
        else AsyncSqlAlchemyIdempotencyStore(backend.async_engine)
    )

    claimed = await claim(store)
    assert claimed.token is not None
    assert await claim(store) == Claim("in_flight")
    await store.finish(SCOPE, KEY, claimed.token, RESPONSE, now=NOW)

    assert await claim(store) == Claim("replay", outcome=RESPONSE)
    [row] = backend.rows()
    assert row.created_at == NOW


def test_the_table_refuses_a_state_or_outcome_kind_it_does_not_know(
    backend: Backend,
) -> None:
    row = {
        "scope": SCOPE,
        "key": KEY,
        "fingerprint": "f",
        "state": "pending",
        "token": "t",
        "created_at": NOW,
        "lease_expires_at": NOW,
        "expires_at": NOW,
    }
    for wrong in ({"state": "done"}, {"outcome_kind": "maybe"}):
        with (
            pytest.raises(IntegrityError),
            backend.engine.begin() as connection,
        ):
            connection.execute(sa.insert(idempotency_table).values({**row, **wrong}))
    assert backend.rows() == []
