"""The outbox's table, ``mediator_outbox``, and ``create_all`` for it.

The same schema ships as plain SQL beside the package, for your migration tool:
``mediator/sqlalchemy/migrations/0002_outbox.sqlite.sql`` and
``0002_outbox.postgresql.sql``.
"""

from __future__ import annotations

import weakref
from typing import Final

from sqlalchemy import (
    BigInteger,
    CheckConstraint,
    Column,
    Connection,
    Engine,
    Identity,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
    text,
)
from sqlalchemy.ext.asyncio import AsyncEngine

from mediator.sqlalchemy._idempotency.table import (
    UtcDateTime,
    check_kind,
    check_table,
)

__all__ = [
    "DEAD",
    "DELIVERED",
    "PENDING",
    "acreate_outbox_table",
    "create_outbox_table",
    "ensure_outbox_table",
    "outbox_table",
]

PENDING: Final = "pending"
DELIVERED: Final = "delivered"
DEAD: Final = "dead"

outbox_table = Table(
    "mediator_outbox",
    MetaData(),
    Column(
        "seq",
        BigInteger().with_variant(Integer, "sqlite"),
        Identity(),
        primary_key=True,
    ),
    Column("id", String(36), nullable=False),
    Column("kind", String(7), nullable=False),
    Column("message_type", Text, nullable=False),
    Column("payload", Text, nullable=False),
    Column("ordering_key", String(255)),
    Column("principal", Text),
    Column("correlation_id", String(255)),
    Column("state", String(9), nullable=False),
    Column("attempts", Integer, nullable=False),
    Column("created_at", UtcDateTime, nullable=False),
    Column("next_attempt_at", UtcDateTime, nullable=False),
    Column("lease_token", String(32)),
    Column("lease_expires_at", UtcDateTime),
    Column("finished_at", UtcDateTime),
    Column("last_error", Text),
    CheckConstraint(
        "state IN ('pending', 'delivered', 'dead')", name="mediator_outbox_state"
    ),
    CheckConstraint("kind IN ('send', 'publish')", name="mediator_outbox_kind"),
    UniqueConstraint("id", name="mediator_outbox_id"),
    Index(
        "mediator_outbox_due",
        "next_attempt_at",
        sqlite_where=text("state = 'pending'"),
        postgresql_where=text("state = 'pending'"),
    ),
    Index(
        "mediator_outbox_ordering",
        "ordering_key",
        "seq",
        sqlite_where=text("state = 'pending'"),
        postgresql_where=text("state = 'pending'"),
    ),
    Index("mediator_outbox_finished", "state", "finished_at"),
)
"""One row per message: see `mediator.Outbox` and `OutboxRelay`.

On a `MetaData` of its own, so your ``create_all`` never makes it unasked; add
it to your migrations, or call `create_outbox_table`. ``seq`` orders the
messages (and those of one ordering key); ``id`` is the message id and its
idempotency key; a lease (``lease_token``, ``lease_expires_at``) is set while a
relay delivers it; ``finished_at`` is when it was delivered or went dead.
"""


def create_outbox_table(engine: Engine) -> None:
    """Create the outbox table and its indexes, unless they exist.

    For an embedded database (SQLite) or a test; a deployed database gets the
    table from its migrations (the SQL files shipped in
    ``mediator/sqlalchemy/migrations``).

    Raises:
        TypeError: `engine` is not an `Engine` (an `AsyncEngine` goes to
            `acreate_outbox_table`).

    Example:
        >>> from sqlalchemy import create_engine
        >>> create_outbox_table(create_engine("sqlite://"))
    """
    check_kind("create_outbox_table(engine=...)", engine, Engine)
    outbox_table.metadata.create_all(engine)


async def acreate_outbox_table(engine: AsyncEngine) -> None:
    """`create_outbox_table` for an `AsyncEngine`.

    Raises:
        TypeError: `engine` is not an `AsyncEngine`.
    """
    check_kind("acreate_outbox_table(engine=...)", engine, AsyncEngine)
    async with engine.begin() as connection:
        await connection.run_sync(outbox_table.metadata.create_all)


# The engines whose table was found as the outbox expects it, in this process.
_checked: weakref.WeakSet[Engine] = weakref.WeakSet()


def ensure_outbox_table(connection: Connection) -> None:
    """Check, once per engine and process, that the outbox table is there.

    Raises:
        ConfigurationError: The table is missing, or lacks columns: naming the
            table, the columns and how to create it.
    """
    if connection.engine in _checked:
        return
    create = (
        "create it with create_outbox_table(engine) (await "
        "acreate_outbox_table(engine) for an AsyncEngine), or apply the migration "
        "shipped in mediator/sqlalchemy/migrations "
        f"(0002_outbox.{connection.dialect.name}.sql)"
    )
    try:
        check_table(
            connection,
            outbox_table,
            what="the outbox's table",
            writer="the outbox",
            create=create,
        )
    finally:
        if connection.in_transaction():  # the inspection's own
            connection.rollback()
    _checked.add(connection.engine)
