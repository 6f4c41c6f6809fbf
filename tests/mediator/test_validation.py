"""ValidationBehavior and `Validator[T]`: every failure of a request, at once."""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable
from types import ModuleType
from typing import Any

import pytest
from injector import Binder, Injector, Module, inject
from pydantic import Field

import tests.mediator.validated
from mediator import (
    Command,
    CommandHandler,
    DomainError,
    FieldError,
    Mediator,
    MediatorConfig,
    MediatorModule,
    Query,
    QueryHandler,
    RequestScope,
    SyncPathError,
    ValidationBehavior,
    ValidationError,
    Validator,
)
from tests.mediator.validated.messages import SignUp
from tests.mediator.validated.signup import Directory

pytestmark = pytest.mark.anyio


def mediator_with(
    configure: Callable[[MediatorConfig], object],
    *,
    directory: Directory | None = None,
    extra: Module | None = None,
) -> Mediator:
    def bind(binder: Binder) -> None:
        binder.bind(Directory, to=directory or Directory())

    modules: list[Any] = [bind, MediatorModule(configure)]
    if extra is not None:
        modules.append(extra)
    return Injector(modules).get(Mediator)


def unchecked(cls: type[Any], **fields: Any) -> Any:
    """A request built without pydantic's checks, as `model_construct` does."""
    return cls.model_construct(**fields)


# --- aggregation ------------------------------------------------------------------


@pytest.mark.parametrize(
    "package", ["tests.mediator.validated", tests.mediator.validated]
)
async def test_every_failure_comes_together_in_one_validation_error(
    package: ModuleType | str,
) -> None:
    directory = Directory("ada")
    mediator = mediator_with(
        lambda m: m.register_from(package).use_defaults(), directory=directory
    )
    request = unchecked(SignUp, name="ada", email="nope", age="old")

    with pytest.raises(ValidationError) as caught:
        await mediator.send(request)

    assert str(caught.value) == "SignUp is invalid: 3 errors"
    assert caught.value.errors == (
        FieldError(
            ("age",),
            "Input should be a valid integer, unable to parse string as an integer",
        ),
        FieldError(("email",), "must contain @"),
        FieldError(("name",), "ada is taken"),
    )
    assert directory.signed_up == []  # the handler never ran


async def test_a_single_failure_is_one_error() -> None:
    directory = Directory("ada")
    mediator = mediator_with(
        lambda m: m.register_from(tests.mediator.validated).use_defaults(),
        directory=directory,
    )

    with pytest.raises(
        ValidationError, match=r"^SignUp is invalid: 1 error$"
    ) as caught:
        await mediator.send(SignUp(name="ada", email="ada@example.org", age=36))

    assert caught.value.errors == (FieldError(("name",), "ada is taken"),)
    assert directory.signed_up == []


async def test_a_valid_request_reaches_the_handler() -> None:
    directory = Directory("ada")
    mediator = mediator_with(
        lambda m: m.register_from(tests.mediator.validated).use_defaults(),
        directory=directory,
    )

    reply = await mediator.send(SignUp(name="grace", email="g@example.org", age=85))

    assert reply == "welcome grace"
    assert directory.signed_up == ["grace"]


async def test_pydantic_failures_alone_are_a_validation_error_too() -> None:
    directory = Directory()
    mediator = mediator_with(
        lambda m: m.register_from(tests.mediator.validated).use_defaults(),
        directory=directory,
    )

    with pytest.raises(ValidationError, match=r"^SignUp is invalid: 1 error$") as e:
        await mediator.send(unchecked(SignUp, name="x", email="x@y", age=[1]))

    assert e.value.errors == (FieldError(("age",), "Input should be a valid integer"),)
    assert isinstance(e.value, DomainError)
    assert directory.signed_up == []


# --- validators added one by one ---------------------------------------------------


class Rename(Command[str]):
    name: str


class RenameHandler(CommandHandler[Rename, str]):
    def handle(self, request: Rename) -> str:
        return f"renamed to {request.name}"


class NoOuterSpaces(Validator[Rename]):
    def validate(self, request: Rename) -> list[FieldError]:
        if request.name.strip() != request.name:
            return [FieldError(("name",), "no outer spaces")]
        return []


class NotEmpty(Validator[Rename]):
    def validate(self, request: Rename) -> list[FieldError]:
        if not request.name.strip():
            return [FieldError(("name",), "must not be empty")]
        return []


