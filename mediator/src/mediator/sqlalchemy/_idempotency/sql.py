"""What the idempotency stores say and decide: statements and the claim's decision.

The sync and async stores (`mediator.sqlalchemy._idempotency.store`) are thin
drivers over them.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Final

from sqlalchemy import Update, delete, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import Session
from sqlalchemy.sql.dml import Delete, ReturningInsert
from sqlalchemy.sql.selectable import Select

from mediator._behaviors.idempotency.store import Claim, StoredOutcome
from mediator.sqlalchemy._first_write import REMAINING_TIME
from mediator.sqlalchemy._idempotency.table import (
    COMPLETED,
    PENDING,
    idempotency_table,
)
from mediator.sqlalchemy._sqlite import IMMEDIATE, READ_COMMITTED_STATEMENT

__all__ = [
    "ClaimCall",
    "ClaimRecord",
    "check_claim",
    "check_time",
    "claim_options",
    "completion",
    "decide",
    "expired",
    "insert_claim",
    "own_options",
    "purge",
    "read_record",
    "release",
    "statement_options",
    "take_over",
]

_C = idempotency_table.c
_DIALECTS: Final = ("sqlite", "postgresql")
# The stores' own transactions: SQLite takes the write lock at BEGIN (on an
# engine prepared by `prepare_sqlite`); PostgreSQL reads committed rows whatever
# the engine's default isolation, since a claim relies on the key and a row
# lock, and a serializable claim would fail where a duplicate should wait.
_OWN_OPTIONS: Final[dict[str, dict[str, Any]]] = {
    "sqlite": {IMMEDIATE: True},
    "postgresql": {"isolation_level": "READ COMMITTED"},
}
# A claim's first try: each statement on its own, committed as it runs.
_STATEMENT_OPTIONS: Final[dict[str, dict[str, Any]]] = {
    "sqlite": {READ_COMMITTED_STATEMENT: True},
    "postgresql": {"isolation_level": "AUTOCOMMIT"},
}
_NO_OUTCOME: Final[dict[str, Any]] = {
    "outcome_kind": None,
    "outcome_type": None,
    "outcome_payload": None,
    "completed_at": None,
}


def own_options(owner: str, dialect: str) -> dict[str, Any]:
    """The execution options of a store's own transactions on `dialect`.

    Raises:
        TypeError: The database is neither SQLite nor PostgreSQL.
    """
    if dialect not in _DIALECTS:
        raise TypeError(f"{owner} works on SQLite and PostgreSQL, not {dialect}")
    return _OWN_OPTIONS[dialect]


def statement_options(dialect: str) -> dict[str, Any]:
    """The execution options of a connection in autocommit on `dialect`.

    No transaction: each statement commits as it runs (and a read sees the
    last commit), so a claim that inserts its record in one statement costs
    that statement alone.
    """
    return _STATEMENT_OPTIONS[dialect]


def claim_options(
    own: dict[str, Any], session: Session | AsyncSession | None
) -> dict[str, Any]:
    """The options of a claim's transaction: `own`, bounded by the deadline.

    On SQLite, a session that carries the caller's ``remaining_time`` (in its
    `info`, put there by `SqlAlchemyModule`) bounds the claim's wait for the
    write lock, as a unit of work's first write is bounded.
    """
    info: dict[Any, Any] = {} if session is None else session.info
    remaining_time = info.get(REMAINING_TIME)
    if remaining_time is None or IMMEDIATE not in own:
        return own
    return {**own, IMMEDIATE: remaining_time}


def check_time(name: str, value: object) -> None:
    """Refuse a naive datetime (or no datetime), naming the argument."""
    if not isinstance(value, datetime) or value.utcoffset() is None:
        raise ValueError(f"{name} must be a timezone-aware datetime, got {value!r}")


def check_claim(now: object, lease: object, retention: object) -> None:
    """Refuse a claim's naive `now`, or a `lease` or `retention` not positive."""
    check_time("now", now)
    for name, value in (("lease", lease), ("retention", retention)):
        if not isinstance(value, timedelta) or value <= timedelta(0):
            raise ValueError(f"{name} must be a positive timedelta, got {value!r}")


@dataclass(frozen=True, slots=True)
class ClaimCall:
    """What one `claim` was asked: the record's (scope, key), the request, when."""

    scope: str
    key: str
    fingerprint: str
    now: datetime
    lease: timedelta
    retention: timedelta

    def record(self) -> ClaimRecord:
        """The record the claim writes, under a fresh token."""
        return ClaimRecord.fresh(self.fingerprint, self.now, self.lease, self.retention)


