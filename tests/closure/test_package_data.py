"""Files other than Python modules that a package needs at run time are in its wheel
(and in the sdist the wheel is built from)."""

from __future__ import annotations

import tarfile
import zipfile

import pytest

from ._workspace import HTTP_RESILIENCE, MEDIATOR, Built

pytestmark = [pytest.mark.closure, pytest.mark.timeout(300)]

# The idempotency store's and the outbox's migrations, applied by the user's
# migration tool.
MEDIATOR_DATA = [
    "mediator/sqlalchemy/migrations/0001_idempotency.postgresql.sql",
    "mediator/sqlalchemy/migrations/0001_idempotency.sqlite.sql",
    "mediator/sqlalchemy/migrations/0002_outbox.postgresql.sql",
    "mediator/sqlalchemy/migrations/0002_outbox.sqlite.sql",
]
# The fleet's Lua script, read at import by the module that runs it.
FLEET_SCRIPT = "http_resilience/_fleet/sync.lua"


def test_the_mediator_wheel_ships_the_sql_migrations(built: Built) -> None:
    with zipfile.ZipFile(built.wheels[MEDIATOR.distribution]) as wheel:
        names = set(wheel.namelist())
        assert set(MEDIATOR_DATA) <= names
        for name in MEDIATOR_DATA:
            table = "mediator_outbox" if "outbox" in name else "mediator_idempotency"
            assert f"CREATE TABLE {table}".encode() in wheel.read(name)
    with tarfile.open(built.sdists[MEDIATOR.distribution]) as sdist:
        in_sdist = {name.partition("/")[2] for name in sdist.getnames()}
    assert {f"src/{name}" for name in MEDIATOR_DATA} <= in_sdist


def test_the_http_resilience_wheel_ships_the_fleet_script(built: Built) -> None:
    with zipfile.ZipFile(built.wheels[HTTP_RESILIENCE.distribution]) as wheel:
        assert b"redis.call(" in wheel.read(FLEET_SCRIPT)
    with tarfile.open(built.sdists[HTTP_RESILIENCE.distribution]) as sdist:
        in_sdist = {name.partition("/")[2] for name in sdist.getnames()}
    assert f"src/{FLEET_SCRIPT}" in in_sdist
