"""Issue 16's proof, end to end: the mediator (`use_defaults()`, so
`IdempotencyBehavior` and the unit of work), the real SQLAlchemy store, SQLite (a
file) and PostgreSQL, and the web stack (`IdempotencyKeyMiddleware`,
`DomainErrorMiddleware`) over `httpx.ASGITransport`.

The effect of a send is one row its handler writes in the unit of work's
transaction (`proof_effects`): every test counts those rows. Time moves by a
`MovableClock` bound as the `WallClock`; real time passes only where processes or
tasks really run at once, and where SQLite's lock wait is the thing shown.
"""

from __future__ import annotations

import asyncio
import multiprocessing
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from queue import Empty
from typing import Any

import anyio
import httpx
import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from mediator import (
    ConflictError,
    Mediator,
    Principal,
    ValidationError,
    acting_as,
    idempotency_key,
    is_replay,
)
from mediator.sqlalchemy import idempotency_table
from tests.integration.idempotency_proof_app import (
    CRASH_EXIT_CODE,
    LEASE,
    START,
    Hooks,
    MovableClock,
    PlaceOrder,
    PlaceOrderSync,
    build_mediator,
    crash_after_write,
    create_app,
    effects,
    effects_metadata,
    send_at_once,
)

pytestmark = pytest.mark.anyio

TASKS = 50
PROCESSES = 8
KEY = "order-7f3a"
BAD_KEYS = {
    "empty": "",
    "10 KB": "k" * 10_240,
    "non-ASCII": "clé-7f3a",
    "NUL": "a\x00b",
    "newline": "a\nb",
    "tab": "a\tb",
    "DEL": "a\x7fb",
    "space": "a b",
}


@dataclass(frozen=True)
class Database:
    dialect: str
    url: str
    async_url: str
    engine: sa.Engine

    def effects(self) -> list[tuple[int, str]]:
        """The committed effects: (order id, sku)."""
        with self.engine.connect() as connection:
            rows = connection.execute(
                sa.select(effects.c.id, effects.c.sku).order_by(effects.c.id)
            )
            return [(row.id, row.sku) for row in rows]

    def records(self) -> list[Any]:
        """The idempotency store's records."""
        with self.engine.connect() as connection:
            return list(connection.execute(sa.select(idempotency_table)))


def _drop(engine: sa.Engine) -> None:
    idempotency_table.metadata.drop_all(engine)
    effects_metadata.drop_all(engine)


@pytest.fixture(params=["sqlite", "postgresql"])
def database(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Database]:
    """Empty tables on a SQLite file or the test PostgreSQL; dropped afterwards."""
    if request.param == "sqlite":
        path = tmp_path / "proof.db"
        url, async_url = f"sqlite:///{path}", f"sqlite+aiosqlite:///{path}"
    else:
        url = async_url = str(request.getfixturevalue("postgres_url"))
    engine = sa.create_engine(url)
    _drop(engine)
    idempotency_table.metadata.create_all(engine)
    effects_metadata.create_all(engine)
    try:
        yield Database(str(request.param), url, async_url, engine)
    finally:
        _drop(engine)
        engine.dispose()


@pytest.fixture
async def async_engine(database: Database) -> AsyncIterator[AsyncEngine]:
    """The database's async engine (aiosqlite, async psycopg), default pool."""
    engine = create_async_engine(database.async_url)
    try:
        yield engine
    finally:
        await engine.dispose()


async def _send(mediator: Mediator, request: Any) -> str:
    """How one send ended: ``created <id>``, ``replayed <id>``, ``conflict``, or
    ``error <repr>`` (which no test accepts)."""
    try:
        order = await mediator.send(request)
    except ConflictError:
        return "conflict"
    except Exception as error:
        return f"error {error!r}"
    return f"{'replayed' if is_replay() else 'created'} {order}"