@dataclass(frozen=True, slots=True)
class ClaimRecord:
    """A claim about to be written: the new record's columns, under a fresh token."""

    values: dict[str, Any]

    @property
    def token(self) -> str:
        """The new claim's token."""
        token: str = self.values["token"]
        return token

    @classmethod
    def fresh(
        cls, fingerprint: str, now: datetime, lease: timedelta, retention: timedelta
    ) -> ClaimRecord:
        """A pending record leased until ``now + lease``, kept ``retention``."""
        return cls(
            {
                "fingerprint": fingerprint,
                "state": PENDING,
                "token": uuid.uuid4().hex,
                "lease_expires_at": now + lease,
                "expires_at": now + retention,
            }
        )


def insert_claim(
    dialect: str, scope: str, key: str, record: ClaimRecord, now: datetime
) -> ReturningInsert[str]:
    """``INSERT ... ON CONFLICT (scope, key) DO NOTHING RETURNING token``.

    It returns a row when it inserted one (a driver's row count is not reliable
    for an insert).
    """
    insert = sqlite.insert if dialect == "sqlite" else postgresql.insert
    statement = insert(idempotency_table).values(
        scope=scope, key=key, created_at=now, **record.values
    )
    return statement.on_conflict_do_nothing(index_elements=["scope", "key"]).returning(
        _C.token
    )


def read_record(scope: str, key: str, *, lock: bool = True) -> Select[*tuple[Any, ...]]:
    """The record of (scope, key), locked on PostgreSQL (``FOR UPDATE``).

    SQLite has no row locks; there the claim's transaction holds the database's
    write lock from its insert on. Without `lock`, a plain read (for a
    connection in autocommit, where a row lock would end with the statement).
    """
    read = select(
        _C.fingerprint,
        _C.state,
        _C.token,
        _C.outcome_kind,
        _C.outcome_type,
        _C.outcome_payload,
        _C.lease_expires_at,
        _C.expires_at,
    ).where(_C.scope == scope, _C.key == key)
    return read.with_for_update() if lock else read


def decide(
    found: Any, fingerprint: str, now: datetime, record: ClaimRecord
) -> Claim | dict[str, Any]:
    """What a claim answers for the record `found`, or the values to take it over.

    A record past its retention (and not under a running lease) counts as
    absent: it is replaced by `record`, whatever its fingerprint, so the
    answer does not depend on when `purge_expired` last ran. Otherwise a
    mismatch first, then a replay, an in-flight claim, or an expired lease
    taken over (`record`'s token, lease and retention).
    """
    if expired(found.state, found.lease_expires_at, found.expires_at, now):
        return {**record.values, "created_at": now, **_NO_OUTCOME}
    if found.fingerprint != fingerprint:
        return Claim("mismatch")
    if found.state == COMPLETED:
        return Claim(
            "replay",
            outcome=StoredOutcome(
                found.outcome_kind, found.outcome_type, found.outcome_payload
            ),
        )
    if found.lease_expires_at > now:
        return Claim("in_flight")
    return record.values


def expired(
    state: str, lease_expires_at: datetime, expires_at: datetime, now: datetime
) -> bool:
    """Whether a record's retention ended by `now`, with no lease of it running."""
    return expires_at <= now and (state == COMPLETED or lease_expires_at <= now)


def _held(scope: str, key: str, token: str, state: str) -> tuple[Any, ...]:
    return (_C.scope == scope, _C.key == key, _C.token == token, _C.state == state)


def take_over(
    scope: str, key: str, token: str, state: str, values: dict[str, Any]
) -> Update:
    """Overwrite the record still held under `token` in `state` with `values`."""
    return (
        update(idempotency_table)
        .where(*_held(scope, key, token, state))
        .values(**values)
    )


def completion(
    scope: str, key: str, token: str, outcome: StoredOutcome, now: datetime
) -> Update:
    """Complete the record still pending under `token`, with `outcome`."""
    return take_over(
        scope,
        key,
        token,
        PENDING,
        {
            "state": COMPLETED,
            "outcome_kind": outcome.kind,
            "outcome_type": outcome.type_name,
            "outcome_payload": outcome.payload,
            "completed_at": now,
        },
    )


def release(scope: str, key: str, token: str) -> Delete:
    """Delete the record still pending under `token`."""
    return delete(idempotency_table).where(*_held(scope, key, token, PENDING))


def purge(now: datetime) -> Delete:
    """Delete the records past their retention, except under a running lease."""
    return delete(idempotency_table).where(
        _C.expires_at <= now, (_C.state == COMPLETED) | (_C.lease_expires_at <= now)
    )
