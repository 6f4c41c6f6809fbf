"""Ten concurrent orders, each calling a 200 ms dependency: issue 24's proof.

Each order is a `@transactional` command sent through a mediator built with
`use_defaults()` and `SqlAlchemyModule`: its handler reads the price, awaits a fake
payments call (a real 200 ms wait), then inserts the order.

For each database (a SQLite file on aiosqlite; PostgreSQL on async psycopg when
``initdb`` and psycopg are found, on a throwaway cluster like the test suite's) it
prints one order's time alone, the wall time of ten sent at once, and their ratio
(the target: at most 1.5), each the median of a few rounds:

- as shipped, with a pool that holds ten connections;
- with each order under a 2 s deadline (``SqlAlchemyModule(remaining_time=...)``,
  read from a context variable as `http_resilience.remaining_time` is), as a web
  service wires it: the first write's wait for its lock is bounded by it;
- with SQLAlchemy's default pool (5 kept, 10 overflow): five of the ten orders
  open a connection of their own each round, and it is closed after;
- the old shape, a unit of work that opens its transaction at ``begin`` (``BEGIN
  IMMEDIATE`` on SQLite), for contrast: on SQLite it holds the write lock across
  the call, so the ten orders run one after the other.

It prints the machine's load average too, and never fails on the target. Run it
with ``make bench``, or from the dev ``.venv``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextvars
import getpass
import glob
import os
import shutil
import socket
import statistics
import subprocess
import tempfile
from collections.abc import Generator
from contextlib import contextmanager
from pathlib import Path
from time import perf_counter
from typing import Any

import sqlalchemy as sa
from injector import Binder, Injector, Module, inject
from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine

from mediator import (
    AsyncUnitOfWork,
    Command,
    CommandHandler,
    Mediator,
    MediatorModule,
    transactional,
)
from mediator.sqlalchemy import AsyncSqlAlchemyUnitOfWork, SqlAlchemyModule
from mediator.sqlalchemy._sqlite import IMMEDIATE

ORDERS = 10
CALL = 0.2  # seconds the payments call takes
TARGET = 1.5
DEADLINE = 2.0  # seconds each order has, in the rows with a deadline

_deadline: contextvars.ContextVar[float | None] = contextvars.ContextVar(
    "deadline", default=None
)


def remaining_time() -> float | None:
    """The seconds left to the order being sent, as a web request's deadline."""
    at = _deadline.get()
    return None if at is None else at - perf_counter()


async def send(mediator: Mediator, *, deadline: bool) -> int:
    if deadline:
        _deadline.set(perf_counter() + DEADLINE)  # this task's own copy
    return await mediator.send(PlaceOrder(sku="A"))


metadata = sa.MetaData()
orders = sa.Table(
    "bench_orders",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("sku", sa.String(20), nullable=False),
)
stock = sa.Table(
    "bench_stock",
    metadata,
    sa.Column("sku", sa.String(20), primary_key=True),
    sa.Column("price", sa.Integer, nullable=False),
)


@transactional
class PlaceOrder(Command[int]):
    sku: str


class PlaceOrderHandler(CommandHandler[PlaceOrder, int]):
    @inject
    def __init__(self, session: AsyncSession) -> None:
        self.session = session

    async def handle(self, request: PlaceOrder) -> int:
        price = await self.session.scalar(
            sa.select(stock.c.price).where(stock.c.sku == request.sku)
        )
        await asyncio.sleep(CALL)  # noqa: TID251 - the payments service, for real
        await self.session.execute(sa.insert(orders).values(sku=request.sku))
        return int(price or 0)


class OldShapeUnitOfWork(AsyncSqlAlchemyUnitOfWork):
    """The unit of work before issue 24: its transaction opens at ``begin``."""

    @inject
    def __init__(self, session: AsyncSession) -> None:
        super().__init__(session)
        dialect = session.get_bind().dialect.name
        # SQLite: BEGIN IMMEDIATE at begin. PostgreSQL: the driver's own BEGIN
        # at the first statement, the read.
        self._options = {IMMEDIATE: True} if dialect == "sqlite" else {}


class OldShape(Module):
    def configure(self, binder: Binder) -> None:
        binder.bind(AsyncUnitOfWork, to=OldShapeUnitOfWork)


