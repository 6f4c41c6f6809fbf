"""`@idempotent`, the key context, options and stored outcomes."""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Annotated, Any

import pydantic
import pytest

from mediator import (
    BusinessRuleError,
    Command,
    ConflictError,
    DomainError,
    FieldError,
    IdempotencyOptions,
    NotFoundError,
    Query,
    StoredOutcome,
    ValidationError,
    current_idempotency_key,
    idempotency_key,
    idempotent,
)
from mediator._behaviors.idempotency.marker import is_idempotent, key_field_of, key_of
from mediator._behaviors.idempotency.outcome import (
    Outcomes,
    error_outcome,
    rebuild_error,
)


@idempotent
class Bare(Command[int]):
    n: int


@idempotent(key="request_id")
class Keyed(Command[int]):
    request_id: uuid.UUID
    n: int


class Child(Keyed):
    extra: str = ""


def test_the_marker_is_read_and_inherited() -> None:
    assert is_idempotent(Bare)
    assert is_idempotent(Bare(n=1))
    assert key_field_of(Bare) is None
    assert key_field_of(Keyed) == "request_id"
    assert is_idempotent(Child)
    assert key_field_of(Child) == "request_id"
    assert not is_idempotent(Command)


def test_a_uuid_key_is_taken_as_its_text() -> None:
    value = uuid.UUID(int=7)
    assert key_of(Keyed(request_id=value, n=1), "request_id") == (
        str(value),
        "request_id",
    )


def test_a_query_is_refused() -> None:
    with pytest.raises(
        TypeError, match=r"not on the Query .*Lookup: a query changes nothing"
    ):

        @idempotent
        class Lookup(Query[int]):
            pass


@pytest.mark.parametrize("target", [object, 3, "Charge", pydantic.BaseModel])
def test_anything_but_a_command_class_is_refused(target: Any) -> None:
    with pytest.raises(TypeError, match="@idempotent goes on"):
        idempotent(target)


def test_the_key_field_must_exist_and_hold_text() -> None:
    with pytest.raises(TypeError, match=r"has no field 'missing' \(its fields: n\)"):

        @idempotent(key="missing")
        class One(Command[None]):
            n: int

    with pytest.raises(TypeError, match="must be a str or a UUID"):

        @idempotent(key="n")
        class Two(Command[None]):
            n: int

    with pytest.raises(TypeError, match="takes a field name"):
        idempotent(key=3)  # type: ignore[call-overload]

    @idempotent(key="k")
    class Fine(Command[None]):
        k: Annotated[str, pydantic.Field(max_length=64)] | None = None

    assert key_field_of(Fine) == "k"


def test_the_context_key_is_set_for_the_block_only() -> None:
    assert current_idempotency_key() is None
    with idempotency_key("a"):
        with idempotency_key("b"):
            assert current_idempotency_key() == "b"
        assert current_idempotency_key() == "a"
    assert current_idempotency_key() is None
    with pytest.raises(TypeError, match="takes a string"), idempotency_key(1):  # type: ignore[arg-type]
        pass


def test_options_defaults_and_errors() -> None:
    options = IdempotencyOptions()
    assert options.retention == timedelta(hours=24)
    assert options.lease == timedelta(seconds=60)
    assert options.scope == "principal"
    assert options.allow_anonymous is False
    assert IdempotencyOptions(scope="tenant").scope == "tenant"
    with pytest.raises(
        pydantic.ValidationError, match="Input should be 'principal' or 'tenant'"
    ):
        IdempotencyOptions(scope="user")  # type: ignore[arg-type]
    assert IdempotencyOptions(lease="PT2M").lease == timedelta(minutes=2)
    with pytest.raises(pydantic.ValidationError, match="must not exceed retention"):
        IdempotencyOptions(lease=120, retention=60)
    with pytest.raises(pydantic.ValidationError, match="greater than 0"):
        IdempotencyOptions(lease=0)
    with pytest.raises(pydantic.ValidationError, match="not true or false"):
        IdempotencyOptions(lease=True)
    with pytest.raises(pydantic.ValidationError, match="Extra inputs"):
        IdempotencyOptions(leese=1)  # type: ignore[call-arg]


class Missing(NotFoundError):
    pass


def test_errors_round_trip_through_their_stored_form() -> None:
    invalid = ValidationError("bad", [FieldError(("lines", 0, "qty"), "positive")])
    rebuilt = rebuild_error(error_outcome(invalid))
    assert type(rebuilt) is ValidationError
    assert rebuilt.errors == invalid.errors
    assert str(rebuilt) == "bad"

    assert type(rebuild_error(error_outcome(Missing("no order 7")))) is Missing
    assert type(rebuild_error(error_outcome(ConflictError("taken")))) is ConflictError


def test_an_unknown_or_unreadable_error_is_a_plain_domain_error() -> None:
    unknown = rebuild_error(
        StoredOutcome("error", "elsewhere:Gone", '{"message": "m", "errors": []}')
    )
    assert type(unknown) is DomainError
    assert str(unknown) == "m"
    unreadable = rebuild_error(
        StoredOutcome("error", "mediator._errors:BusinessRuleError", "not json")
    )
    assert type(unreadable) is BusinessRuleError
    assert str(unreadable) == "the stored error could not be read"


def test_a_stored_response_that_no_longer_fits_says_so() -> None:
    outcomes = Outcomes.of(Bare)
    assert outcomes.replay(outcomes.response(5)) == 5
    with pytest.raises(pydantic.ValidationError) as raised:
        outcomes.replay(StoredOutcome("response", "builtins:str", '"five"'))
    assert "no longer fits its response type" in raised.value.__notes__[0]


def test_a_retention_past_ten_years_is_refused() -> None:
    # Its expiry would be past what a database's timestamps hold.
    with pytest.raises(pydantic.ValidationError, match="retention"):
        IdempotencyOptions(retention=timedelta(days=3651), lease=1)
    assert IdempotencyOptions(retention=timedelta(days=3650)).retention.days == 3650
