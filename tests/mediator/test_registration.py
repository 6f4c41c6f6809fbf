"""Registration: discovery, and everything checked when the mediator is built."""

from __future__ import annotations

import abc
from collections.abc import AsyncIterator
from decimal import Decimal
from typing import Any, Protocol

import pytest
from injector import Injector, inject

from mediator import (
    CommandHandler,
    ConfigurationError,
    DuplicateHandlerError,
    HandlerNotFoundError,
    Mediator,
    MediatorModule,
    Notification,
    Query,
    QueryHandler,
    Stage,
    StreamHandler,
    StreamQuery,
    UnresolvableDependencyError,
)
from tests.mediator import features
from tests.mediator._support.support import build
from tests.mediator.features.billing.charges import Ledger
from tests.mediator.features.messages import Charge, Charged, GetPrice, ListSkus

pytestmark = pytest.mark.anyio


class Ping(Query[int]):
    n: int


class PingHandler(QueryHandler[Ping, int]):
    async def handle(self, request: Ping) -> int:
        return request.n


async def test_register_from_finds_handlers_in_subpackages() -> None:
    mediator = build(lambda m: m.register_from(features))

    assert await mediator.send(GetPrice(sku="A")) == Decimal("9.99")
    assert await mediator.send(Charge(amount=Decimal(5))) == "ch-1"
    assert [s async for s in mediator.stream(ListSkus(count=2))] == ["sku-0", "sku-1"]


async def test_register_from_accepts_dotted_names_and_modules_alike() -> None:
    by_name = build(lambda m: m.register_from("tests.mediator.features"))
    by_module = build(lambda m: m.register_from(features))

    assert await by_name.send(GetPrice(sku="B")) == await by_module.send(
        GetPrice(sku="B")
    )


async def test_registering_the_same_package_twice_is_not_a_duplicate() -> None:
    mediator = build(lambda m: m.register_from(features, "tests.mediator.features"))

    assert await mediator.send(GetPrice(sku="A")) == Decimal("9.99")


def test_register_from_rejects_what_is_not_a_module() -> None:
    with pytest.raises(TypeError, match="register_from takes modules or packages"):
        build(lambda m: m.register_from(42))  # type: ignore[arg-type]


def test_register_from_reports_a_module_that_does_not_exist() -> None:
    with pytest.raises(ModuleNotFoundError, match="no_such_feature"):
        build(lambda m: m.register_from("tests.mediator.no_such_feature"))


def test_duplicate_handler_names_both_handlers_and_the_request_type() -> None:
    with pytest.raises(DuplicateHandlerError) as caught:
        build(lambda m: m.register_from("tests.mediator.duplicates"))

    message = str(caught.value)
    assert "Lookup (module tests.mediator.duplicates.first)" in message
    assert "FirstLookupHandler (module tests.mediator.duplicates.first)" in message
    assert "SecondLookupHandler (module tests.mediator.duplicates.second)" in message


def test_duplicate_is_reported_when_the_mediator_is_built_not_at_first_send() -> None:
    class OtherPingHandler(QueryHandler[Ping, int]):
        def handle(self, request: Ping) -> int:
            return 0

    module = MediatorModule(lambda m: m.add_handler(PingHandler, OtherPingHandler))

    with pytest.raises(DuplicateHandlerError, match="PingHandler"):
        Injector([module]).get(Mediator)


def test_notifications_may_have_many_handlers() -> None:
    class First(CommandHandler[Charge, str]):
        def handle(self, request: Charge) -> str:
            return ""

    build(lambda m: m.register_from(features))  # RecordCharge + nothing else: fine
    with pytest.raises(DuplicateHandlerError):
        build(lambda m: m.register_from(features).add_handler(First))


async def test_unknown_request_names_the_type_and_the_registered_modules() -> None:
    mediator = build(lambda m: m.register_from(features).add_handler(PingHandler))

    class Unknown(Query[int]):
        pass

    with pytest.raises(HandlerNotFoundError) as caught:
        await mediator.send(Unknown())

    message = str(caught.value)
    assert f"Unknown (module {__name__})" in message
    assert "tests.mediator.features" in message
    assert __name__ in message  # the module of PingHandler, added one by one


async def test_unknown_request_is_raised_when_awaited_not_when_called() -> None:
    mediator = build(lambda m: None)

    pending = mediator.send(Ping(n=1))  # no exception yet: send returns a coroutine

    with pytest.raises(HandlerNotFoundError, match="register_from was not called"):
        await pending


