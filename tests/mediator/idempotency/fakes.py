"""An in-memory idempotency store and unit of work, sharing one fake database.

The store keeps the contract of `mediator._behaviors.idempotency.store`: `claim`,
`finish`, `release` and `purge_expired` write at once (a transaction of their
own); `complete` writes into the open transaction of the unit of work, and
refuses to run outside one; a lease that expired is taken over under a new
token, and completing a lost claim raises `ConflictError`.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from injector import Binder, CallableProvider, InstanceProvider, Module

from mediator import (
    AsyncIdempotencyStore,
    AuditRecord,
    AuditSink,
    Claim,
    ConflictError,
    IdempotencyOptions,
    IdempotencyStore,
    StoredOutcome,
    UnitOfWork,
    WallClock,
)
from mediator._behaviors.idempotency.store import AwaitedStore


class FakeWallClock:
    def __init__(self) -> None:
        self.current = datetime(2030, 1, 1, tzinfo=UTC)

    def now(self) -> datetime:
        return self.current

    def advance(self, seconds: float) -> None:
        self.current += timedelta(seconds=seconds)


@dataclass
class Record:
    fingerprint: str
    state: Literal["pending", "completed"]
    token: str
    created: datetime
    lease_until: datetime
    retain_until: datetime
    outcome: StoredOutcome | None = None


class Database:
    """Committed rows, and the writes of the one open transaction (if any)."""

    def __init__(self, journal: list[str]) -> None:
        self.journal = journal
        self.effects: list[str] = []
        self.records: dict[tuple[str, str], Record] = {}
        self.pending: list[Callable[[], None]] | None = None
        self.fail_commits = 0

    def write(self, change: Callable[[], None]) -> None:
        if self.pending is None:
            change()
        else:
            self.pending.append(change)

    def effect(self, name: str) -> None:
        self.write(lambda: self.effects.append(name))


class FakeUnitOfWork:
    def __init__(self, db: Database) -> None:
        self.db = db

    def begin(self) -> None:
        assert self.db.pending is None, "one transaction at a time"
        self.db.journal.append("begin")
        self.db.pending = []

    def commit(self) -> None:
        if self.db.fail_commits:
            self.db.fail_commits -= 1
            self.db.journal.append("commit failed")
            raise OSError("the connection dropped while committing")
        self.db.journal.append("commit")
        changes, self.db.pending = self.db.pending or [], None
        for change in changes:
            change()

    def rollback(self) -> None:
        self.db.journal.append("rollback")
        self.db.pending = None

    def savepoint(self) -> FakeSavepoint:
        return FakeSavepoint(self.db)

    def translate_error(self, error: BaseException) -> BaseException:
        return error


class FakeSavepoint:
    def __init__(self, db: Database) -> None:
        self.db = db
        self.mark = 0

    def begin(self) -> None:
        self.db.journal.append("savepoint")
        self.mark = len(self.db.pending or [])

    def commit(self) -> None:
        self.db.journal.append("release savepoint")

    def rollback(self) -> None:
        self.db.journal.append("rollback to savepoint")
        if self.db.pending is not None:
            del self.db.pending[self.mark :]

    def savepoint(self) -> FakeSavepoint:
        return FakeSavepoint(self.db)

    def translate_error(self, error: BaseException) -> BaseException:
        return error


class MemoryStore:
    """`IdempotencyStore` over the fake database; every call journaled."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self.tokens = (f"t{n}" for n in itertools.count(1))
        self.claims: list[tuple[str, str, str, timedelta, timedelta]] = []

    def claim(
        self,
        scope: str,
        key: str,
        fingerprint: str,
        *,
        now: datetime,
        lease: timedelta,
        retention: timedelta,
    ) -> Claim:
        assert now.tzinfo is not None
        self.db.journal.append("claim")
        self.claims.append((scope, key, fingerprint, lease, retention))
        record = self.db.records.get((scope, key))
        if record is not None and record.fingerprint != fingerprint:
            return Claim("mismatch")
        if record is not None and record.state == "completed":
            return Claim("replay", outcome=record.outcome)
        if record is not None and record.lease_until > now:
            return Claim("in_flight")
        token = next(self.tokens)
        self.db.records[(scope, key)] = Record(
            fingerprint, "pending", token, now, now + lease, now + retention
        )
        return Claim("claimed", token=token)

    def complete(
        self, scope: str, key: str, token: str, outcome: StoredOutcome, *, now: datetime
    ) -> None:
        self.db.journal.append("complete")
        assert self.db.pending is not None, "complete() runs in the transaction"
        record = self._held(scope, key, token)
        if record is None:
            raise ConflictError("the claim was taken over")

        def apply() -> None:
            record.state, record.outcome = "completed", outcome

        self.db.write(apply)

    def finish(
        self, scope: str, key: str, token: str, outcome: StoredOutcome, *, now: datetime
    ) -> None:
        self.db.journal.append("finish")
        record = self._held(scope, key, token)
        if record is not None:
            record.state, record.outcome = "completed", outcome

    def release(self, scope: str, key: str, token: str) -> None:
        self.db.journal.append("release")
        if self._held(scope, key, token) is not None:
            del self.db.records[(scope, key)]

    def purge_expired(self, *, now: datetime) -> int:
        expired = [k for k, r in self.db.records.items() if r.retain_until <= now]
        for k in expired:
            del self.db.records[k]
        return len(expired)

    def _held(self, scope: str, key: str, token: str) -> Record | None:
        record = self.db.records.get((scope, key))
        if record is None or record.state != "pending" or record.token != token:
            return None
        return record


