"""What `@idempotent` costs a `@transactional` command: time and round trips.

Three rows, each a `@transactional` command whose handler inserts one row into a
SQLite file database (WAL, as `SqlAlchemyModule` prepares it) and, when
``initdb`` and psycopg are found, into PostgreSQL (a throwaway cluster on
loopback, as `concurrent_orders.py` starts one), sent through a mediator built
with `use_defaults()` and `SqlAlchemyModule`:

- ``plain``: the command without the marker;
- ``idempotent, new key``: the same command marked ``@idempotent(key=...)``,
  each send with a new key (a claim, the handler, the completion);
- ``idempotent, replay``: the marked command sent again and again with one
  key that completed (the claim finds the outcome; the handler does not run).

For each row it reports the time per send (median and p99 over every send,
the rows taking turns in rounds so that a slow moment hurts them alike) and
the SQL statements per send, counted by SQLAlchemy's ``before_cursor_execute``
event (``BEGIN`` and ``BEGIN IMMEDIATE`` are statements there: the engine sends
them itself), plus the ``COMMIT`` and ``ROLLBACK`` of the ``commit`` and
``rollback`` events, and the connections checked out of the pool.

Round trips are statements plus the commits and rollbacks the driver sends:
on SQLite each is a call into the library, on a server a trip over the
network. SQLAlchemy fires ``commit`` and ``rollback`` for a connection in
autocommit too (closing one rolls back its logical transaction), where the
driver (sqlite3, psycopg 3) sends nothing, having no transaction open: those
are not round trips, and the table shows them apart (``no-op end``). The
``BEGIN`` psycopg sends by itself before the first statement of a transaction
(outside autocommit) is one, though no event shows it: it is counted as
``BEGIN (driver)``. The column ``events`` is the older count, statements plus
every commit and rollback event.

Issue 27's targets: an idempotent command costs at most two round trips over
the same command without the marker, and a replay at most two in all. The
script reports the differences and whether the targets are met; it never
fails on them. The sync path (``send_sync``) always; the async one (aiosqlite,
psycopg's async connection) when aiosqlite is installed. Run it with ``make
bench``, or from the dev ``.venv``.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import importlib
import importlib.metadata
import importlib.util
import os
import platform
import sqlite3
import statistics
import tempfile
import uuid
from collections import Counter
from collections.abc import Callable, Generator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from time import perf_counter, perf_counter_ns
from typing import Any

import sqlalchemy as sa
from injector import Binder, Injector, inject
from sqlalchemy import event
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, create_async_engine
from sqlalchemy.orm import Session

from mediator import (
    AuditSink,
    Command,
    CommandHandler,
    IdempotencyOptions,
    Mediator,
    MediatorModule,
    idempotent,
    is_replay,
    transactional,
)
from mediator.sqlalchemy import SqlAlchemyModule, create_idempotency_table

ROUNDS = 10
SENDS_PER_ROUND = 200  # per row and round: 2,000 sends per row in all
WARM_UP = 50  # sends per row before counting and timing
TARGET_EXTRA_ROUND_TRIPS = 2  # issue 27, new key over plain
TARGET_REPLAY_ROUND_TRIPS = 2  # issue 27, in all

metadata = sa.MetaData()
rows = sa.Table(
    "bench_rows",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("n", sa.Integer, nullable=False),
)


# --- the commands ---------------------------------------------------------------------


@transactional
class Insert(Command[int]):
    n: int


@idempotent(key="request_id")
@transactional
class IdempotentInsert(Command[int]):
    request_id: str
    n: int


class InsertHandler(CommandHandler[Insert, int]):
    @inject
    def __init__(self, session: Session) -> None:
        self.session = session

    def handle(self, request: Insert) -> int:
        self.session.execute(sa.insert(rows).values(n=request.n))
        return request.n


class IdempotentInsertHandler(CommandHandler[IdempotentInsert, int]):
    @inject
    def __init__(self, session: Session) -> None:
        self.session = session

    def handle(self, request: IdempotentInsert) -> int:
        self.session.execute(sa.insert(rows).values(n=request.n))
        return request.n


@transactional
class AsyncInsert(Command[int]):
    n: int


@idempotent(key="request_id")
@transactional
class AsyncIdempotentInsert(Command[int]):
    request_id: str
    n: int


class AsyncInsertHandler(CommandHandler[AsyncInsert, int]):
    @inject
    def __init__(self, session: AsyncSession) -> None:
        self.session = session

    async def handle(self, request: AsyncInsert) -> int:
        await self.session.execute(sa.insert(rows).values(n=request.n))
        return request.n


class AsyncIdempotentInsertHandler(CommandHandler[AsyncIdempotentInsert, int]):
    @inject
    def __init__(self, session: AsyncSession) -> None:
        self.session = session

    async def handle(self, request: AsyncIdempotentInsert) -> int:
        await self.session.execute(sa.insert(rows).values(n=request.n))
        return request.n


# --- counting statements --------------------------------------------------------------


@dataclass
class Counts:
    """What the engine did while `on` is set."""

    on: bool = False
    statements: Counter[str] = field(default_factory=Counter[str])
    commits: int = 0
    rollbacks: int = 0
    no_op_ends: int = 0  # commit and rollback events the driver ignores
    checkouts: int = 0
    trace: list[str] = field(default_factory=list[str])  # one send's, in order

    def listen(self, engine: sa.Engine) -> None:
        # First in line: the SQLite set-up commits the driver's transaction in
        # its own commit listener, and this one must see it open.
        event.listen(engine, "before_cursor_execute", self._statement, insert=True)
        event.listen(engine, "commit", self._commit, insert=True)
        event.listen(engine, "rollback", self._rollback, insert=True)
        event.listen(engine.pool, "checkout", self._checkout)

    def _statement(self, connection: Any, *args: Any) -> None:
        if self.on:
            if _driver_begins(connection):
                self.statements["BEGIN (driver)"] += 1
                self.trace.append("BEGIN (driver)")
            text: str = args[1]
            verb = _verb(text)
            self.statements[verb] += 1
            self.trace.append(verb)

    def _commit(self, connection: Any) -> None:
        if self.on:
            if _in_transaction(connection):
                self.commits += 1
                self.trace.append("COMMIT")
            else:
                self.no_op_ends += 1
                self.trace.append("(commit)")

    def _rollback(self, connection: Any) -> None:
        if self.on:
            if _in_transaction(connection):
                self.rollbacks += 1
                self.trace.append("ROLLBACK")
            else:
                self.no_op_ends += 1
                self.trace.append("(rollback)")

    def _checkout(self, *args: Any) -> None:
        if self.on:
            self.checkouts += 1

    @contextmanager
    def counting(self) -> Generator[None]:
        self.statements.clear()
        self.commits = self.rollbacks = self.no_op_ends = self.checkouts = 0
        self.trace.clear()
        self.on = True
        try:
            yield
        finally:
            self.on = False

    @property
    def round_trips(self) -> int:
        return sum(self.statements.values()) + self.commits + self.rollbacks

    @property
    def events(self) -> int:
        return self.round_trips - self.statements["BEGIN (driver)"] + self.no_op_ends


def _driver(connection: Any) -> Any:
    return connection.connection.driver_connection


def _in_transaction(connection: Any) -> bool:
    """Whether the driver has a transaction open, so a commit or rollback is sent."""
    driver = _driver(connection)
    if driver is None:  # pragma: no cover - closed
        return False
    flag = getattr(driver, "in_transaction", None)  # sqlite3, aiosqlite
    if isinstance(flag, bool):
        return flag
    from psycopg.pq import TransactionStatus

    return bool(driver.info.transaction_status != TransactionStatus.IDLE)


def _driver_begins(connection: Any) -> bool:
    """Whether psycopg sends its own BEGIN before this statement."""
    if connection.dialect.name != "postgresql":
        return False
    driver = _driver(connection)
    return not driver.autocommit and not _in_transaction(connection)


def _verb(statement: str) -> str:
    words = statement.split()
    verb = " ".join(words[:2]) if words[:2] == ["BEGIN", "IMMEDIATE"] else words[0]
    if verb == "INSERT" and "ON CONFLICT" in statement:
        return "INSERT..ON CONFLICT"
    return verb.upper()


# --- the rows -------------------------------------------------------------------------


@dataclass
class Row:
    label: str
    send: Callable[[int], object]  # send number i (sync), or a coroutine factory
    replay: bool = False
    samples: list[int] = field(default_factory=list[int])  # ns per send
    per_send: dict[str, float] = field(default_factory=dict[str, float])
    trace: list[str] = field(default_factory=list[str])
    round_trips: float = 0.0
    events: float = 0.0

    @property
    def median_us(self) -> float:
        return statistics.median(self.samples) / 1000

    @property
    def p99_us(self) -> float:
        return statistics.quantiles(self.samples, n=100)[98] / 1000


def _new_key() -> str:
    return uuid.uuid4().hex


def _sync_rows(mediator: Mediator) -> list[Row]:
    mediator.send_sync(IdempotentInsert(request_id="replayed", n=1))
    replayed = IdempotentInsert(request_id="replayed", n=1)

    def replay(i: int) -> object:
        result = mediator.send_sync(replayed)
        if not is_replay():
            raise RuntimeError("the replay row ran its handler")
        return result

    return [
        Row("plain @transactional", lambda i: mediator.send_sync(Insert(n=i))),
        Row(
            "@idempotent, new key",
            lambda i: mediator.send_sync(IdempotentInsert(request_id=_new_key(), n=i)),
        ),
        Row("@idempotent, replay", replay, replay=True),
    ]


def _async_rows(mediator: Mediator) -> list[Row]:
    async def replay(i: int) -> object:
        result = await mediator.send(AsyncIdempotentInsert(request_id="replayed", n=1))
        if not is_replay():
            raise RuntimeError("the replay row ran its handler")
        return result

    return [
        Row("plain @transactional", lambda i: mediator.send(AsyncInsert(n=i))),
        Row(
            "@idempotent, new key",
            lambda i: mediator.send(AsyncIdempotentInsert(request_id=_new_key(), n=i)),
        ),
        Row("@idempotent, replay", replay, replay=True),
    ]


# --- measuring ------------------------------------------------------------------------


def _measure(rows_: list[Row], counts: Counts, run: Callable[[Row, int], None]) -> None:
    for row in rows_:
        for i in range(WARM_UP):
            run(row, i)
        with counts.counting():
            run(row, 0)
        row.trace = list(counts.trace)
    for round_ in range(ROUNDS):
        for row in rows_:
            gc.collect()
            with counts.counting():
                for i in range(SENDS_PER_ROUND):
                    started = perf_counter_ns()
                    run(row, round_ * SENDS_PER_ROUND + i)
                    row.samples.append(perf_counter_ns() - started)
            _add(row, counts)
    total = ROUNDS * SENDS_PER_ROUND
    for row in rows_:
        row.per_send = {k: v / total for k, v in row.per_send.items()}
        row.round_trips = row.per_send.pop("round trips")
        row.events = row.per_send.pop("events")


def _add(row: Row, counts: Counts) -> None:
    tally = dict(counts.statements)
    tally["COMMIT"] = counts.commits
    tally["ROLLBACK"] = counts.rollbacks
    tally["no-op end"] = counts.no_op_ends
    tally["connections"] = counts.checkouts
    tally["round trips"] = counts.round_trips
    tally["events"] = counts.events
    for key, value in tally.items():
        row.per_send[key] = row.per_send.get(key, 0) + value


def _one_caller(binder: Binder) -> None:
    # A single program sending with no principal: it opts in, as a worker does.
    binder.bind(IdempotencyOptions, to=IdempotencyOptions(allow_anonymous=True))


def _sync_path(url: str) -> list[Row]:
    engine = sa.create_engine(url)
    metadata.create_all(engine)
    create_idempotency_table(engine)
    counts = Counts()
    counts.listen(engine)
    module = MediatorModule(
        lambda m: m.add_handler(InsertHandler, IdempotentInsertHandler).use_defaults()
    )
    injector = Injector([module, SqlAlchemyModule(engine=engine), _one_caller])
    _check_audit_off(injector)
    rows_ = _sync_rows(injector.get(Mediator))

    def run(row: Row, i: int) -> None:
        row.send(i)

    try:
        _measure(rows_, counts, run)
    finally:
        engine.dispose()
    return rows_


def _async_path(url: str, setup_url: str) -> list[Row]:
    engine: AsyncEngine = create_async_engine(url)
    setup = sa.create_engine(setup_url)
    metadata.create_all(setup)
    create_idempotency_table(setup)
    setup.dispose()
    counts = Counts()
    counts.listen(engine.sync_engine)
    module = MediatorModule(
        lambda m: m.add_handler(
            AsyncInsertHandler, AsyncIdempotentInsertHandler
        ).use_defaults()
    )
    injector = Injector([module, SqlAlchemyModule(async_engine=engine), _one_caller])
    _check_audit_off(injector)
    mediator = injector.get(Mediator)
    with asyncio.Runner() as runner:
        runner.run(mediator.send(AsyncIdempotentInsert(request_id="replayed", n=1)))
        rows_ = _async_rows(mediator)

        def run(row: Row, i: int) -> None:
            runner.run(_awaited(row.send(i)))

        try:
            _measure(rows_, counts, run)
        finally:
            runner.run(engine.dispose())
    return rows_


async def _awaited(awaitable: Any) -> object:
    return await awaitable


def _check_audit_off(injector: Injector) -> None:
    if injector.get(AuditSink).is_enabled():
        raise RuntimeError("the audit sink is enabled: the rows would measure it")


# --- report ---------------------------------------------------------------------------


def _report(title: str, rows_: list[Row]) -> list[str]:
    lines = [
        f"**{title}**",
        "",
        "| row | median us | p99 us | round trips | events | statements | "
        "COMMIT | ROLLBACK | no-op end | connections | one send, in order |",
        "| --- | ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: | --- |",
    ]
    apart = ("COMMIT", "ROLLBACK", "no-op end", "connections")
    for row in rows_:
        statements = ", ".join(
            f"{verb} {row.per_send[verb]:g}"
            for verb in sorted(row.per_send)
            if verb not in apart and row.per_send[verb]
        )
        lines.append(
            f"| {row.label} | {row.median_us:,.0f} | {row.p99_us:,.0f} | "
            f"{row.round_trips:g} | {row.events:g} | {statements} | "
            + " | ".join(f"{row.per_send[column]:g}" for column in apart)
            + f" | {', '.join(row.trace)} |"
        )
    plain, new_key, replay = rows_
    extra = new_key.round_trips - plain.round_trips
    verdict = "met" if extra <= TARGET_EXTRA_ROUND_TRIPS else "MISSED"
    replayed = "met" if replay.round_trips <= TARGET_REPLAY_ROUND_TRIPS else "MISSED"
    lines += [
        "",
        f"@idempotent, new key: {extra:+g} round trips over plain "
        f"(target <= +{TARGET_EXTRA_ROUND_TRIPS}: {verdict}; "
        f"{new_key.events - plain.events:+g} events), "
        f"{new_key.median_us - plain.median_us:+,.0f} us median "
        f"({new_key.median_us / plain.median_us:.2f}x); "
        f"replay: {replay.round_trips:g} round trips "
        f"(target <= {TARGET_REPLAY_ROUND_TRIPS}: {replayed}; "
        f"{replay.events:g} events), "
        f"{replay.median_us / plain.median_us:.2f}x the plain median.",
        "",
    ]
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(
        description="What @idempotent costs a @transactional command."
    )
    parser.add_argument(
        "--dir", type=Path, default=None, help="where the database files go"
    )
    parser.add_argument("--no-postgres", action="store_true", help="SQLite only")
    arguments = parser.parse_args()
    started = perf_counter()
    with tempfile.TemporaryDirectory(dir=arguments.dir) as folder:
        sqlite_file = Path(folder)
        sync_url = f"sqlite:///{sqlite_file / 'sync.db'}"
        sections = [("SQLite, sync path (send_sync)", _sync_path(sync_url))]
        if importlib.util.find_spec("aiosqlite") is not None:
            async_file = sqlite_file / "async.db"
            rows_ = _async_path(
                f"sqlite+aiosqlite:///{async_file}", f"sqlite:///{async_file}"
            )
            sections.append(("SQLite, async path (send, aiosqlite)", rows_))
        where = folder
    if not arguments.no_postgres:
        # The throwaway cluster of concurrent_orders.py, beside this script.
        postgres = importlib.import_module("concurrent_orders").postgres
        with postgres() as url:
            if url is not None:
                sync_rows = _sync_path(url)
                sections.append(("PostgreSQL, sync path (psycopg)", sync_rows))
                async_rows = _async_path(url, url)
                sections.append(("PostgreSQL, async path (psycopg)", async_rows))
    versions = ", ".join(
        f"{name} {importlib.metadata.version(name)}"
        for name in ("mediator-core", "sqlalchemy", "pydantic")
    )
    lines = [
        f"Python {platform.python_version()}, {platform.system()} "
        f"{platform.machine()}, {os.cpu_count()} cores; {versions}; "
        f"SQLite {sqlite3.sqlite_version} (a file in {where}, WAL)",
        "",
    ]
    for title, rows_ in sections:
        lines += _report(title, rows_)
    lines.append(
        f"Per row: {ROUNDS} rounds of {SENDS_PER_ROUND} sends after {WARM_UP} "
        "warm-up sends; statements are per send, averaged over all of them. "
        "Round trips: statements (BEGIN included) + the COMMIT and ROLLBACK the "
        "driver sends; events: statements + every commit and rollback event "
        "(a no-op end included, psycopg's own BEGIN not). "
        f"Run took {perf_counter() - started:.0f} s."
    )
    print("\n".join(lines))


if __name__ == "__main__":
    main()