async def test_unknown_types_get_a_hint_about_the_right_method() -> None:
    mediator = build(lambda m: m.register_from(features))

    with pytest.raises(HandlerNotFoundError, match=r"use mediator\.stream\(\)"):
        await mediator.send(ListSkus(count=1))  # type: ignore[arg-type]
    with pytest.raises(HandlerNotFoundError, match=r"use mediator\.send\(\)"):
        mediator.stream(Ping(n=1))  # type: ignore[arg-type]
    with pytest.raises(HandlerNotFoundError, match=r"use mediator\.publish\(\)"):
        mediator.send_sync(Charged(charge_id="x"))  # type: ignore[arg-type]
    with pytest.raises(
        HandlerNotFoundError, match="Only Command, Query and StreamQuery"
    ):
        await mediator.send(object())  # type: ignore[arg-type]


# --- constructor dependencies, checked when the injector builds the mediator ----


class Repository(Protocol):
    def load(self) -> str: ...


class Store(abc.ABC):
    @abc.abstractmethod
    def load(self) -> str: ...


class NeedsRepository(QueryHandler[Ping, int]):
    @inject
    def __init__(self, repository: Repository) -> None:
        self.repository = repository

    def handle(self, request: Ping) -> int:
        return 0


class NeedsStore(QueryHandler[Ping, int]):
    @inject
    def __init__(self, store: Store) -> None:
        self.store = store

    def handle(self, request: Ping) -> int:
        return 0


class Transitive:
    @inject
    def __init__(self, store: Store) -> None:
        self.store = store


class NeedsTransitive(QueryHandler[Ping, int]):
    @inject
    def __init__(self, service: Transitive) -> None:
        self.service = service

    def handle(self, request: Ping) -> int:
        return 0


class NotInjected(QueryHandler[Ping, int]):
    def __init__(self, ledger: Ledger) -> None:
        self.ledger = ledger

    def handle(self, request: Ping) -> int:
        return 0


@pytest.mark.parametrize(
    ("handler", "fragment"),
    [
        (
            NeedsRepository,
            "NeedsRepository -> Repository is abstract and has no binding",
        ),
        (NeedsStore, "NeedsStore -> Store is abstract"),
        (NeedsTransitive, "NeedsTransitive -> Transitive -> Store is abstract"),
        (
            NotInjected,
            "needs 'ledger' but NotInjected.__init__ is not decorated with @inject",
        ),
    ],
)
def test_unresolvable_dependency_names_handler_request_and_path(
    handler: type[Any], fragment: str
) -> None:
    module = MediatorModule(lambda m: m.add_handler(handler))

    with pytest.raises(UnresolvableDependencyError) as caught:
        Injector([module]).get(Mediator)

    message = str(caught.value)
    assert f"handler {handler.__qualname__} (module {__name__})" in message
    assert f"for Ping (module {__name__})" in message
    assert fragment in message


def test_a_bound_implementation_resolves_the_same_dependency() -> None:
    class FileStore(Store):
        def load(self) -> str:
            return "file"

    def bind(binder: Any) -> None:
        binder.bind(Store, to=FileStore)

    mediator = Injector(
        [bind, MediatorModule(lambda m: m.add_handler(NeedsTransitive))]
    ).get(Mediator)

    assert mediator.send_sync(Ping(n=1)) == 0


def test_circular_dependencies_are_reported() -> None:
    class Chicken:
        @inject
        def __init__(self, egg: Egg) -> None: ...

    class Egg:
        @inject
        def __init__(self, chicken: Chicken) -> None: ...

    class Farm(QueryHandler[Ping, int]):
        @inject
        def __init__(self, chicken: Chicken) -> None: ...

        def handle(self, request: Ping) -> int:
            return 0

    globals()["Egg"] = Egg  # the forward reference must resolve for @inject
    globals()["Chicken"] = Chicken
    try:
        with pytest.raises(UnresolvableDependencyError, match="circular dependency"):
            Injector([MediatorModule(lambda m: m.add_handler(Farm))]).get(Mediator)
    finally:
        del globals()["Egg"], globals()["Chicken"]


# --- handler classes that cannot be registered ----------------------------------


def test_add_handler_rejects_non_handlers_and_abstract_handlers() -> None:
    class Plain:
        def handle(self, request: Ping) -> int:
            return 0

    class Abstract(QueryHandler[Ping, int]):
        pass

    with pytest.raises(TypeError, match=r"Plain .* is not a handler"):
        MediatorModule(lambda m: m.add_handler(Plain))
    with pytest.raises(TypeError, match=r"Abstract .* is abstract: implement handle"):
        MediatorModule(lambda m: m.add_handler(Abstract))