async def test_add_validator_registers_validators_in_order() -> None:
    mediator = mediator_with(
        lambda m: (
            m.add_handler(RenameHandler)
            .add_validator(NotEmpty, NoOuterSpaces)
            .use_defaults()
        )
    )

    with pytest.raises(ValidationError) as caught:
        await mediator.send(Rename(name="  "))

    assert str(caught.value) == "Rename is invalid: 2 errors"
    assert caught.value.errors == (
        FieldError(("name",), "must not be empty"),
        FieldError(("name",), "no outer spaces"),
    )
    assert await mediator.send(Rename(name="Ada")) == "renamed to Ada"


def test_add_validator_returns_the_configuration_for_chaining() -> None:
    config = MediatorConfig()

    assert config.add_validator(NotEmpty) is config


class NotAValidator:
    def validate(self, request: Rename) -> list[FieldError]:
        return []


class OfAnInt(Validator[int]):  # type: ignore[type-var]  # pyright: ignore[reportInvalidTypeArgument]
    def validate(self, request: int) -> list[FieldError]:
        return []


@pytest.mark.parametrize("cls", [NotAValidator, RenameHandler])
def test_add_validator_refuses_what_is_not_a_validator_by_name(cls: type[Any]) -> None:
    with pytest.raises(TypeError) as caught:
        MediatorConfig().add_validator(cls)

    assert str(caught.value) == (
        f"{cls!r} is not a Validator subclass: derive it from Validator[YourRequest]"
    )


def test_add_validator_refuses_a_validator_of_something_that_is_no_request() -> None:
    with pytest.raises(TypeError) as caught:
        MediatorConfig().add_validator(OfAnInt)

    assert str(caught.value) == (
        "OfAnInt (module tests.mediator.test_validation) must name a "
        "concrete Request subclass, as in Validator[PlaceOrder], got <class 'int'>"
    )


def test_add_validator_refuses_a_function_with_a_type_error_naming_it() -> None:
    def not_a_class(request: Rename) -> list[FieldError]:
        return []

    with pytest.raises(TypeError, match="not_a_class"):
        MediatorConfig().add_validator(not_a_class)  # type: ignore[arg-type]  # pyright: ignore[reportArgumentType]


# --- base classes -----------------------------------------------------------------


class Named(Command[str]):
    name: str


class RenameProduct(Named):
    sku: str


class RenameProductHandler(CommandHandler[RenameProduct, str]):
    def handle(self, request: RenameProduct) -> str:
        return f"{request.sku} is now {request.name}"


class NamedIsCapitalised(Validator[Named]):
    def validate(self, request: Named) -> list[FieldError]:
        if not request.name[:1].isupper():
            return [FieldError(("name",), "must start with a capital")]
        return []


class SkuIsKnown(Validator[RenameProduct]):
    def validate(self, request: RenameProduct) -> list[FieldError]:
        if not request.sku.startswith("SKU-"):
            return [FieldError(("sku",), "unknown sku")]
        return []


async def test_a_validator_of_a_base_class_checks_subclasses_base_first() -> None:
    mediator = mediator_with(
        lambda m: (
            m.add_handler(RenameProductHandler)
            .add_validator(SkuIsKnown, NamedIsCapitalised)
            .use_defaults()
        )
    )

    with pytest.raises(ValidationError) as caught:
        await mediator.send(RenameProduct(name="lamp", sku="X"))

    assert caught.value.errors == (
        FieldError(("name",), "must start with a capital"),
        FieldError(("sku",), "unknown sku"),
    )
    assert (
        await mediator.send(RenameProduct(name="Lamp", sku="SKU-1"))
        == "SKU-1 is now Lamp"
    )


# --- dependencies -----------------------------------------------------------------

_ids = itertools.count(1)


class Session:
    """Request-scoped: one per send, shared by the validator and the handler."""

    def __init__(self) -> None:
        self.id = next(_ids)


class Seen:
    def __init__(self) -> None:
        self.entries: list[tuple[str, int]] = []


class Book(Command[str]):
    room: str


class BookHandler(CommandHandler[Book, str]):
    @inject
    def __init__(self, session: Session, seen: Seen) -> None:
        self.session = session
        self.seen = seen

    def handle(self, request: Book) -> str:
        self.seen.entries.append(("handler", self.session.id))
        return f"booked {request.room}"


class RoomExists(Validator[Book]):
    @inject
    def __init__(self, session: Session, seen: Seen) -> None:
        self.session = session
        self.seen = seen

    async def validate(self, request: Book) -> list[FieldError]:
        self.seen.entries.append(("validator", self.session.id))
        return []


