"""Idempotent commands and their handlers, for the behavior's tests."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from injector import Injector, Module, inject
from pydantic import BaseModel

from mediator import (
    BusinessRuleError,
    Command,
    CommandHandler,
    FieldError,
    Mediator,
    MediatorModule,
    ValidationError,
    derive_idempotency_key,
    idempotent,
    transactional,
)
from tests.mediator.idempotency.fakes import World


class Receipt(BaseModel):
    charge_id: str
    cents: int


class InsufficientFunds(BusinessRuleError):
    """A user's domain error with mediator's constructor."""


class CardDeclined(BusinessRuleError):
    """A user's domain error with a constructor of its own."""

    def __init__(self, code: int) -> None:
        super().__init__(f"declined with code {code}")
        self.code = code


@idempotent(key="request_id")
@transactional
class Charge(Command[Receipt]):
    request_id: str | None = None
    cents: int
    fail: str | None = None  # "funds", "declined", "invalid", "crash"


class ChargeHandler(CommandHandler[Charge, Receipt]):
    @inject
    def __init__(self, world: World) -> None:
        self.world = world

    def handle(self, request: Charge) -> Receipt:
        self.world.journal.append("handler")
        self.world.db.effect(f"charge {request.cents}")
        if self.world.during is not None:
            self.world.during(request)
        if request.fail == "funds":
            raise InsufficientFunds(f"{request.cents} is more than the balance")
        if request.fail == "declined":
            raise CardDeclined(51)
        if request.fail == "invalid":
            raise ValidationError("bad", [FieldError(("cents",), "too many")])
        if request.fail == "crash":
            raise RuntimeError("the handler crashed")
        return Receipt(
            charge_id=derive_idempotency_key("charge") or "none", cents=request.cents
        )


@idempotent
class Note(Command[int]):
    """Not transactional: finished after the handler returns."""

    text: str


class NoteHandler(CommandHandler[Note, int]):
    @inject
    def __init__(self, world: World) -> None:
        self.world = world

    def handle(self, request: Note) -> int:
        self.world.journal.append("handler")
        self.world.db.effect(f"note {request.text}")
        return len(self.world.db.effects)


@idempotent
@transactional
class Forget(Command[None]):
    what: str


class ForgetHandler(CommandHandler[Forget, None]):
    @inject
    def __init__(self, world: World) -> None:
        self.world = world

    def handle(self, request: Forget) -> None:
        self.world.journal.append("handler")
        self.world.db.effect(f"forget {request.what}")


@idempotent
@transactional
class Tag(Command[list[str]]):
    tags: list[str]


class TagHandler(CommandHandler[Tag, list[str]]):
    @inject
    def __init__(self, world: World) -> None:
        self.world = world

    def handle(self, request: Tag) -> list[str]:
        self.world.journal.append("handler")
        self.world.db.effect("tag")
        return sorted(request.tags)


@transactional
class Checkout(Command[str]):
    """Not idempotent itself; sends an idempotent `Note`, then maybe fails."""

    text: str
    fail: bool = False


class CheckoutHandler(CommandHandler[Checkout, str]):
    @inject
    def __init__(self, world: World, mediator: Mediator) -> None:
        self.world = world
        self.mediator = mediator

    def handle(self, request: Checkout) -> str:
        self.world.journal.append("checkout")
        self.world.db.effect("checkout")
        self.mediator.send_sync(Note(text=request.text))
        if request.fail:
            raise RuntimeError("checkout failed after the note")
        return "ok"


HANDLERS: tuple[type[Any], ...] = (
    ChargeHandler,
    NoteHandler,
    ForgetHandler,
    TagHandler,
    CheckoutHandler,
)


def build(
    world: World,
    *modules: Module,
    behaviors: tuple[Any, ...] = (),
    **options: Any,
) -> Mediator:
    configure: Callable[[Any], object] = lambda m: (  # noqa: E731
        m.add_handler(*HANDLERS).add_behavior(*behaviors).use_defaults()
    )
    return Injector([MediatorModule(configure), world.module(**options), *modules]).get(
        Mediator
    )
