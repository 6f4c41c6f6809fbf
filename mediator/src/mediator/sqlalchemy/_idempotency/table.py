"""The idempotency store's table, its UTC time type, and ``create_all`` for it.

The same schema ships as plain SQL beside the package, for your migration tool:
``mediator/sqlalchemy/migrations/0001_idempotency.sqlite.sql`` and
``0001_idempotency.postgresql.sql``.
"""

from __future__ import annotations

import weakref
from collections.abc import Awaitable
from datetime import UTC, datetime
from typing import Any, Final, overload

from sqlalchemy import (
    CheckConstraint,
    Column,
    Connection,
    DateTime,
    Dialect,
    Engine,
    Index,
    MetaData,
    PrimaryKeyConstraint,
    String,
    Table,
    Text,
    TypeDecorator,
    inspect,
)
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession
from sqlalchemy.orm import Session

from mediator._core.errors import ConfigurationError

__all__ = [
    "COMPLETED",
    "PENDING",
    "UtcDateTime",
    "acreate_idempotency_table",
    "check_kind",
    "check_table",
    "create_idempotency_table",
    "ensure_table",
    "idempotency_table",
]

PENDING: Final = "pending"
COMPLETED: Final = "completed"


class UtcDateTime(TypeDecorator[datetime]):
    """A timezone-aware datetime, stored in UTC on every dialect.

    PostgreSQL keeps it as ``timestamp with time zone``. SQLite has no time
    type: SQLAlchemy writes text of one fixed width
    (``YYYY-MM-DD HH:MM:SS.ffffff``), so the value is turned to UTC and written
    without its offset, and text comparison orders it as time. Read back, it is
    aware UTC on both.
    """

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(
        self, value: datetime | None, dialect: Dialect
    ) -> datetime | None:
        """Refuse a naive datetime; turn an aware one to UTC."""
        if value is None:
            return None
        if value.utcoffset() is None:
            raise ValueError(
                f"the idempotency store takes timezone-aware datetimes, got {value!r}"
            )
        value = value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: Any, dialect: Dialect) -> datetime | None:
        """Aware UTC, whatever the driver returned."""
        if value is None:
            return None
        if not isinstance(value, datetime):  # pragma: no cover - drivers parse it
            raise TypeError(f"expected a datetime from the database, got {value!r}")
        if value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value.astimezone(UTC)


idempotency_table = Table(
    "mediator_idempotency",
    MetaData(),
    Column("scope", String, nullable=False),
    Column("key", String(255), nullable=False),
    Column("fingerprint", String(64), nullable=False),
    Column("state", String(9), nullable=False),
    Column("token", String(32), nullable=False),
    Column("outcome_kind", String(8)),
    Column("outcome_type", Text),
    Column("outcome_payload", Text),
    Column("created_at", UtcDateTime, nullable=False),
    Column("lease_expires_at", UtcDateTime, nullable=False),
    Column("expires_at", UtcDateTime, nullable=False),
    Column("completed_at", UtcDateTime),
    PrimaryKeyConstraint("scope", "key", name="mediator_idempotency_pkey"),
    CheckConstraint(
        "state IN ('pending', 'completed')", name="mediator_idempotency_state"
    ),
    CheckConstraint(
        "outcome_kind IS NULL OR outcome_kind IN ('response', 'error')",
        name="mediator_idempotency_outcome_kind",
    ),
    Index("mediator_idempotency_expires_at", "expires_at"),
)
"""One record per (scope, key): see `mediator.IdempotencyStore`.

On a `MetaData` of its own, so your ``create_all`` never makes it unasked; add
it to your migrations, or call `create_idempotency_table`. ``token`` is kept
once completed (it says which claim completed it); the outcome columns are
null while pending; ``completed_at`` is set by ``complete`` or ``finish``.
"""


def create_idempotency_table(engine: Engine) -> None:
    """Create the idempotency table and its index, unless they exist.

    For an embedded database (SQLite) or a test; a deployed database gets the
    table from its migrations (the SQL files shipped in
    ``mediator/sqlalchemy/migrations``).

    Args:
        engine: The database's engine.

    Raises:
        TypeError: `engine` is not an `Engine` (an `AsyncEngine` goes to
            `acreate_idempotency_table`).

    Example:
        >>> from sqlalchemy import create_engine
        >>> create_idempotency_table(create_engine("sqlite://"))
    """
    check_kind("create_idempotency_table(engine=...)", engine, Engine)
    idempotency_table.metadata.create_all(engine)