# `AsyncIdempotencyStore` over the same `MemoryStore`: the behavior's own adapter.
AsyncMemoryStore = AwaitedStore


class RecordingSink:
    def __init__(self) -> None:
        self.records: list[AuditRecord] = []

    def is_enabled(self) -> bool:
        return True

    def write(self, record: AuditRecord) -> None:
        self.records.append(record)


@dataclass
class World:
    """Everything one test's mediator shares: journal, database, store, clock."""

    journal: list[str] = field(default_factory=list[str])
    clock: FakeWallClock = field(default_factory=FakeWallClock)
    sink: RecordingSink = field(default_factory=RecordingSink)
    # What a handler does besides its effect: set by a test.
    during: Callable[[Any], None] | None = None

    def __post_init__(self) -> None:
        self.db = Database(self.journal)
        self.store = MemoryStore(self.db)

    def module(
        self,
        *,
        sync_store: bool = True,
        async_store: bool = False,
        options: IdempotencyOptions | None = None,
    ) -> Module:
        world = self

        class Bindings(Module):
            def configure(self, binder: Binder) -> None:
                binder.bind(World, to=InstanceProvider(world))
                binder.bind(
                    UnitOfWork,
                    to=CallableProvider(lambda: FakeUnitOfWork(world.db)),
                )
                binder.bind(WallClock, to=InstanceProvider(world.clock))
                binder.bind(AuditSink, to=InstanceProvider(world.sink))
                if sync_store:
                    binder.bind(IdempotencyStore, to=InstanceProvider(world.store))
                if async_store:
                    binder.bind(
                        AsyncIdempotencyStore,
                        to=InstanceProvider(AsyncMemoryStore(world.store)),
                    )
                # These tests send as one caller, mostly anonymous: they opt in,
                # as a worker does. The default refusal has tests of its own.
                binder.bind(
                    IdempotencyOptions,
                    to=InstanceProvider(
                        options or IdempotencyOptions(allow_anonymous=True)
                    ),
                )

        return Bindings()


__all__ = [
    "AsyncMemoryStore",
    "Database",
    "FakeUnitOfWork",
    "FakeWallClock",
    "MemoryStore",
    "RecordingSink",
    "World",
]
