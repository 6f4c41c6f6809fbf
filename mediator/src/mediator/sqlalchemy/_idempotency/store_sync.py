# Generated from store.py by tools/unasync.py; do not edit.
# Edit the async source and run `python tools/unasync.py`.
"""The idempotency store on SQLAlchemy, sync.

Generated from `mediator.sqlalchemy._idempotency.store` by ``tools/unasync.py``:
edit that one and run the script.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any, Final

from sqlalchemy import Connection, Engine, exc
from sqlalchemy.orm import Session

from mediator._behaviors.idempotency.store import Claim, StoredOutcome
from mediator._core.errors import ConflictError, TransientDatabaseError
from mediator.sqlalchemy._errors import translate_error
from mediator.sqlalchemy._first_write import remaining_time_of
from mediator.sqlalchemy._idempotency.sql import (
    ClaimCall,
    ClaimRecord,
    check_claim,
    check_time,
    claim_options,
    completion,
    decide,
    insert_claim,
    own_options,
    purge,
    read_record,
    release,
    statement_options,
    take_over,
)
from mediator.sqlalchemy._idempotency.table import check_kind, ensure_table
from mediator.sqlalchemy._sqlite import IMMEDIATE, take_gate_now

__all__ = ["SqlAlchemyIdempotencyStore"]

# A claim reads the record after its insert did nothing, and on PostgreSQL the
# record can be deleted in between (a release, a purge): it inserts again. Each
# further round needs another such delete.
_CLAIM_ROUNDS: Final = 8


class SqlAlchemyIdempotencyStore:
    """The `IdempotencyStore` on a SQLite or PostgreSQL database.

    Records live in `idempotency_table`: create it with
    `create_idempotency_table`, or with the SQL migrations shipped in the
    package. `claim`, `finish`, `release` and `purge_expired` each run on a
    connection of their own from `engine`, committed before they return (a
    claim in autocommit, or one short transaction; the others in one short
    transaction); `complete` runs on `session`, inside the unit of work's
    transaction. `SqlAlchemyModule` binds one per send, with the send's session.

    The first of those on an engine checks, once per engine and process, that
    the table is there with its columns: a missing one is a
    `ConfigurationError` naming the table and how to create it, not a
    driver's "no such table" at the first keyed request.

    A claim is atomic: ``INSERT ... ON CONFLICT DO NOTHING RETURNING``, in
    autocommit, so a new key costs that one statement; when the key was
    there, the committed record is read and answers (a mismatch, a replay,
    in flight). Only a record to take over (its lease expired) takes a
    transaction: read again ``FOR UPDATE`` on PostgreSQL (on SQLite the
    transaction holds the write lock from its start) and taken over by a
    conditional ``UPDATE``. On SQLite, while a writer of this process holds
    the write lock (a unit of work runs its handler), the claim reads first,
    without the lock, so that a duplicate is answered at once instead of
    queueing behind it; the insert then waits for the lock. A record past its
    retention counts as absent, so what a claim answers does not depend on when
    `purge_expired` last ran. Database errors of the store's own transactions
    are classified like the unit of work's (`translate_error`): "database is
    locked" or a serialization failure raise `TransientDatabaseError`.

    On SQLite, a claim's wait for the write lock is bounded by the caller's
    deadline when `session` carries one (`SqlAlchemyModule` given
    ``remaining_time``), as a unit of work's is. `finish` and `release` are
    not: they clean up after a send, a late one included, and must not be
    refused for being late (a claim left pending would refuse its retries
    until its lease ran out).

    Args:
        engine: The database's engine, SQLite or PostgreSQL.
        session: The unit of work's session, which `complete` writes on;
            without it the store does everything but `complete`.

    Raises:
        TypeError: `engine` or `session` is of the wrong kind, or the database
            is neither SQLite nor PostgreSQL.

    Example:
        >>> from datetime import UTC, datetime, timedelta
        >>> from sqlalchemy import create_engine
        >>> from mediator.sqlalchemy import create_idempotency_table
        >>> def main() -> list[str]:
        ...     engine = create_engine("sqlite://")
        ...     create_idempotency_table(engine)
        ...     store = SqlAlchemyIdempotencyStore(engine)
        ...     now = datetime(2026, 1, 1, tzinfo=UTC)
        ...     times = {"lease": timedelta(minutes=1), "retention": timedelta(days=1)}
        ...     first = store.claim("acme|Pay", "k1", "f1", now=now, **times)
        ...     again = store.claim("acme|Pay", "k1", "f1", now=now, **times)
        ...     engine.dispose()
        ...     return [first.status, again.status]
        >>> main()
        ['claimed', 'in_flight']
    """

    def __init__(self, engine: Engine, session: Session | None = None) -> None:
        name = type(self).__qualname__
        check_kind(f"{name}(engine=...)", engine, Engine)
        check_kind(f"{name}(session=...)", session, Session, optional=True)
        self._options = own_options(name, engine.dialect.name)
        self._claim_options = claim_options(self._options, session)
        self._remaining_time = remaining_time_of(self._claim_options.get(IMMEDIATE))
        self._statement_options = statement_options(engine.dialect.name)
        self._dialect = engine.dialect.name
        self._engine = engine
        self._session = session

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
        """Claim (scope, key) for one send, committed before it returns.

        See `mediator.IdempotencyStore.claim`.

        Raises:
            ValueError: `now` is naive, or `lease` or `retention` is not
                positive.
            ConfigurationError: The table is missing or lacks columns.
            TransientDatabaseError: The database refused for now (SQLite
                locked past its busy timeout, a serialization failure, a
                dropped connection).
            DeadlineExceededError: On SQLite, the caller's deadline passed
                while waiting for the write lock (`SqlAlchemyModule`'s
                ``remaining_time``, read from the session).
        """
        check_claim(now, lease, retention)
        call = ClaimCall(scope, key, fingerprint, now, lease, retention)
        try:
            ensure_table(self._engine)
            with self._engine.connect() as connection:
                connection.execution_options(**self._statement_options)
                answer = self._try_claim(connection, call)
            if answer is not None:
                return answer
            with self._engine.connect() as connection:
                connection.execution_options(**self._claim_options)
                with connection.begin():
                    return self._claim(connection, call)
        except exc.DBAPIError as error:
            translated = translate_error(error)
            if translated is error:
                raise
            if self._dialect == "sqlite" and isinstance(
                translated, TransientDatabaseError
            ):
                # The write lock stayed taken past the busy timeout: a unit of
                # work is running, most likely the one that claimed this key
                # a moment ago. What it committed answers, if anything.
                known = self._known(call)
                if known is not None:
                    return known
            raise translated from error

    def _try_claim(self, connection: Connection, call: ClaimCall) -> Claim | None:
        """The claim in autocommit: the insert, and a read only when the key is there.

        None when the claim needs the locked transaction (`_claim`): the
        record is to be taken over, was deleted since the insert, or, on
        SQLite, the write lock could not be tried at once. On SQLite the
        insert runs only with the database file's gate free: a writer of this
        process holding the write lock (a unit of work, as long as its
        handler runs) would make it queue, and a duplicate must see the
        committed claim (in flight) or its outcome (replay) at once: so then
        it reads first, without the lock (in WAL mode a reader is never
        blocked by the writer).
        """
        release: Callable[[], None] | None = None
        if self._dialect == "sqlite":
            release = take_gate_now(connection.info, self._remaining_time)
            if release is None:
                return self._read(connection, call)
        record = call.record()
        insert = insert_claim(self._dialect, call.scope, call.key, record, call.now)
        try:
            inserted = (connection.execute(insert)).first()
        finally:
            if release is not None:
                release()
        if inserted is not None:
            return Claim("claimed", token=record.token)
        return self._read(connection, call)

    def _known(self, call: ClaimCall) -> Claim | None:
        """What a committed record answers, read without the write lock."""
        with self._engine.connect() as connection:
            connection.execution_options(**self._statement_options)
            return self._read(connection, call)

    def _read(self, connection: Connection, call: ClaimCall) -> Claim | None:
        """What the committed record answers, read on `connection` (autocommit).

        None when there is none, or it is to be taken (new, lease expired).
        """
        read = read_record(call.scope, call.key, lock=False)
        found = (connection.execute(read)).one_or_none()
        if found is None:
            return None
        # Only an answer is used, never the values to take a record over: the
        # lease stands in for the retention.
        taking = ClaimRecord.fresh(call.fingerprint, call.now, call.lease, call.lease)
        decided = decide(found, call.fingerprint, call.now, taking)
        return decided if isinstance(decided, Claim) else None

    def _claim(self, connection: Connection, call: ClaimCall) -> Claim:
        record = call.record()
        scope, key, now = call.scope, call.key, call.now
        insert = insert_claim(self._dialect, scope, key, record, now)
        for _ in range(_CLAIM_ROUNDS):
            if (connection.execute(insert)).first() is not None:
                return Claim("claimed", token=record.token)
            found = (connection.execute(read_record(scope, key))).one_or_none()
            if found is None:
                continue  # deleted since the insert: insert again
            decided = decide(found, call.fingerprint, now, record)
            if isinstance(decided, Claim):
                return decided
            statement = take_over(scope, key, found.token, found.state, decided)
            if (connection.execute(statement)).rowcount == 1:
                return Claim("claimed", token=record.token)
        raise TransientDatabaseError(  # pragma: no cover - 8 deletes in a row
            "the idempotency record kept changing during the claim, try again"
        )

    def complete(
        self, scope: str, key: str, token: str, outcome: StoredOutcome, *, now: datetime
    ) -> None:
        """Complete the claim inside the unit of work's transaction.

        Runs on the store's session, in the transaction the unit of work
        began: the completion commits with the handler's writes, or rolls back
        with them.

        Raises:
            ConflictError: The record is no longer pending under `token` (its
                lease expired and another send took it over).
            RuntimeError: The store has no session, or its session is in no
                transaction (outside a unit of work, call `finish`).
            ValueError: `now` is naive.
        """
        check_time("now", now)
        name = type(self).__qualname__
        if self._session is None:
            raise RuntimeError(
                f"{name}.complete() writes on the unit of work's session and this "
                "store has none: build it with session=..., or call finish()"
            )
        if not self._session.in_transaction():
            raise RuntimeError(
                f"{name}.complete() runs inside the unit of work's transaction and "
                "its session is in none: outside a unit of work, call finish()"
            )
        connection = self._session.connection()
        done = connection.execute(completion(scope, key, token, outcome, now))
        if done.rowcount != 1:
            raise ConflictError(
                "the idempotency claim was lost: its lease expired and another "
                "send took the key over"
            )

    def finish(
        self, scope: str, key: str, token: str, outcome: StoredOutcome, *, now: datetime
    ) -> None:
        """Complete the claim in a transaction of its own; a lost claim is left.

        Raises:
            ValueError: `now` is naive.
            TransientDatabaseError: The database refused for now.
        """
        check_time("now", now)
        self._run(completion(scope, key, token, outcome, now))

    def release(self, scope: str, key: str, token: str) -> None:
        """Delete the record if it is still pending under `token`.

        Raises:
            TransientDatabaseError: The database refused for now.
        """
        self._run(release(scope, key, token))

    def purge_expired(self, *, now: datetime) -> int:
        """Delete the records whose retention ended by `now`; return how many.

        A pending record whose lease still runs is kept. Schedule it (daily,
        say): a record past its retention already counts as absent to `claim`,
        so purging only reclaims space.

        Raises:
            ValueError: `now` is naive.
            TransientDatabaseError: The database refused for now.
        """
        check_time("now", now)
        return self._run(purge(now))

    def _run(self, statement: Any) -> int:
        """Run `statement` in a transaction of its own; the rows it touched."""
        try:
            ensure_table(self._engine)
            with self._engine.connect() as connection:
                connection.execution_options(**self._options)
                with connection.begin():
                    return (connection.execute(statement)).rowcount
        except exc.DBAPIError as error:
            translated = translate_error(error)
            if translated is error:
                raise
            raise translated from error
