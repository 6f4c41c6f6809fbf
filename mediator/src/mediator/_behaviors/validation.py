"""`Validator[T]` and `ValidationBehavior`: every failure of a request, at once."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Awaitable, Iterable
from typing import Any, ClassVar, Generic, TypeVar, cast

import pydantic
from injector import inject

from mediator._core.behavior import Next, SyncNext
from mediator._core.components import Component, component, type_of
from mediator._core.errors import FieldError, ValidationError
from mediator._core.handlers import first_type_argument
from mediator._core.requests import Request, is_request_type
from mediator._core.stage import Stage
from mediator._core.wiring import Wiring

__all__ = ["ValidationBehavior", "Validator", "ValidatorRegistry", "validated_type"]

TRequest = TypeVar("TRequest", bound=Request[Any], contravariant=True)


class Validator(ABC, Generic[TRequest]):
    """Checks one request type beyond what its pydantic model can.

    `validate` returns the failures it found (an empty list when none); it may
    be ``async def``, for checks that ask the database. `register_from` finds
    validators like handlers; a validator of a base request class also checks
    its subclasses. Dependencies come through an ``@inject`` constructor.

    Example:
        >>> from mediator import Command, FieldError
        >>> class Rename(Command[None]):
        ...     name: str
        >>> class RenameValidator(Validator[Rename]):
        ...     def validate(self, request: Rename) -> list[FieldError]:
        ...         if request.name.strip() != request.name:
        ...             return [FieldError(("name",), "no outer spaces")]
        ...         return []
    """

    @abstractmethod
    def validate(
        self, request: TRequest, /
    ) -> Iterable[FieldError] | Awaitable[Iterable[FieldError]]:
        """Return every failure found in `request`."""


def validated_type(cls: type[Any]) -> type[Any]:
    """The request type a validator class checks.

    Raises:
        TypeError: `cls` names no concrete `Request` subclass.
    """
    if not (isinstance(cast(object, cls), type) and Validator in cls.__mro__):
        raise TypeError(
            f"{cls!r} is not a Validator subclass: "
            "derive it from Validator[YourRequest]"
        )
    found = first_type_argument(cls, (Validator,))
    if not is_request_type(found):
        raise TypeError(
            f"{cls.__qualname__} (module {cls.__module__}) must name a concrete "
            f"Request subclass, as in Validator[PlaceOrder], got {found!r}"
        )
    return cast("type[Any]", found)


class ValidatorRegistry:
    """The validator classes registered, by the request type they check."""

    def __init__(self, validators: Iterable[type[Validator[Any]]] = ()) -> None:
        self._by_type: dict[type[Any], list[type[Validator[Any]]]] = {}
        for cls in validators:
            self._by_type.setdefault(validated_type(cls), []).append(cls)

    def for_type(self, request_type: type[Any]) -> list[type[Validator[Any]]]:
        """Validators of `request_type` and of its base classes, base first."""
        return [
            cls
            for base in reversed(request_type.__mro__)
            for cls in self._by_type.get(base, ())
        ]


class ValidationBehavior:
    """Raises one `ValidationError` with every failure of a request, or passes on.

    It runs pydantic's checks again and every `Validator` of the request type.

    It applies only to request types that have validators; others do not see it.
    """

    stage: ClassVar[Stage] = Stage.VALIDATION

    @inject
    def __init__(self, resolver: Wiring, registry: ValidatorRegistry) -> None:
        self._resolver = resolver
        self._registry = registry
        self._checks: dict[type[Any], list[Component[Validator[Any]]]] = {}

    def applies_to(self, request_type: type[Any]) -> bool:
        """Whether the type has validators.

        Raises:
            UnresolvableDependencyError: One of them cannot be built.
        """
        # A validator that cannot be built fails the build.
        return is_request_type(request_type) and bool(self._checks_of(request_type))

    def _checks_of(self, request_type: type[Any]) -> list[Component[Validator[Any]]]:
        try:
            return self._checks[request_type]
        except KeyError:
            checks = self._checks[request_type] = [
                component(self._resolver, cls, kind="validator", method="validate")
                for cls in self._registry.for_type(request_type)
            ]
            return checks

    async def handle(self, request: Any, next: Next[Any]) -> Any:
        """Validate, then run the rest of the chain."""
        errors = _model_errors(request)
        for check in self._checks_of(type_of(request)):
            found = check.make().validate(request)
            if check.is_async:
                found = await cast("Awaitable[Iterable[FieldError]]", found)
            errors.extend(cast("Iterable[FieldError]", found))
        _raise_if_any(request, errors)
        return await next()

    def handle_sync(self, request: Any, next: SyncNext[Any]) -> Any:
        """The same on the sync path; an async validator is refused by name."""
        errors = _model_errors(request)
        for check in self._checks_of(type_of(request)):
            found = check.make_sync().validate(request)
            errors.extend(cast("Iterable[FieldError]", found))
        _raise_if_any(request, errors)
        return next()


def _model_errors(request: Request[Any]) -> list[FieldError]:
    # A request built with model_construct(), or from a subclass that skipped
    # validation, has not been through pydantic: run it again, field by field.
    try:
        type(request).__pydantic_validator__.validate_python(
            dict(request), by_alias=False, by_name=True
        )
    except pydantic.ValidationError as error:
        return field_errors(error)
    return []


def field_errors(error: pydantic.ValidationError) -> list[FieldError]:
    """Pydantic's errors as `FieldError`s, paths and messages kept."""
    return [FieldError(tuple(item["loc"]), item["msg"]) for item in error.errors()]


def _raise_if_any(request: Request[Any], errors: list[FieldError]) -> None:
    if errors:
        count = len(errors)
        raise ValidationError(
            f"{type(request).__qualname__} is invalid: {count} "
            f"error{'s' if count != 1 else ''}",
            errors,
        )