def _check_one_effect(
    database: Database, outcomes: list[str], *, transient: bool = False
) -> int:
    """One ``created``; every other outcome a replay of it or a conflict (or, with
    `transient`, a `TransientDatabaseError`); one row."""
    kinds = Counter(outcome.split(" ", 1)[0] for outcome in outcomes)
    allowed = {"created", "replayed", "conflict"}
    if transient:
        allowed.add("transient")
    assert set(kinds) <= allowed, outcomes
    [created] = [o for o in outcomes if o.startswith("created ")]
    order = int(created.split()[1])
    assert {o for o in outcomes if o.startswith("replayed ")} <= {f"replayed {order}"}
    assert [order_id for order_id, _ in database.effects()] == [order]
    [record] = database.records()
    assert record.state == "completed"
    return order


# --- 1. fifty concurrent duplicates ---------------------------------------------------


async def test_fifty_concurrent_duplicates_take_effect_once(
    database: Database, async_engine: AsyncEngine
) -> None:
    mediator = build_mediator(async_engine=async_engine)

    with anyio.fail_after(60):
        outcomes = await asyncio.gather(
            *(
                _send(mediator, PlaceOrder(request_id=KEY, sku="A"))
                for _ in range(TASKS)
            )
        )

    order = _check_one_effect(database, outcomes)
    print(database.dialect, Counter(o.split(" ", 1)[0] for o in outcomes))
    # Once the storm is over, the key replays.
    assert await _send(mediator, PlaceOrder(request_id=KEY, sku="A")) == (
        f"replayed {order}"
    )


@pytest.mark.parametrize("keep_answers", [True, False], ids=["http-store", "mediator"])
async def test_fifty_concurrent_duplicate_posts_take_effect_once(
    database: Database, async_engine: AsyncEngine, keep_answers: bool
) -> None:
    """With the middleware keeping answers, a duplicate is answered by it (its
    replay, or its 409); without, by the mediator (a 409 from `ConflictError`
    through `DomainErrorMiddleware`, or the command's stored response)."""
    mediator = build_mediator(async_engine=async_engine)
    app = create_app(mediator, async_engine, keep_answers=keep_answers)
    transport = httpx.ASGITransport(app=app)
    headers = {"Idempotency-Key": KEY}

    async with httpx.AsyncClient(transport=transport, base_url="http://shop") as client:

        async def post() -> httpx.Response | BaseException:
            try:
                return await client.post("/orders", json={"sku": "A"}, headers=headers)
            except Exception as error:
                return error

        with anyio.fail_after(60):
            answers = await asyncio.gather(*(post() for _ in range(TASKS)))
        errors = [a for a in answers if not isinstance(a, httpx.Response)]
        assert errors == []
        responses = [a for a in answers if isinstance(a, httpx.Response)]
        statuses = Counter(r.status_code for r in responses)
        assert set(statuses) <= {201, 409}, statuses
        created = [r for r in responses if r.status_code == 201]
        [order] = {r.json()["order"] for r in created}
        replayed = sum(r.headers.get("Idempotent-Replayed") == "true" for r in created)
        if keep_answers:
            assert replayed == len(created) - 1
        else:
            assert replayed == 0
        for conflict in (r for r in responses if r.status_code == 409):
            assert conflict.headers["content-type"] == "application/problem+json"
        print(database.dialect, keep_answers, statuses, "replayed:", replayed)

        again = await client.post("/orders", json={"sku": "A"}, headers=headers)
        assert (again.status_code, again.json()) == (201, {"order": order})

    assert [order_id for order_id, _ in database.effects()] == [order]
    states = Counter(record.state for record in database.records())
    # The command's record, and with `keep_answers` the HTTP answer's.
    assert states == {"completed": 2 if keep_answers else 1}


# --- 2. eight processes at once -------------------------------------------------------


