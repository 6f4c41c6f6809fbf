"""`translate_error` on driver errors the real-database tests do not reach."""

from __future__ import annotations

import sqlite3

import pytest
from sqlalchemy import exc

from mediator import ConflictError, TransientDatabaseError
from mediator.sqlalchemy import translate_error


class PgError(Exception):
    """Stands in for a PostgreSQL driver error: only the SQLSTATE attribute matters."""

    def __init__(
        self, *, sqlstate: str | None = None, pgcode: str | None = None
    ) -> None:
        super().__init__("driver error")
        self.sqlstate = sqlstate
        self.pgcode = pgcode


def wrapped(
    original: Exception, kind: type[exc.DBAPIError] = exc.DBAPIError
) -> exc.DBAPIError:
    return kind("INSERT ...", {}, original)


@pytest.mark.parametrize(
    ("original", "expected", "fragment"),
    [
        (PgError(sqlstate="23505"), ConflictError, "unique constraint"),
        (PgError(pgcode="23503"), ConflictError, "foreign key constraint"),  # psycopg2
        (PgError(sqlstate="40001"), TransientDatabaseError, "serialization failure"),
        (PgError(pgcode="40P01"), TransientDatabaseError, "deadlock detected"),
    ],
)
def test_postgres_states_are_classified(
    original: Exception, expected: type[Exception], fragment: str
) -> None:
    error = wrapped(original)

    translated = translate_error(error)

    assert isinstance(translated, expected)
    assert fragment in str(translated)


@pytest.mark.parametrize(
    "error",
    [
        wrapped(PgError(sqlstate="23502")),  # not null: not one we classify
        wrapped(
            sqlite3.IntegrityError("NOT NULL constraint failed: t.c"),
            exc.IntegrityError,
        ),
        wrapped(sqlite3.OperationalError("no such table: t"), exc.OperationalError),
        wrapped(ValueError("some other driver")),
    ],
)
def test_errors_it_does_not_know_come_back_unchanged(error: exc.DBAPIError) -> None:
    assert translate_error(error) is error


def test_errors_that_are_not_from_the_driver_come_back_unchanged() -> None:
    error = KeyError("not a database error")

    assert translate_error(error) is error


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        ("UNIQUE constraint failed: t.email", ConflictError),
        ("FOREIGN KEY constraint failed", ConflictError),
        ("database table is locked", TransientDatabaseError),
    ],
)
def test_sqlite_errors_without_result_codes_are_read_from_their_message(
    message: str, expected: type[Exception]
) -> None:
    kind = sqlite3.OperationalError if "locked" in message else sqlite3.IntegrityError
    original = kind(message)  # built by hand: no sqlite_errorcode attribute

    assert isinstance(translate_error(wrapped(original)), expected)


def test_a_dropped_connection_is_a_transient_error() -> None:
    error = exc.OperationalError(
        "SELECT 1", {}, PgError(sqlstate="57P01"), connection_invalidated=True
    )

    translated = translate_error(error)

    assert isinstance(translated, TransientDatabaseError)
    assert str(translated) == (
        "the transaction was lost, try again (the connection dropped)"
    )