async def acreate_idempotency_table(engine: AsyncEngine) -> None:
    """`create_idempotency_table` for an `AsyncEngine`.

    Args:
        engine: The database's async engine.

    Raises:
        TypeError: `engine` is not an `AsyncEngine`.
    """
    check_kind("acreate_idempotency_table(engine=...)", engine, AsyncEngine)
    async with engine.begin() as connection:
        await connection.run_sync(idempotency_table.metadata.create_all)


_KIND_NAMES: Final[dict[type[Any], str]] = {
    Engine: "an Engine",
    AsyncEngine: "an AsyncEngine",
    Session: "a Session",
    AsyncSession: "an AsyncSession",
}


def check_kind(
    where: str, value: object, kind: type[Any], *, optional: bool = False
) -> None:
    """Refuse `value` unless it is a `kind` (or None, when `optional`).

    The message names `where` and, for a value of the other side (an
    `AsyncEngine` where an `Engine` goes), says so.
    """
    if isinstance(value, kind) or (optional and value is None):
        return
    expected = _KIND_NAMES[kind] + (" or None" if optional else "")
    got = next(
        (name for known, name in _KIND_NAMES.items() if isinstance(value, known)),
        type(value).__qualname__,
    )
    raise TypeError(f"{where} takes {expected}, got {got}")


# The engines whose table was found as the store expects it, in this process.
# A failed check is not kept: once the table is created, the next use passes.
_checked: weakref.WeakSet[Engine] = weakref.WeakSet()


@overload
def ensure_table(engine: Engine) -> None: ...


@overload
def ensure_table(engine: AsyncEngine) -> Awaitable[None]: ...


def ensure_table(engine: Engine | AsyncEngine) -> Awaitable[None] | None:
    """Check, once per engine and process, that the idempotency table is there.

    Awaitable for an `AsyncEngine`; on an engine checked already it costs a
    set lookup. The inspection looks for `idempotency_table` and every one of
    its columns.

    Raises:
        ConfigurationError: The table is missing, or lacks columns: naming the
            table, the columns and how to create it.
    """
    if isinstance(engine, AsyncEngine):
        return _acheck(engine)
    if engine not in _checked:
        with engine.connect() as connection:
            _check(connection)
        _checked.add(engine)
    return None


async def _acheck(engine: AsyncEngine) -> None:
    if engine.sync_engine in _checked:
        return
    async with engine.connect() as connection:
        await connection.run_sync(_check)
    _checked.add(engine.sync_engine)


def _check(connection: Connection) -> None:
    check_table(
        connection,
        idempotency_table,
        what="the idempotency store's table",
        writer="the store",
        create="create it with create_idempotency_table(engine) "
        "(await acreate_idempotency_table(engine) for an AsyncEngine), or apply "
        "the migration shipped in mediator/sqlalchemy/migrations "
        f"(0001_idempotency.{connection.dialect.name}.sql)",
    )


def check_table(
    connection: Connection, table: Table, *, what: str, writer: str, create: str
) -> None:
    """Refuse a database where `table` is missing or lacks some of its columns.

    Args:
        connection: Where to look.
        table: The table as its writer expects it.
        what: The table's part in a message ("the outbox's table").
        writer: Who writes it ("the outbox").
        create: How to create it, as the message's end.

    Raises:
        ConfigurationError: Naming the table, the missing columns and `create`.
    """
    name = table.name
    inspector = inspect(connection)
    if not inspector.has_table(name):
        raise ConfigurationError(
            f"{what} {name!r} does not exist in this {connection.dialect.name} "
            f"database: {create}"
        )
    present = {column["name"] for column in inspector.get_columns(name)}
    missing = [column.name for column in table.c if column.name not in present]
    if missing:
        raise ConfigurationError(
            f"{what} {name!r} lacks the columns {', '.join(missing)}: it is not "
            f"the table {writer} writes; drop or rename it and {create}"
        )
