"""How an idempotent command's outcome is stored, and rebuilt for a replay.

A response is stored as its response type serialises it (a pydantic
`TypeAdapter` of the request's ``R``), and rebuilt by the same adapter. A
domain error is stored as its type's name, its message and its field errors,
and rebuilt as that type when it is a `DomainError` class loaded in the
process whose constructor is one of `mediator`'s (``cls(message)``, or
``cls(message, errors)`` for a `ValidationError`); a class with a constructor
of its own is rebuilt as the nearest `mediator` class it derives from, and a
name that fits no loaded class as a plain `DomainError`. Nothing is imported
by name: a record cannot make the process load code.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Final, cast

from pydantic import TypeAdapter

from mediator._behaviors.idempotency.store import StoredOutcome
from mediator._core.errors import DomainError, FieldError, ValidationError
from mediator._core.requests import response_type

__all__ = ["Outcomes", "error_outcome", "rebuild_error", "response_type"]


def _name(cls: type[Any]) -> str:
    return f"{cls.__module__}:{cls.__qualname__}"


@dataclass(frozen=True, slots=True)
class Outcomes:
    """The stored form of one request type's responses.

    Raises:
        pydantic.PydanticSchemaGenerationError: The response type cannot be
            serialised by pydantic (on construction).
    """

    request_type: type[Any]
    adapter: TypeAdapter[Any]

    @classmethod
    def of(cls, request_type: type[Any]) -> Outcomes:
        """The outcomes of `request_type`, its response type read once."""
        adapter: TypeAdapter[Any] = TypeAdapter(cast(Any, response_type(request_type)))
        return cls(request_type, adapter)

    def response(self, value: object) -> StoredOutcome:
        """A response as it is stored."""
        payload = self.adapter.dump_json(value).decode("utf-8")
        return StoredOutcome("response", _name(type(value)), payload)

    def replay(self, outcome: StoredOutcome) -> Any:
        """The stored response, rebuilt; a stored error, raised.

        Raises:
            DomainError: The stored one, rebuilt (see the module's docstring).
        """
        if outcome.kind == "error":
            raise rebuild_error(outcome)
        try:
            return self.adapter.validate_json(outcome.payload)
        except Exception as error:
            error.add_note(
                f"the stored response of {self.request_type.__qualname__} no "
                "longer fits its response type (changed since it was stored?)"
            )
            raise


def error_outcome(error: DomainError) -> StoredOutcome:
    """A domain error as it is stored: its type's name, message and field errors."""
    errors = [
        {"path": list(item.path), "message": item.message}
        for item in (error.errors if isinstance(error, ValidationError) else ())
    ]
    payload = json.dumps(
        {"message": str(error), "errors": errors}, ensure_ascii=False, sort_keys=True
    )
    return StoredOutcome("error", _name(type(error)), payload)


def rebuild_error(outcome: StoredOutcome) -> DomainError:
    """The domain error an outcome stored, rebuilt (see the module's docstring)."""
    try:
        data = json.loads(outcome.payload)
        message = str(data.get("message", ""))
        errors = [
            FieldError(tuple(item["path"]), str(item["message"]))
            for item in data.get("errors", ())
        ]
    except (ValueError, TypeError, KeyError, AttributeError):
        message, errors = "the stored error could not be read", []
    cls = _buildable(_loaded(outcome.type_name))
    rebuilt = cls(message, errors) if issubclass(cls, ValidationError) else cls(message)
    rebuilt.add_note(
        f"replayed from the idempotency store; raised first as {outcome.type_name}"
    )
    return rebuilt


# Where `mediator`'s own errors were defined when outcomes already stored were
# written: a stored name keeps the module its class had then.
_FORMER_MODULES: Final = frozenset({"mediator._errors"})


def _loaded(type_name: str) -> type[DomainError]:
    """The loaded `DomainError` class of that name; `DomainError` when none is.

    A name stored when `mediator`'s own errors lived in another module (see
    `_FORMER_MODULES`) finds the `mediator` class of that qualified name.
    """
    module, _, qualname = type_name.partition(":")
    former = module in _FORMER_MODULES
    found: type[DomainError] = DomainError
    pending: list[type[DomainError]] = [DomainError]
    seen: set[type[DomainError]] = set()
    while pending:
        cls = pending.pop()
        if cls in seen:
            continue
        seen.add(cls)
        if _name(cls) == type_name or (
            former and cls.__qualname__ == qualname and _is_own(cls)
        ):
            found = cls
        pending.extend(cls.__subclasses__())
    return found


def _is_own(cls: type[Any]) -> bool:
    """Whether `cls` is defined in `mediator` (its module, or one under it)."""
    return cls.__module__.split(".")[0] == "mediator"


def _buildable(cls: type[DomainError]) -> type[DomainError]:
    """`cls` if `mediator`'s constructor builds it, else its nearest `mediator` base."""
    for klass in cls.__mro__:
        if _is_own(klass):
            return cls  # no class on the way defines a constructor of its own
        if "__init__" in vars(klass) or "__new__" in vars(klass):
            break
    for klass in cls.__mro__:
        if _is_own(klass):
            return cast("type[DomainError]", klass)
    return DomainError  # pragma: no cover - every DomainError has one
