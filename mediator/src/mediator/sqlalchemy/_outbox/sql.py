"""What the relay says to the database: each step one short transaction.

Every function here runs on a sync `Connection` inside a transaction the
caller began; the async relay runs them through `AsyncConnection.run_sync`.
Each update of a claimed message is fenced by the claim's lease token, so a
relay whose lease ran out (and whose message another relay took) changes
nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Final

from sqlalchemy import (
    Connection,
    and_,
    delete,
    exists,
    func,
    or_,
    select,
    update,
)

from mediator._dispatch.outbox import OutboxEntry, OutboxKind
from mediator.sqlalchemy._outbox.table import DEAD, DELIVERED, PENDING, outbox_table

__all__ = [
    "Claimed",
    "OutboxMessage",
    "OutboxStats",
    "claim",
    "dead_messages",
    "finish",
    "purge_delivered",
    "read_stats",
    "redeliver",
    "renew",
]

_O: Final = outbox_table
_C: Final = outbox_table.c
_EARLIER: Final = outbox_table.alias("earlier")


@dataclass(frozen=True, slots=True)
class OutboxMessage:
    """One message of the outbox, as a relay or an operator sees it.

    Attributes:
        id: The message id, its idempotency key when delivered.
        kind: ``"send"`` (a command) or ``"publish"`` (a notification).
        message_type: Its class, ``"module:QualName"``.
        payload: The message as JSON.
        ordering_key: Its ordering key, or None.
        state: ``"pending"``, ``"delivered"`` or ``"dead"``.
        attempts: Deliveries begun (claims), including one running now.
        created_at: When its transaction recorded it.
        next_attempt_at: When it is due (pending), or was last due.
        finished_at: When it was delivered or went dead, else None.
        last_error: What the last failed delivery raised, redacted as audit
            records are (the type name; a domain error's message), or None.
        principal: Who recorded it, as JSON, or None.
        correlation_id: Its correlation id, or None.
    """

    id: str
    kind: OutboxKind
    message_type: str
    payload: str
    ordering_key: str | None
    state: str
    attempts: int
    created_at: datetime
    next_attempt_at: datetime
    finished_at: datetime | None
    last_error: str | None
    principal: str | None
    correlation_id: str | None

    @property
    def entry(self) -> OutboxEntry:
        """What was recorded: enough to deliver it."""
        return OutboxEntry(
            id=self.id,
            kind=self.kind,
            message_type=self.message_type,
            payload=self.payload,
            ordering_key=self.ordering_key,
            principal=self.principal,
            correlation_id=self.correlation_id,
            created_at=self.created_at,
        )


@dataclass(frozen=True, slots=True)
class OutboxStats:
    """The outbox at one moment: what an operator watches.

    Attributes:
        pending: Messages not delivered yet (including those in flight).
        in_flight: Pending messages a relay holds a lease on now.
        dead: Messages that will not be tried again until `redeliver`.
        oldest_pending_age: How long the oldest pending message has waited
            (the delivery lag), or None when nothing is pending.
        read_at: When this was read.
    """

    pending: int
    in_flight: int
    dead: int
    oldest_pending_age: timedelta | None
    read_at: datetime


_COLUMNS: Final = (
    _C.seq,
    _C.id,
    _C.kind,
    _C.message_type,
    _C.payload,
    _C.ordering_key,
    _C.state,
    _C.attempts,
    _C.created_at,
    _C.next_attempt_at,
    _C.finished_at,
    _C.last_error,
    _C.principal,
    _C.correlation_id,
)


@dataclass(frozen=True, slots=True)
class Claimed:
    """A message a relay claimed: its row number and what it holds."""

    seq: int
    message: OutboxMessage


def _message(row: Any) -> OutboxMessage:  # a Row of _COLUMNS
    return OutboxMessage(
        id=row.id,
        kind=row.kind,
        message_type=row.message_type,
        payload=row.payload,
        ordering_key=row.ordering_key,
        state=row.state,
        attempts=row.attempts,
        created_at=row.created_at,
        next_attempt_at=row.next_attempt_at,
        finished_at=row.finished_at,
        last_error=row.last_error,
        principal=row.principal,
        correlation_id=row.correlation_id,
    )


def claim(
    connection: Connection,
    *,
    now: datetime,
    batch: int,
    lease: timedelta,
    token: str,
) -> list[Claimed]:
    """Lease up to `batch` due messages to `token`, oldest first.

    A message is due when pending, its next attempt time reached, and no lease
    on it runs; one with an ordering key only when no earlier message of its
    key is pending (a dead one does not hold its key back). On PostgreSQL the
    rows are read ``FOR UPDATE SKIP LOCKED``: another relay claiming at the
    same moment takes other rows, never these. On SQLite the transaction holds
    the write lock from its start.
    """
    earlier = (
        exists()
        .where(
            _EARLIER.c.ordering_key == _C.ordering_key,
            _EARLIER.c.state == PENDING,
            _EARLIER.c.seq < _C.seq,
        )
        .correlate(_O)
    )
    due = (
        select(_C.seq)
        .where(
            _C.state == PENDING,
            _C.next_attempt_at <= now,
            or_(_C.lease_expires_at.is_(None), _C.lease_expires_at <= now),
            or_(_C.ordering_key.is_(None), ~earlier),
        )
        .order_by(_C.seq)
        .limit(batch)
    )
    if connection.dialect.name == "postgresql":
        due = due.with_for_update(skip_locked=True, of=_O)
    seqs = list(connection.execute(due).scalars())
    if not seqs:
        return []
    rows = connection.execute(
        update(_O)
        .where(_C.seq.in_(seqs))
        .values(
            lease_token=token,
            lease_expires_at=now + lease,
            attempts=_C.attempts + 1,
        )
        .returning(*_COLUMNS)
    ).all()
    claimed = [Claimed(row.seq, _message(row)) for row in rows]
    claimed.sort(key=lambda found: found.seq)
    return claimed


def renew(
    connection: Connection,
    *,
    seqs: list[int],
    token: str,
    now: datetime,
    lease: timedelta,
) -> int:
    """Extend the lease of the messages `token` still holds; how many."""
    if not seqs:
        return 0
    return connection.execute(
        update(_O)
        .where(_C.seq.in_(seqs), _C.lease_token == token, _C.state == PENDING)
        .values(lease_expires_at=now + lease)
    ).rowcount


def finish(
    connection: Connection,
    *,
    seq: int,
    token: str,
    state: str,
    now: datetime,
    next_attempt_at: datetime | None = None,
    error: str | None = None,
) -> bool:
    """Record a delivery's outcome, if `token` still holds the message.

    `state` delivered or dead finishes it; pending schedules it again at
    `next_attempt_at`. The lease is released either way. False when the lease
    was lost (it ran out and another relay took the message).
    """
    values: dict[str, Any] = {
        "state": state,
        "lease_token": None,
        "lease_expires_at": None,
    }
    if state == PENDING:
        values["next_attempt_at"] = next_attempt_at
    else:
        values["finished_at"] = now
    if error is not None:
        values["last_error"] = error
    done = connection.execute(
        update(_O)
        .where(_C.seq == seq, _C.lease_token == token, _C.state == PENDING)
        .values(**values)
    )
    return done.rowcount == 1


def read_stats(connection: Connection, *, now: datetime) -> OutboxStats:
    """Counts of pending, in-flight and dead messages, and the oldest pending's age."""
    in_flight = and_(_C.lease_expires_at.is_not(None), _C.lease_expires_at > now)
    rows = connection.execute(
        select(
            _C.state,
            func.count(),
            func.count().filter(in_flight),
            func.min(_C.created_at),
        )
        .where(_C.state != DELIVERED)
        .group_by(_C.state)
    ).all()
    counts = {row[0]: row for row in rows}
    pending = counts.get(PENDING)
    dead = counts.get(DEAD)
    oldest: datetime | None = None if pending is None else pending[3]
    return OutboxStats(
        pending=0 if pending is None else int(pending[1]),
        in_flight=0 if pending is None else int(pending[2]),
        dead=0 if dead is None else int(dead[1]),
        oldest_pending_age=None if oldest is None else max(now - oldest, timedelta(0)),
        read_at=now,
    )


def dead_messages(connection: Connection, *, limit: int) -> list[OutboxMessage]:
    """The dead messages, oldest first, at most `limit`."""
    rows = connection.execute(
        select(*_COLUMNS).where(_C.state == DEAD).order_by(_C.seq).limit(limit)
    ).all()
    return [_message(row) for row in rows]


def redeliver(connection: Connection, *, message_id: str, now: datetime) -> bool:
    """Make a dead message pending again, due now, with a fresh attempt count.

    False when there is no dead message of that id (unknown, pending or
    delivered: a delivered message is not sent twice by this call).
    """
    done = connection.execute(
        update(_O)
        .where(_C.id == message_id, _C.state == DEAD)
        .values(
            state=PENDING,
            attempts=0,
            next_attempt_at=now,
            finished_at=None,
            lease_token=None,
            lease_expires_at=None,
        )
    )
    return done.rowcount == 1


def purge_delivered(connection: Connection, *, before: datetime) -> int:
    """Delete the messages delivered before `before`; how many."""
    return connection.execute(
        delete(_O).where(_C.state == DELIVERED, _C.finished_at < before)
    ).rowcount
