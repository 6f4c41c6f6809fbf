"""A throwaway PostgreSQL cluster for the test suite, one per test session.

``initdb`` runs in a temporary directory, as the ``postgres`` user when the tests run
as root (PostgreSQL refuses root); the server listens on 127.0.0.1 only, on a free port,
with durability off. It is stopped and the directory removed at the end of the session.
Without the server binaries the tests skip, except under CI, where they fail. Timings
are logged at INFO: pytest shows them with a failure or ``--log-cli-level=INFO``.
"""

from __future__ import annotations

import getpass
import glob
import logging
import os
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import NoReturn

import psycopg
import pytest
import sqlalchemy as sa

from tests.support.missing import missing

SERVER_BINARIES = "/usr/lib/postgresql/*/bin"
DATABASE = "test"
SERIALIZATION_FAILURE = "40001"

_INITDB_OPTIONS = ("--auth=trust", "--encoding=UTF8", "--locale=C", "--no-sync")
# Appended to postgresql.conf. Durability is off: the cluster dies with the session.
_SETTINGS = """
listen_addresses = '127.0.0.1'
port = {port}
unix_socket_directories = '{sockets}'
fsync = off
synchronous_commit = off
full_page_writes = off
"""

_log = logging.getLogger(__name__)


def find_server_binaries(pattern: str = SERVER_BINARIES) -> Path | None:
    """The directory with ``initdb`` and ``pg_ctl``: highest version, else PATH."""

    def version(bin_dir: Path) -> tuple[int, ...]:
        return tuple(int(n) for n in bin_dir.parent.name.split(".") if n.isdigit())

    for bin_dir in sorted(map(Path, glob.glob(pattern)), key=version, reverse=True):
        if (bin_dir / "initdb").is_file() and (bin_dir / "pg_ctl").is_file():
            return bin_dir
    initdb = shutil.which("initdb")
    if initdb is not None and (Path(initdb).resolve().parent / "pg_ctl").is_file():
        return Path(initdb).resolve().parent
    return None


def unavailable(reason: str) -> NoReturn:
    """Skip the test; under CI fail it, since a skip would pass a broken set-up off."""
    missing(reason, remedy=".ci/run should have installed the `postgresql` package")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _run(command: list[str | Path], *, log: Path) -> None:
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        server_log = log.read_text(errors="replace")[-2000:] if log.exists() else ""
        raise RuntimeError(
            f"{' '.join(map(str, command))} exited {done.returncode}\n"
            f"{done.stdout}{done.stderr}{server_log}"
        )


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """A URL (``postgresql+psycopg://``) for an empty database on a fresh cluster."""
    bin_dir = find_server_binaries()
    if bin_dir is None:
        unavailable(
            "PostgreSQL server binaries (initdb, pg_ctl) are neither under "
            f"{SERVER_BINARIES} nor on PATH"
        )
    as_root = os.geteuid() == 0
    user = "postgres" if as_root else getpass.getuser()
    # runuser keeps the environment and needs no password, unlike su and sudo.
    as_user: list[str | Path] = ["runuser", "-u", user, "--"] if as_root else []
    root = Path(tempfile.mkdtemp(prefix="pytest-postgres-"))
    data, log = root / "data", root / "server.log"
    pg_ctl = [*as_user, bin_dir / "pg_ctl", "--pgdata", data, "--wait"]
    started = time.perf_counter()
    try:
        if as_root:
            shutil.chown(root, user, user)
        initdb = [*as_user, bin_dir / "initdb", "--pgdata", data, "--username", user]
        _run([*initdb, *_INITDB_OPTIONS], log=log)
        initialised = time.perf_counter()
        port = _free_port()
        with (data / "postgresql.conf").open("a") as conf:
            conf.write(_SETTINGS.format(port=port, sockets=root))
        try:
            _run([*pg_ctl, "--log", log, "start"], log=log)
            admin = f"host=127.0.0.1 port={port} user={user} dbname=postgres"
            with psycopg.connect(admin, autocommit=True) as conn:
                conn.execute(f"CREATE DATABASE {DATABASE}")
            ready = time.perf_counter() - started
            initdb_took = initialised - started
            _log.info("PostgreSQL ready in %.2f s (initdb %.2f s)", ready, initdb_took)
            yield f"postgresql+psycopg://{user}@127.0.0.1:{port}/{DATABASE}"
        finally:
            stopping = time.perf_counter()
            # Immediate: the data is thrown away, so a clean shutdown buys nothing.
            # No pid file means start failed and no server is left to stop.
            if (data / "postmaster.pid").exists():
                _run([*pg_ctl, "--mode", "immediate", "stop"], log=log)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    _log.info("PostgreSQL stopped in %.2f s", time.perf_counter() - stopping)


def provoke_serialization_failure(engine: sa.Engine) -> NoReturn:
    """Two SERIALIZABLE transactions update one row; the second one's UPDATE fails.

    Raises:
        sqlalchemy.exc.OperationalError: wraps ``psycopg.errors.SerializationFailure``,
            SQLSTATE 40001 (``SERIALIZATION_FAILURE``). The scratch table is dropped.
    """
    table = f"serialization_probe_{uuid.uuid4().hex[:12]}"
    update = f"UPDATE {table} SET n = n + 1 WHERE id = 1"
    with engine.begin() as setup:
        setup.exec_driver_sql(f"CREATE TABLE {table} (id int PRIMARY KEY, n int)")
        setup.exec_driver_sql(f"INSERT INTO {table} VALUES (1, 0)")
    serializable = engine.execution_options(isolation_level="SERIALIZABLE")
    try:
        with (
            serializable.connect() as loser,
            serializable.connect() as winner,
            loser.begin(),
        ):
            # The first query fixes the loser's snapshot; the winner commits after it.
            loser.exec_driver_sql(f"SELECT n FROM {table}")
            with winner.begin():
                winner.exec_driver_sql(update)
            loser.exec_driver_sql(update)
        raise AssertionError("PostgreSQL let both SERIALIZABLE transactions commit")
    finally:
        with engine.begin() as teardown:
            teardown.exec_driver_sql(f"DROP TABLE {table}")