async def measure(
    url: str,
    *,
    rounds: int,
    old: bool = False,
    deadline: bool = False,
    default_pool: bool = False,
) -> tuple[float, float]:
    """Median seconds of one order alone, and of ten sent at once."""
    pool: dict[str, Any] = (
        {} if default_pool else {"pool_size": ORDERS + 2, "max_overflow": 0}
    )
    engine = create_async_engine(url, **pool)
    async with engine.begin() as connection:
        await connection.run_sync(metadata.drop_all)
        await connection.run_sync(metadata.create_all)
        await connection.execute(sa.insert(stock).values(sku="A", price=100))
    modules: list[Module] = [
        MediatorModule(lambda m: m.add_handler(PlaceOrderHandler).use_defaults()),
        SqlAlchemyModule(
            async_engine=engine, remaining_time=remaining_time if deadline else None
        ),
    ]
    if old:
        modules.append(OldShape())
    mediator = Injector(modules).get(Mediator)
    try:
        # Warm the caches, and open the pool's ten connections.
        await asyncio.gather(
            *(send(mediator, deadline=deadline) for _ in range(ORDERS))
        )
        ones: list[float] = []
        tens: list[float] = []
        for _ in range(rounds):
            started = perf_counter()
            await asyncio.create_task(send(mediator, deadline=deadline))
            ones.append(perf_counter() - started)
            started = perf_counter()
            await asyncio.gather(
                *(send(mediator, deadline=deadline) for _ in range(ORDERS))
            )
            tens.append(perf_counter() - started)
        return statistics.median(ones), statistics.median(tens)
    finally:
        async with engine.begin() as connection:
            await connection.run_sync(metadata.drop_all)
        await engine.dispose()


@contextmanager
def postgres() -> Generator[str | None]:
    """A URL on a throwaway PostgreSQL cluster, or None without initdb or psycopg."""
    try:
        import psycopg
    except ImportError:
        print("PostgreSQL: skipped (psycopg is not installed here)")
        yield None
        return
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), reverse=True)
    initdb = found[0] if found else shutil.which("initdb")
    if initdb is None:
        print("PostgreSQL: skipped (initdb not found)")
        yield None
        return
    bin_dir = Path(initdb).parent
    as_root = os.geteuid() == 0
    user = "postgres" if as_root else getpass.getuser()
    as_user = ["runuser", "-u", user, "--"] if as_root else []
    root = Path(tempfile.mkdtemp(prefix="bench-postgres-"))
    data = root / "data"
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    pg_ctl = [*as_user, str(bin_dir / "pg_ctl"), "--pgdata", str(data), "--wait"]
    try:
        if as_root:
            shutil.chown(root, user, user)
        subprocess.run(
            [*as_user, initdb, "--pgdata", str(data), "--username", user,
             "--auth=trust", "--no-sync"],
            check=True, capture_output=True,
        )  # fmt: skip
        with (data / "postgresql.conf").open("a") as conf:
            conf.write(
                f"listen_addresses = '127.0.0.1'\nport = {port}\n"
                f"unix_socket_directories = '{root}'\nfsync = off\n"
                "synchronous_commit = off\nmax_connections = 50\n"
            )
        log = str(root / "server.log")
        subprocess.run(
            [*pg_ctl, "--log", log, "start"], check=True, capture_output=True
        )
        admin = f"host=127.0.0.1 port={port} user={user} dbname=postgres"
        with psycopg.connect(admin, autocommit=True) as connection:
            connection.execute("CREATE DATABASE bench")
        yield f"postgresql+psycopg://{user}@127.0.0.1:{port}/bench"
    finally:
        if (data / "postmaster.pid").exists():
            subprocess.run([*pg_ctl, "--mode", "immediate", "stop"], check=False,
                           capture_output=True)  # fmt: skip
        shutil.rmtree(root, ignore_errors=True)


def report(label: str, one: float, ten: float) -> None:
    ratio = ten / one
    verdict = "meets" if ratio <= TARGET else "misses"
    print(
        f"{label:<40} {one * 1000:>9.0f} {ten * 1000:>9.0f} {ratio:>7.2f}x  "
        f"({verdict} <= {TARGET}x)"
    )


async def report_all(database: str, url: str, rounds: int) -> None:
    rows: list[tuple[str, dict[str, bool]]] = [
        ("begins at first write", {}),
        (f"  + a {DEADLINE:.0f} s deadline per order", {"deadline": True}),
        ("  + SQLAlchemy's default pool", {"default_pool": True}),
        (
            "old: BEGIN IMMEDIATE at begin"
            if database == "SQLite"
            else "old: open at the first read",
            {"old": True},
        ),
    ]
    for label, shape in rows:
        report(f"{database}, {label}", *await measure(url, rounds=rounds, **shape))


async def main(rounds: int) -> None:
    print(
        f"{ORDERS} concurrent @transactional orders, each reading, calling a "
        f"{CALL * 1000:.0f} ms dependency, then writing; median of {rounds} rounds"
    )
    print("load average (1, 5, 15 min): {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()))
    print(
        f"{'database, unit of work':<40} {'one (ms)':>9} {'ten (ms)':>9} {'ratio':>8}"
    )
    with tempfile.TemporaryDirectory() as folder:
        url = f"sqlite+aiosqlite:///{Path(folder) / 'orders.db'}"
        await report_all("SQLite", url, rounds)
    with postgres() as pg:
        if pg is not None:
            await report_all("PostgreSQL", pg, rounds)
    print("load average (1, 5, 15 min): {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    arguments: Any = parser.parse_args()
    asyncio.run(main(arguments.rounds))