@pytest.mark.chaos  # load: eight processes at once (make chaos)
@pytest.mark.timeout(180)
@pytest.mark.parametrize("held", [False, True], ids=["free", "held"])
def test_eight_processes_sending_one_key_at_once_take_effect_once(
    database: Database, held: bool
) -> None:
    """`held`: the handler waits, inside its transaction after its write, until
    the seven others have answered.

    Each of them met the claim in flight (409), none a replay. On SQLite the
    first send's unit of work holds the write lock while its handler runs; a
    duplicate's claim reads the committed claim first, without the lock (WAL),
    so it answers in flight at once instead of queueing behind it.
    """
    sqlite = database.dialect == "sqlite"
    context = multiprocessing.get_context("spawn")
    start = context.Barrier(PROCESSES)
    answers = context.Queue()
    others_answered = context.Event() if held else None
    busy_timeout = 0.5 if held and sqlite else None
    arguments = (START.isoformat(), KEY, start, answers, others_answered, busy_timeout)
    workers = [
        context.Process(target=send_at_once, args=(database.url, *arguments))
        for _ in range(PROCESSES)
    ]
    for worker in workers:
        worker.start()
    outcomes: list[str] = []
    try:
        for _ in workers:
            outcomes.append(answers.get(timeout=120))
            if others_answered is not None and len(outcomes) == PROCESSES - 1:
                others_answered.set()
    except Empty:
        pass
    finally:
        for worker in workers:
            worker.join(timeout=30)
        for worker in workers:
            if worker.is_alive():
                worker.kill()
                worker.join()
        answers.close()

    assert len(outcomes) == PROCESSES, outcomes
    _check_one_effect(database, outcomes, transient=False)
    kinds = Counter(o.split(" ", 1)[0] for o in outcomes)
    print(database.dialect, held, kinds)
    if held:
        assert kinds == {"created": 1, "conflict": PROCESSES - 1}
    assert [worker.exitcode for worker in workers] == [0] * PROCESSES


# --- 3. a crash between the claim and the completion ----------------------------------


@pytest.mark.timeout(120)
def test_a_crash_before_the_commit_leaves_no_effect_and_the_key_runs_after_the_lease(
    database: Database,
) -> None:
    crash = multiprocessing.get_context("spawn").Process(
        target=crash_after_write, args=(database.url, START.isoformat(), KEY)
    )
    crash.start()
    crash.join(timeout=90)
    if crash.is_alive():  # pragma: no cover - a hang, reported below
        crash.kill()
        crash.join()
    assert crash.exitcode == CRASH_EXIT_CODE

    # The crashed send wrote its row but never committed: a pending claim, no effect.
    [record] = database.records()
    assert record.state == "pending"
    assert database.effects() == []

    clock = MovableClock(START + timedelta(seconds=1))
    mediator = build_mediator(engine=database.engine, clock=clock)
    request = PlaceOrderSync(request_id=KEY, sku="crashed")
    with pytest.raises(ConflictError):  # the lease still runs
        mediator.send_sync(request)

    clock.advance(LEASE)
    order = mediator.send_sync(request)
    assert is_replay() is False
    assert database.effects() == [(order, "crashed")]
    assert mediator.send_sync(request) == order
    assert is_replay() is True
    [record] = database.records()
    assert record.state == "completed"


async def _race(
    database: Database,
    async_engine: AsyncEngine,
    *,
    hold_in_transaction: bool,
) -> tuple[asyncio.Task[int], str, MovableClock, Mediator]:
    """Send A holds its claim until released; the clock passes the lease; send B.

    `hold_in_transaction`: A is held by its handler, after its write, inside its
    open transaction; else by `Gate`, after the claim, before the transaction.
    Returns A's task (still held), how B ended, the clock and the mediator.
    """
    held, release = asyncio.Event(), asyncio.Event()
    holds = 0

    async def hold_first() -> None:
        nonlocal holds
        holds += 1
        if holds == 1:
            held.set()
            await release.wait()

    hooks = (
        Hooks(after_write=hold_first)
        if hold_in_transaction
        else Hooks(before_transaction=hold_first)
    )
    clock = MovableClock()
    mediator = build_mediator(async_engine=async_engine, clock=clock, hooks=hooks)
    request = PlaceOrder(request_id=KEY, sku="A")
    a = asyncio.create_task(mediator.send(request))
    with anyio.fail_after(30):
        await held.wait()
    clock.advance(LEASE + timedelta(seconds=1))
    try:
        with anyio.fail_after(30):
            b = await _send(mediator, request)
    finally:
        release.set()
    return a, b, clock, mediator