def test_a_request_handler_may_not_yield() -> None:
    class Yields(QueryHandler[Ping, int]):
        async def handle(self, request: Ping) -> AsyncIterator[int]:  # type: ignore[override]
            yield 1

    with pytest.raises(TypeError, match="only StreamHandler may yield"):
        MediatorModule(lambda m: m.add_handler(Yields))


def test_a_stream_handler_must_yield_not_return() -> None:
    class Items(StreamQuery[int]):
        pass

    class Returns(StreamHandler[Items, int]):
        async def handle(self, query: Items) -> list[int]:  # type: ignore[override]
            return [1]

    with pytest.raises(TypeError, match="must yield items"):
        MediatorModule(lambda m: m.add_handler(Returns))


def test_the_message_type_must_fit_the_handler_family() -> None:
    class Wrong(QueryHandler[Charged, int]):  # type: ignore[type-var]
        def handle(self, request: Charged) -> int:
            return 0

    with pytest.raises(TypeError, match="must name a concrete Request subclass"):
        MediatorModule(lambda m: m.add_handler(Wrong))


def test_generic_intermediate_handlers_resolve_their_request_type() -> None:
    from tests.mediator.features.catalog.prices import CachedHandler

    class Concrete(CachedHandler[Ping, int]):
        def handle(self, request: Ping) -> int:
            return request.n * 2

    class Deeper(Concrete):
        pass

    assert build(lambda m: m.add_handler(Deeper)).send_sync(Ping(n=4)) == 8


# --- behaviors that cannot be used ----------------------------------------------


async def test_behaviors_without_a_stage_are_rejected_under_use_defaults() -> None:
    class NoStage:
        async def handle(self, request: Any, next: Any) -> Any:
            return await next()

    with pytest.raises(ConfigurationError, match=r"NoStage .* declares no stage"):
        build(lambda m: m.add_handler(PingHandler).add_behavior(NoStage).use_defaults())
    # A hand-wired chain orders by registration and needs no stage.
    hand_wired = build(lambda m: m.add_handler(PingHandler).add_behavior(NoStage))
    assert await hand_wired.send(Ping(n=3)) == 3


def test_a_behavior_handle_must_be_async() -> None:
    class SyncOnly:
        stage = Stage.AUDIT

        def handle(self, request: Any, next: Any) -> Any:
            return next()

    with pytest.raises(ConfigurationError, match="must define `async def handle"):
        build(lambda m: m.add_handler(PingHandler).add_behavior(SyncOnly))


def test_a_behavior_registered_twice_is_rejected() -> None:
    class Twice:
        stage = Stage.AUDIT

        async def handle(self, request: Any, next: Any) -> Any:
            return await next()

    with pytest.raises(ConfigurationError, match=r"Twice .* is registered twice"):
        build(lambda m: m.add_handler(PingHandler).add_behavior(Twice, Twice))


def test_behavior_dependencies_are_checked_too() -> None:
    class NeedsStoreBehavior:
        stage = Stage.AUDIT

        @inject
        def __init__(self, store: Store) -> None: ...

        async def handle(self, request: Any, next: Any) -> Any:
            return await next()

    with pytest.raises(
        UnresolvableDependencyError,
        match=r"behavior .*NeedsStoreBehavior \(module .*Store is abstract",
    ):
        build(lambda m: m.add_handler(PingHandler).add_behavior(NeedsStoreBehavior))


def test_stage_values_must_be_integers() -> None:
    with pytest.raises(TypeError, match="Stage value must be an int"):
        Stage(1.5, "HALF")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="Stage value must be an int"):
        Stage(True, "BOOL")


def test_stages_order_by_value_and_leave_room_between() -> None:
    tenancy = Stage(350, "TENANCY")

    assert Stage.AUDIT < Stage.VALIDATION < Stage.AUTHORIZATION < Stage.RETRY
    assert Stage.RETRY < Stage.TRANSACTION
    assert Stage.AUTHORIZATION < Stage.IDEMPOTENCY < Stage.RETRY
    assert repr(Stage.IDEMPOTENCY) == "Stage(350, 'IDEMPOTENCY')"
    assert Stage.AUTHORIZATION < tenancy < Stage.RETRY
    assert Stage(350) == tenancy  # names are labels; order and equality use the value
    assert repr(tenancy) == "Stage(350, 'TENANCY')"


def test_notification_type_check_is_generic() -> None:
    class Event(Notification):
        pass

    assert Event().model_config.get("frozen") is True