class Scoped(Module):
    def __init__(self, seen: Seen) -> None:
        self.seen = seen

    def configure(self, binder: Binder) -> None:
        binder.bind(Session, to=Session, scope=RequestScope)
        binder.bind(Seen, to=self.seen)


async def test_validators_get_injected_and_request_scoped_dependencies() -> None:
    seen = Seen()
    mediator = mediator_with(
        lambda m: m.add_handler(BookHandler).add_validator(RoomExists).use_defaults(),
        extra=Scoped(seen),
    )

    await mediator.send(Book(room="A"))
    await mediator.send(Book(room="B"))

    [(_, first), (_, first_again), (_, second), (_, second_again)] = seen.entries
    assert [name for name, _ in seen.entries] == [
        "validator", "handler", "validator", "handler"
    ]  # fmt: skip
    assert first == first_again  # one session per send, shared
    assert second == second_again
    assert first != second  # and a fresh one for the next send


# --- the sync path ----------------------------------------------------------------


def test_send_sync_refuses_an_async_validator_by_name() -> None:
    directory = Directory()
    mediator = mediator_with(
        lambda m: m.register_from(tests.mediator.validated).use_defaults(),
        directory=directory,
    )

    with pytest.raises(
        SyncPathError,
        match=re.escape(
            "validator NameIsFree (module tests.mediator.validated.signup) is async, "
            "so send_sync cannot run it: await mediator.send(...) instead, or make "
            "validate() a plain def"
        ),
    ):
        mediator.send_sync(SignUp(name="ada", email="a@b", age=1))
    assert directory.signed_up == []


def test_send_sync_runs_sync_validators() -> None:
    mediator = mediator_with(
        lambda m: (
            m.add_handler(RenameHandler)
            .add_validator(NotEmpty, NoOuterSpaces)
            .use_defaults()
        )
    )

    assert mediator.send_sync(Rename(name="Ada")) == "renamed to Ada"
    with pytest.raises(ValidationError, match=r"^Rename is invalid: 2 errors$") as e:
        mediator.send_sync(Rename(name=" "))
    assert e.value.errors == (
        FieldError(("name",), "must not be empty"),
        FieldError(("name",), "no outer spaces"),
    )


# --- requests without validators --------------------------------------------------


class Lookup(Query[int]):
    sku: str


class LookupHandler(QueryHandler[Lookup, int]):
    async def handle(self, request: Lookup) -> int:
        return len(str(request.sku))


async def test_a_type_without_validators_has_no_validation_in_its_route() -> None:
    with_behavior = mediator_with(
        lambda m: (
            m.add_handler(LookupHandler, RenameHandler)
            .add_validator(NotEmpty)
            .add_behavior(ValidationBehavior)
        )
    )
    bare = mediator_with(lambda m: m.add_handler(LookupHandler, RenameHandler))

    def code(mediator: Mediator, kind: type[Any]) -> object:
        routes = mediator._send_routes  # pyright: ignore[reportPrivateUsage]
        return routes[kind].__code__

    assert code(with_behavior, Lookup) is code(bare, Lookup)
    assert code(with_behavior, Rename) is not code(bare, Rename)


async def test_a_type_without_validators_is_not_validated_again() -> None:
    mediator = mediator_with(
        lambda m: (
            m.add_handler(LookupHandler, RenameHandler)
            .add_validator(NotEmpty)
            .use_defaults()
        )
    )

    # Not a valid Lookup, but nothing re-checks it: only validated types pay.
    assert await mediator.send(unchecked(Lookup, sku=12345)) == 5
    with pytest.raises(ValidationError):
        await mediator.send(Rename(name=" "))


# --- pydantic's own checks, run again ----------------------------------------------


class Register(Command[str]):
    full_name: str = Field(alias="fullName")


class RegisterHandler(CommandHandler[Register, str]):
    def handle(self, request: Register) -> str:
        return f"registered {request.full_name}"


class FullNameHasASpace(Validator[Register]):
    def validate(self, request: Register) -> list[FieldError]:
        if " " not in request.full_name:
            return [FieldError(("fullName",), "give a first and a last name")]
        return []


async def test_a_valid_request_with_an_aliased_field_passes() -> None:
    mediator = mediator_with(
        lambda m: (
            m.add_handler(RegisterHandler)
            .add_validator(FullNameHasASpace)
            .use_defaults()
        )
    )

    assert await mediator.send(Register(fullName="Ada Lovelace")) == (
        "registered Ada Lovelace"
    )