async def test_a_send_that_lost_its_claim_before_its_transaction_rolls_back(
    database: Database, async_engine: AsyncEngine
) -> None:
    a, b, _, mediator = await _race(database, async_engine, hold_in_transaction=False)

    assert b.startswith("created ")
    order = int(b.split()[1])
    with anyio.fail_after(30), pytest.raises(ConflictError, match="claim was lost"):
        await a
    assert database.effects() == [(order, "A")]
    request = PlaceOrder(request_id=KEY, sku="A")
    assert await _send(mediator, request) == f"replayed {order}"


async def test_a_send_that_lost_its_claim_inside_its_transaction_rolls_back(
    database: Database, async_engine: AsyncEngine
) -> None:
    """A holds an open transaction (its row written) when its lease runs out.

    PostgreSQL: B takes the key over, commits its effect; A's completion finds
    the claim lost and A rolls back. SQLite cannot run that race: A's unit of
    work holds the database's write lock (``BEGIN IMMEDIATE``), so B's claim
    waits behind it, past its busy timeout (shortened here), and fails as
    transient (a 503 over HTTP). B never takes over; A commits. Either way,
    one committed effect.
    """
    if database.dialect == "sqlite":
        await async_engine.dispose()
        async_engine = create_async_engine(
            database.async_url, connect_args={"timeout": 0.3}
        )
    try:
        a, b, _, mediator = await _race(
            database, async_engine, hold_in_transaction=True
        )
        request = PlaceOrder(request_id=KEY, sku="A")
        if database.dialect == "postgresql":
            assert b.startswith("created ")
            order = int(b.split()[1])
            with anyio.fail_after(30), pytest.raises(ConflictError):
                await a
        else:
            assert b.startswith("error TransientDatabaseError("), b
            with anyio.fail_after(30):
                order = await a
        assert database.effects() == [(order, "A")]
        assert await _send(mediator, request) == f"replayed {order}"
    finally:
        if database.dialect == "sqlite":
            await async_engine.dispose()


# --- 4. cross-tenant ------------------------------------------------------------------


async def test_one_key_in_two_tenants_is_two_operations(
    database: Database, async_engine: AsyncEngine
) -> None:
    mediator = build_mediator(async_engine=async_engine)
    request = PlaceOrder(request_id=KEY, sku="A")
    outcomes: list[str] = []
    callers = (("ada", "t-1"), ("bob", "t-2"), ("eve", "t-1"), ("ada", "t-1"))
    for user, tenant in callers:
        with acting_as(Principal(user, claims={"tenant": tenant})):
            outcomes.append(await _send(mediator, request))

    ada, bob, eve = (int(o.split()[1]) for o in outcomes[:3])
    assert outcomes == [
        f"created {ada}",
        f"created {bob}",
        f"created {eve}",  # another user of t-1: another operation
        f"replayed {ada}",
    ]
    assert [order for order, _ in database.effects()] == [ada, bob, eve]
    assert len({record.scope for record in database.records()}) == 3


async def test_one_key_posted_by_two_tenants_is_two_requests(
    database: Database, async_engine: AsyncEngine
) -> None:
    mediator = build_mediator(async_engine=async_engine)
    app = create_app(mediator, async_engine, keep_answers=True)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://shop") as client:
        answers = [
            await client.post(
                "/orders",
                json={"sku": "A"},
                headers={"Idempotency-Key": KEY, "X-User": user},
            )
            for user in ("ada/t-1", "bob/t-2", "eve/t-1", "ada/t-1")
        ]

    assert [a.status_code for a in answers] == [201, 201, 201, 201]
    assert [a.headers.get("Idempotent-Replayed") for a in answers] == [
        None,
        None,
        None,
        "true",
    ]
    ada, bob, eve, again = (a.json()["order"] for a in answers)
    assert len({ada, bob, eve}) == 3
    assert again == ada
    assert [order for order, _ in database.effects()] == [ada, bob, eve]
    # The HTTP answer's and the command's, for each of the three callers.
    assert len({record.scope for record in database.records()}) == 6


