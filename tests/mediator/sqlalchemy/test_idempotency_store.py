"""The SQLAlchemy idempotency store, sync and async, on SQLite and PostgreSQL:
every claim outcome, takeover, finish, release, purge, and times kept in UTC."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.exc import DBAPIError, OperationalError

from mediator import (
    AsyncIdempotencyStore,
    Claim,
    IdempotencyStore,
    StoredOutcome,
    TransientDatabaseError,
)
from mediator.sqlalchemy import (
    AsyncSqlAlchemyIdempotencyStore,
    SqlAlchemyIdempotencyStore,
    idempotency_table,
    prepare_sqlite,
)
from mediator.sqlalchemy._sqlite import IMMEDIATE
from tests.mediator.sqlalchemy.idempotency_db import (
    KEY,
    LEASE,
    NOW,
    OTHER_PRINT,
    PRINT,
    RESPONSE,
    RETENTION,
    SCOPE,
    Backend,
    SyncAsAsync,
    claim,
    open_backend,
    sqlite_urls,
)

pytestmark = pytest.mark.anyio

ERROR = StoredOutcome(
    "error",
    "mediator._errors:BusinessRuleError",
    '{"message": "out of stock", "errors": []}',
)


def test_both_stores_satisfy_their_protocols(backend: Backend) -> None:
    assert isinstance(SqlAlchemyIdempotencyStore(backend.engine), IdempotencyStore)
    store = AsyncSqlAlchemyIdempotencyStore(backend.async_engine)
    assert isinstance(store, AsyncIdempotencyStore)


async def test_a_new_key_is_claimed_as_a_pending_record(
    store: AsyncIdempotencyStore, backend: Backend
) -> None:
    claimed = await claim(store)

    assert claimed.status == "claimed"
    assert claimed.token is not None
    assert len(claimed.token) == 32
    assert claimed.outcome is None
    [row] = backend.rows()
    assert (row.scope, row.key, row.fingerprint) == (SCOPE, KEY, PRINT)
    assert (row.state, row.token) == ("pending", claimed.token)
    assert (row.outcome_kind, row.outcome_type, row.outcome_payload) == (None,) * 3
    assert row.created_at == NOW
    assert row.lease_expires_at == NOW + LEASE
    assert row.expires_at == NOW + RETENTION
    assert row.completed_at is None
    assert row.created_at.tzinfo is UTC


async def test_a_running_claim_is_in_flight_until_its_lease_ends(
    store: AsyncIdempotencyStore,
) -> None:
    first = await claim(store)

    assert await claim(store) == Claim("in_flight")
    just_before = NOW + LEASE - timedelta(microseconds=1)
    assert await claim(store, now=just_before) == Claim("in_flight")
    taken = await claim(store, now=NOW + LEASE)
    assert taken.status == "claimed"
    assert taken.token not in (None, first.token)


async def test_a_takeover_gives_a_new_token_lease_and_retention(
    store: AsyncIdempotencyStore, backend: Backend
) -> None:
    first = await claim(store)
    later = NOW + timedelta(minutes=5)

    taken = await claim(store, now=later)

    [row] = backend.rows()
    assert row.token == taken.token != first.token
    assert row.state == "pending"
    assert row.created_at == NOW
    assert row.lease_expires_at == later + LEASE
    assert row.expires_at == later + RETENTION
    assert await claim(store, now=later) == Claim("in_flight")


async def test_a_completed_key_replays_its_outcome(
    store: AsyncIdempotencyStore, backend: Backend
) -> None:
    first = await claim(store)
    assert first.token is not None
    done = NOW + timedelta(seconds=2)
    await store.finish(SCOPE, KEY, first.token, RESPONSE, now=done)

    replay = await claim(store, now=NOW + timedelta(hours=1))

    assert replay == Claim("replay", outcome=RESPONSE)
    [row] = backend.rows()
    assert (row.state, row.token, row.completed_at) == ("completed", first.token, done)
    assert (row.outcome_kind, row.outcome_type, row.outcome_payload) == (
        "response",
        "shop:OrderPlaced",
        '{"order_id": 7}',
    )


async def test_a_domain_error_is_stored_and_replayed(
    store: AsyncIdempotencyStore,
) -> None:
    first = await claim(store)
    assert first.token is not None
    await store.finish(SCOPE, KEY, first.token, ERROR, now=NOW)

    assert await claim(store) == Claim("replay", outcome=ERROR)


async def test_another_fingerprint_is_a_mismatch_before_anything_else(
    store: AsyncIdempotencyStore,
) -> None:
    first = await claim(store)
    assert first.token is not None

    # Pending under a running lease, and after it expired: a mismatch, not a takeover.
    assert await claim(store, fingerprint=OTHER_PRINT) == Claim("mismatch")
    late = NOW + LEASE * 2
    assert await claim(store, fingerprint=OTHER_PRINT, now=late) == Claim("mismatch")
    await store.finish(SCOPE, KEY, first.token, RESPONSE, now=NOW)
    assert await claim(store, fingerprint=OTHER_PRINT) == Claim("mismatch")


async def test_finish_of_a_lost_claim_is_left_alone(
    store: AsyncIdempotencyStore, backend: Backend
) -> None:
    first = await claim(store)
    assert first.token is not None
    taken = await claim(store, now=NOW + LEASE)

    await store.finish(SCOPE, KEY, first.token, RESPONSE, now=NOW + LEASE)

    [row] = backend.rows()
    assert (row.state, row.token) == ("pending", taken.token)
    assert row.outcome_payload is None


async def test_release_gives_the_key_back_to_the_next_claim(
    store: AsyncIdempotencyStore, backend: Backend
) -> None:
    first = await claim(store)
    assert first.token is not None

    await store.release(SCOPE, KEY, first.token)

    assert backend.rows() == []
    again = await claim(store)
    assert again.status == "claimed"
    assert again.token != first.token


async def test_release_touches_only_its_own_pending_claim(
    store: AsyncIdempotencyStore, backend: Backend
) -> None:
    first = await claim(store)
    assert first.token is not None
    taken = await claim(store, now=NOW + LEASE)
    assert taken.token is not None

    await store.release(SCOPE, KEY, first.token)  # lost: nothing happens
    assert [row.token for row in backend.rows()] == [taken.token]

    await store.finish(SCOPE, KEY, taken.token, RESPONSE, now=NOW + LEASE)
    await store.release(SCOPE, KEY, taken.token)  # completed: kept
    assert await claim(store) == Claim("replay", outcome=RESPONSE)


async def test_keys_and_scopes_are_apart(store: AsyncIdempotencyStore) -> None:
    first = await claim(store)
    assert first.token is not None
    await store.finish(SCOPE, KEY, first.token, RESPONSE, now=NOW)

    other_tenant = await claim(store, scope="globex|shop.PlaceOrder")
    other_operation = await claim(store, scope="acme|shop.CancelOrder")
    other_key = await claim(store, key="order-0001", fingerprint=OTHER_PRINT)

    assert [c.status for c in (other_tenant, other_operation, other_key)] == [
        "claimed"
    ] * 3
    assert await claim(store) == Claim("replay", outcome=RESPONSE)


async def test_purge_deletes_what_retention_ended_and_keeps_running_leases(
    store: AsyncIdempotencyStore, backend: Backend
) -> None:
    short = timedelta(minutes=1)
    done = await claim(store, key="done", retention=short)
    assert done.token is not None
    await store.finish(SCOPE, "done", done.token, RESPONSE, now=NOW)
    await claim(store, key="crashed", retention=short)  # pending, lease expired
    await claim(store, key="long", lease=timedelta(hours=1), retention=short)
    await claim(store, key="recent")

    purge_at = NOW + short

    assert await store.purge_expired(now=purge_at - timedelta(microseconds=1)) == 0
    assert await store.purge_expired(now=purge_at) == 2
    assert sorted(row.key for row in backend.rows()) == ["long", "recent"]
    assert await store.purge_expired(now=purge_at) == 0
    assert await store.purge_expired(now=NOW + RETENTION) == 2
    assert backend.rows() == []


async def test_a_record_past_its_retention_counts_as_absent(
    store: AsyncIdempotencyStore, backend: Backend
) -> None:
    first = await claim(store)
    assert first.token is not None
    await store.finish(SCOPE, KEY, first.token, RESPONSE, now=NOW)
    later = NOW + RETENTION

    # Whether or not a purge ran: a new operation, whatever its fingerprint.
    fresh = await claim(store, fingerprint=OTHER_PRINT, now=later)

    assert fresh.status == "claimed"
    [row] = backend.rows()
    assert (row.state, row.fingerprint, row.token) == (
        "pending",
        OTHER_PRINT,
        fresh.token,
    )
    assert row.created_at == later
    assert row.outcome_kind is row.outcome_payload is row.completed_at is None


async def test_a_pending_record_under_a_running_lease_outlives_its_retention(
    store: AsyncIdempotencyStore,
) -> None:
    await claim(store, lease=timedelta(hours=2), retention=timedelta(hours=1))

    late = NOW + timedelta(hours=1, minutes=30)
    assert await claim(store, now=late) == Claim("in_flight")
    assert await claim(store, fingerprint=OTHER_PRINT, now=late) == Claim("mismatch")


async def test_times_in_any_zone_compare_as_utc(
    store: AsyncIdempotencyStore, backend: Backend
) -> None:
    plus_two = timezone(timedelta(hours=2))
    minus_five = timezone(timedelta(hours=-5))
    start = NOW.astimezone(plus_two)
    await claim(store, now=start)

    # 20 s after the start, written in another zone (and one that sorts first
    # as text): still in flight; 30 s after, taken over.
    in_flight = await claim(
        store, now=(NOW + timedelta(seconds=20)).astimezone(minus_five)
    )
    assert in_flight == Claim("in_flight")
    taken = await claim(store, now=(NOW + LEASE).astimezone(minus_five))
    assert taken.status == "claimed"
    [row] = backend.rows()
    assert row.lease_expires_at == NOW + 2 * LEASE
    assert row.lease_expires_at.tzinfo is UTC
    with backend.engine.connect() as connection:
        expired = connection.scalar(
            sa.select(sa.func.count()).where(
                idempotency_table.c.lease_expires_at
                <= (NOW + 2 * LEASE).astimezone(plus_two)
            )
        )
    assert expired == 1


async def test_bad_times_are_refused_before_the_database(
    store: AsyncIdempotencyStore, backend: Backend
) -> None:
    naive = datetime(2026, 3, 1, 12, 0)  # noqa: DTZ001 - the mistake under test
    with pytest.raises(ValueError, match=r"^now must be a timezone-aware datetime"):
        await claim(store, now=naive)
    with pytest.raises(ValueError, match=r"^lease must be a positive timedelta, got "):
        await claim(store, lease=timedelta(0))
    with pytest.raises(ValueError, match=r"^retention must be a positive timedelta"):
        await claim(store, retention=timedelta(seconds=-1))
    with pytest.raises(ValueError, match=r"^now must be a timezone-aware datetime"):
        await store.purge_expired(now=naive)
    with pytest.raises(ValueError, match=r"^now must be a timezone-aware datetime"):
        await store.finish(SCOPE, KEY, "token", RESPONSE, now=naive)
    assert backend.rows() == []


async def test_a_locked_sqlite_database_is_a_transient_error(tmp_path: Path) -> None:
    with open_backend("sqlite", *sqlite_urls(tmp_path / "locked.db")) as backend:
        impatient = sa.create_engine(backend.url, connect_args={"timeout": 0})
        store = SqlAlchemyIdempotencyStore(impatient)
        prepare_sqlite(impatient)
        with backend.engine.connect() as holder:
            holder.execution_options(**{IMMEDIATE: True})
            with holder.begin():  # another writer holds the lock
                for call in (
                    lambda: store.claim(
                        SCOPE, KEY, PRINT, now=NOW, lease=LEASE, retention=RETENTION
                    ),
                    lambda: store.release(SCOPE, KEY, "token"),
                    lambda: store.purge_expired(now=NOW),
                ):
                    with pytest.raises(
                        TransientDatabaseError, match="database is locked"
                    ) as refused:
                        call()
                    assert isinstance(refused.value.__cause__, OperationalError)
        assert (await claim(SyncAsAsync(store))).status == "claimed"
        impatient.dispose()


async def test_any_other_database_error_is_raised_as_it_is(
    store: AsyncIdempotencyStore, backend: Backend
) -> None:
    # Used once, the store has found its table (a missing one is a
    # ConfigurationError: test_idempotency_table_check.py); dropped behind its
    # back, the table's absence is a database error like any other.
    await store.purge_expired(now=NOW)
    idempotency_table.drop(backend.engine)

    with pytest.raises(DBAPIError):
        await claim(store)
    with pytest.raises(DBAPIError):
        await store.purge_expired(now=NOW)
