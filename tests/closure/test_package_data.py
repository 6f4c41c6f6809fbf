"""Files other than Python modules that a package needs at run time are in its wheel
(and in the sdist the wheel is built from)."""

from __future__ import annotations

import tarfile
import zipfile

import pytest

from ._workspace import MEDIATOR, Built

pytestmark = [pytest.mark.closure, pytest.mark.timeout(300)]

# The idempotency store's migrations, applied by the user's migration tool.
MEDIATOR_DATA = [
    "mediator/sqlalchemy/migrations/0001_idempotency.postgresql.sql",
    "mediator/sqlalchemy/migrations/0001_idempotency.sqlite.sql",
]


def test_the_mediator_wheel_ships_the_sql_migrations(built: Built) -> None:
    with zipfile.ZipFile(built.wheels[MEDIATOR.distribution]) as wheel:
        names = set(wheel.namelist())
        assert set(MEDIATOR_DATA) <= names
        for name in MEDIATOR_DATA:
            assert b"CREATE TABLE mediator_idempotency" in wheel.read(name)
    with tarfile.open(built.sdists[MEDIATOR.distribution]) as sdist:
        in_sdist = {name.partition("/")[2] for name in sdist.getnames()}
    assert {f"src/{name}" for name in MEDIATOR_DATA} <= in_sdist