# --- 5. bad keys ----------------------------------------------------------------------


@pytest.mark.parametrize("bad", list(BAD_KEYS.values()), ids=list(BAD_KEYS))
async def test_a_bad_key_is_refused_and_nothing_is_stored(
    database: Database, async_engine: AsyncEngine, bad: str
) -> None:
    mediator = build_mediator(async_engine=async_engine)

    with pytest.raises(ValidationError) as in_field:
        await mediator.send(PlaceOrder(request_id=bad, sku="A"))
    assert in_field.value.errors[0].path == ("request_id",)
    with idempotency_key(bad), pytest.raises(ValidationError) as in_context:
        await mediator.send(PlaceOrder(sku="A"))
    assert in_context.value.errors[0].path == ("idempotency_key",)

    for keep_answers in (True, False):
        app = create_app(mediator, async_engine, keep_answers=keep_answers)
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(
            transport=transport, base_url="http://shop"
        ) as client:
            header = await client.post(
                "/orders",
                json={"sku": "A"},
                headers=[(b"Idempotency-Key", bad.encode("utf-8"))],
            )
            field = await client.post(
                "/orders-by-field", json={"request_id": bad, "sku": "A"}
            )
        assert header.status_code == 400
        assert header.headers["content-type"] == "application/problem+json"
        assert bad not in header.text or bad == ""
        # The key in the body reaches the mediator: its ValidationError, a 422.
        assert field.status_code == 422
        assert field.json()["errors"][0]["field"] == "request_id"

    assert database.records() == []
    assert database.effects() == []


@pytest.mark.parametrize("keep_answers", [True, False], ids=["http-store", "mediator"])
async def test_a_duplicate_post_while_the_first_runs_its_transaction(
    database: Database, async_engine: AsyncEngine, keep_answers: bool
) -> None:
    """A 409, from the middleware or from the mediator, on both databases.

    On SQLite the duplicate's claim reads the committed claim without the
    write lock the first request's open transaction holds (busy timeout
    shortened here to 0.3 s, so a claim that queued behind it would fail).
    """
    held, release = asyncio.Event(), asyncio.Event()

    async def hold() -> None:
        held.set()
        await release.wait()

    sqlite = database.dialect == "sqlite"
    if sqlite:
        await async_engine.dispose()
        async_engine = create_async_engine(
            database.async_url, connect_args={"timeout": 0.3}
        )
    mediator = build_mediator(async_engine=async_engine, hooks=Hooks(after_write=hold))
    app = create_app(mediator, async_engine, keep_answers=keep_answers)
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    headers = {"Idempotency-Key": KEY}
    try:
        async with httpx.AsyncClient(
            transport=transport, base_url="http://shop"
        ) as client:
            first = asyncio.create_task(
                client.post("/orders", json={"sku": "A"}, headers=headers)
            )
            try:
                with anyio.fail_after(30):
                    await held.wait()
                    duplicate = await client.post(
                        "/orders", json={"sku": "A"}, headers=headers
                    )
            finally:
                release.set()
            with anyio.fail_after(30):
                answer = await first
            again = await client.post("/orders", json={"sku": "A"}, headers=headers)
    finally:
        if sqlite:
            await async_engine.dispose()

    assert duplicate.status_code == 409, duplicate.text
    assert duplicate.headers["content-type"] == "application/problem+json"
    # The mediator's 409 is any ConflictError's, with no Retry-After.
    assert ("retry-after" in duplicate.headers) == keep_answers
    assert answer.status_code == 201
    assert (again.status_code, again.json()) == (201, answer.json())
    [(order, _)] = database.effects()
    assert answer.json() == {"order": order}
