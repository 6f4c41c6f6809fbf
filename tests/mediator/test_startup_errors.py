"""Forgotten pieces fail when the mediator is built, naming what to add (issue 24).

A marker whose behavior is not in the request's chain, and a handler needing a
service only a module provides, are refused by `injector.get(Mediator)`; the
right wiring builds and sends.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import httpx
import pytest
from injector import Binder, Injector, Module, inject
from sqlalchemy import Engine, create_engine
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, create_async_engine
from sqlalchemy.orm import Session

from http_resilience.injector import HttpClientFactory, HttpClientsModule
from mediator import (
    Command,
    CommandHandler,
    ConfigurationError,
    Mediator,
    MediatorConfig,
    MediatorModule,
    Query,
    QueryHandler,
    Stage,
    TransactionBehavior,
    UnresolvableDependencyError,
    authorize,
    idempotent,
    transactional,
)
from mediator.sqlalchemy import SqlAlchemyModule
from mediator_resilience import ResilienceMediatorModule, retryable

pytestmark = pytest.mark.anyio


def build(configure: Callable[[MediatorConfig], object], *modules: Module) -> Mediator:
    return Injector([MediatorModule(configure), *modules]).get(Mediator)


# --- markers whose behavior is missing ----------------------------------------------


@retryable
class GetPrice(Query[int]):
    sku: str


class GetPriceHandler(QueryHandler[GetPrice, int]):
    async def handle(self, request: GetPrice) -> int:
        return 42


@retryable
class GetCheapPrice(GetPrice):
    """Inherits the marker, and with it the need."""


class GetCheapPriceHandler(QueryHandler[GetCheapPrice, int]):
    async def handle(self, request: GetCheapPrice) -> int:
        return 1


class Ping(Query[str]):
    pass


class PingHandler(QueryHandler[Ping, str]):
    async def handle(self, request: Ping) -> str:
        return "pong"


def test_a_retryable_request_without_the_retry_module_fails_at_build() -> None:
    with pytest.raises(ConfigurationError) as raised:
        build(lambda m: m.add_handler(GetPriceHandler, PingHandler).use_defaults())

    message = str(raised.value)
    assert message.startswith(
        f"GetPrice (module {__name__}) is marked @retryable, but no behavior of "
        "stage RETRY in the mediator's chain applies to it"
    )
    assert message.endswith(
        "add ResilienceMediatorModule() (from mediator_resilience) to the "
        "Injector's modules, beside MediatorModule"
    )


def test_an_inherited_retryable_mark_needs_the_module_too() -> None:
    with pytest.raises(ConfigurationError, match=r"GetCheapPrice .* @retryable"):
        build(lambda m: m.add_handler(GetCheapPriceHandler))
    # Marked on the base and again on the subclass: the need is declared once.
    assert len(GetCheapPrice.__mediator_requires__) == 1  # type: ignore[attr-defined]


async def test_a_retryable_request_with_the_module_builds_and_sends() -> None:
    defaults = build(
        lambda m: m.add_handler(GetPriceHandler).use_defaults(),
        ResilienceMediatorModule(),
    )
    hand_wired = build(
        lambda m: m.add_handler(GetPriceHandler), ResilienceMediatorModule()
    )

    assert await defaults.send(GetPrice(sku="A")) == 42
    assert await hand_wired.send(GetPrice(sku="A")) == 42


class OwnRetry:
    """A behavior of the application's own at stage RETRY serves the marker."""

    stage: ClassVar[Stage] = Stage.RETRY

    def __init__(self) -> None:
        self.seen: list[object] = []

    async def handle(self, request: object, next: Callable[[], Awaitable[Any]]) -> Any:
        self.seen.append(request)
        return await next()


async def test_any_behavior_of_the_stage_that_applies_serves_the_marker() -> None:
    own = OwnRetry()
    mediator = build(lambda m: m.add_handler(GetPriceHandler).add_behavior(own))

    assert await mediator.send(GetPrice(sku="A")) == 42
    assert own.seen == [GetPrice(sku="A")]


class NotForPrices(OwnRetry):
    def applies_to(self, request_type: type[Any]) -> bool:
        return request_type is not GetPrice


def test_a_behavior_of_the_stage_that_does_not_apply_does_not_serve_it() -> None:
    with pytest.raises(ConfigurationError, match=r"GetPrice .* @retryable"):
        build(lambda m: m.add_handler(GetPriceHandler).add_behavior(NotForPrices()))


@transactional
class PlaceOrder(Command[int]):
    sku: str


class PlaceOrderHandler(CommandHandler[PlaceOrder, int]):
    def handle(self, request: PlaceOrder) -> int:
        return 7


@authorize(roles=["admin"])
class Refund(Command[None]):
    order: int


class RefundHandler(CommandHandler[Refund, None]):
    async def handle(self, request: Refund) -> None:
        return None


@idempotent(key="request_id")
class Charge(Command[int]):
    request_id: str


class ChargeHandler(CommandHandler[Charge, int]):
    async def handle(self, request: Charge) -> int:
        return 1


@pytest.mark.parametrize(
    ("handler", "request_name", "marker", "behavior"),
    [
        (PlaceOrderHandler, "PlaceOrder", "@transactional", "TransactionBehavior"),
        (RefundHandler, "Refund", "@authorize", "AuthorizationBehavior"),
        (ChargeHandler, "Charge", "@idempotent", "IdempotencyBehavior"),
    ],
)
def test_a_mediator_marker_in_a_hand_wired_chain_without_its_behavior_fails(
    handler: type[Any], request_name: str, marker: str, behavior: str
) -> None:
    with pytest.raises(ConfigurationError) as raised:
        build(lambda m: m.add_handler(handler, PingHandler))

    assert str(raised.value) == (
        f"{request_name} (module {__name__}) is marked {marker}, but no behavior "
        f"of stage {behavior.removesuffix('Behavior').upper()} in the mediator's "
        "chain applies to it, so the marker would do nothing: call "
        ".use_defaults() in the MediatorModule callback, or "
        f".add_behavior({behavior})"
    )


def test_a_hand_wired_chain_with_the_behavior_builds_and_runs_it(
    tmp_path: Path,
) -> None:
    engine = create_engine(f"sqlite:///{tmp_path / 'orders.db'}")
    mediator = build(
        lambda m: m.add_handler(PlaceOrderHandler).add_behavior(TransactionBehavior),
        SqlAlchemyModule(engine=engine),
    )

    assert mediator.send_sync(PlaceOrder(sku="A")) == 7
    engine.dispose()


@dataclass(frozen=True)
class Malformed:
    marker: str = "@audited"


class Audited(Query[int]):
    pass


Audited.__mediator_requires__ = (Malformed(),)  # type: ignore[attr-defined]


class AuditedHandler(QueryHandler[Audited, int]):
    async def handle(self, request: Audited) -> int:
        return 0


def test_a_need_declared_wrong_by_another_package_names_the_decorator() -> None:
    with pytest.raises(ConfigurationError, match=r"Audited .*__mediator_requires__"):
        build(lambda m: m.add_handler(AuditedHandler))


@dataclass(frozen=True)
class AuditNeed:
    """Another package's need, by convention: marker, stage, install."""

    marker: str
    stage: Stage
    install: str


class Traced(Query[int]):
    pass


Traced.__mediator_requires__ = (  # type: ignore[attr-defined]
    AuditNeed("@traced", Stage.AUDIT, "add TracingModule() (from tracing)"),
)


class TracedHandler(QueryHandler[Traced, int]):
    async def handle(self, request: Traced) -> int:
        return 3


async def test_another_packages_need_is_read_by_convention() -> None:
    with pytest.raises(ConfigurationError, match=r"@traced.*TracingModule\(\)"):
        build(lambda m: m.add_handler(TracedHandler))

    mediator = build(lambda m: m.add_handler(TracedHandler).use_defaults())
    assert await mediator.send(Traced()) == 3  # AuditBehavior is at AUDIT


# --- services only a module provides ------------------------------------------------


class Lookup(Query[int]):
    pass


class ClientsHandler(QueryHandler[Lookup, int]):
    @inject
    def __init__(self, clients: HttpClientFactory) -> None:
        self.clients = clients

    async def handle(self, request: Lookup) -> int:
        response = await self.clients.async_client("inventory").get("/stock")
        return response.status_code


def inventory_clients() -> HttpClientsModule:
    return HttpClientsModule(
        lambda clients: clients.add(
            "inventory",
            base_url="http://inventory.local",
            transport=httpx.MockTransport(lambda request: httpx.Response(204)),
        )
    )


def test_a_handler_needing_the_http_factory_without_its_module_fails_at_build() -> None:
    with pytest.raises(UnresolvableDependencyError) as raised:
        build(lambda m: m.add_handler(ClientsHandler))

    assert str(raised.value) == (
        f"handler ClientsHandler (module {__name__}) for Lookup (module "
        f"{__name__}): parameter 'clients' of ClientsHandler needs "
        "HttpClientFactory (module http_resilience), which "
        "only a module provides, and none bound it (ClientsHandler -> "
        "HttpClientFactory); add HttpClientsModule(...) from "
        "http_resilience.injector to the Injector's modules"
    )
    assert isinstance(raised.value, ConfigurationError)


async def test_a_handler_needing_the_http_factory_with_its_module_sends() -> None:
    module = inventory_clients()
    mediator = build(lambda m: m.add_handler(ClientsHandler), module)

    assert await mediator.send(Lookup()) == 204
    await module.factory.aclose()


class Inventory:
    @inject
    def __init__(self, clients: HttpClientFactory) -> None:
        self.clients = clients


class DeepLookup(Query[int]):
    pass


class DeepHandler(QueryHandler[DeepLookup, int]):
    @inject
    def __init__(self, inventory: Inventory) -> None:
        self.inventory = inventory

    async def handle(self, request: DeepLookup) -> int:
        return 0


def test_a_service_deeper_down_is_named_with_its_path() -> None:
    with pytest.raises(
        UnresolvableDependencyError,
        match=r"parameter 'clients' of Inventory needs HttpClientFactory .*"
        r"\(DeepHandler -> Inventory -> HttpClientFactory\); add HttpClientsModule",
    ):
        build(lambda m: m.add_handler(DeepHandler))


def test_the_factory_asked_of_a_bare_injector_names_the_module() -> None:
    with pytest.raises(LookupError) as raised:
        Injector().get(HttpClientFactory)

    assert str(raised.value).startswith(
        "HttpClientFactory is provided by HttpClientsModule: add "
        "HttpClientsModule(lambda clients: clients.add(...)) (from "
        "http_resilience.injector) to the Injector's modules"
    )


def test_the_factory_bound_as_an_instance_is_handed_out() -> None:
    factory = HttpClientFactory()

    class Bound(Module):
        def configure(self, binder: Binder) -> None:
            binder.bind(HttpClientFactory, to=factory)

    assert Injector([Bound()]).get(HttpClientFactory) is factory
    module = inventory_clients()
    assert Injector([module]).get(HttpClientFactory) is module.factory


class Report(Query[int]):
    pass


class AsyncSessionHandler(QueryHandler[Report, int]):
    @inject
    def __init__(self, session: AsyncSession) -> None:
        self.session = session

    async def handle(self, request: Report) -> int:
        return 5


class SyncReport(Query[int]):
    pass


class SessionHandler(QueryHandler[SyncReport, int]):
    @inject
    def __init__(self, session: Session) -> None:
        self.session = session

    def handle(self, request: SyncReport) -> int:
        return 6


@pytest.mark.parametrize(
    ("handler", "type_name", "module", "argument"),
    [
        (
            AsyncSessionHandler,
            "AsyncSession (module sqlalchemy.ext.asyncio.session)",
            "SqlAlchemyModule(async_engine=...)",
            "session",
        ),
        (
            SessionHandler,
            "Session (module sqlalchemy.orm.session)",
            "SqlAlchemyModule(engine=...)",
            "session",
        ),
    ],
)
def test_a_handler_needing_a_session_without_the_module_fails_at_build(
    handler: type[Any], type_name: str, module: str, argument: str
) -> None:
    with pytest.raises(UnresolvableDependencyError) as raised:
        build(lambda m: m.add_handler(handler))

    message = str(raised.value)
    assert f"parameter {argument!r} of {handler.__qualname__} needs {type_name}" in (
        message
    )
    assert message.endswith(
        f"add {module} (from mediator.sqlalchemy) to the Injector's modules"
    )
    assert "NameError" not in message


@pytest.fixture
def engines(tmp_path: Path) -> Iterator[tuple[Engine, AsyncEngine]]:
    engine = create_engine(f"sqlite:///{tmp_path / 'sync.db'}")
    async_engine = create_async_engine(f"sqlite+aiosqlite:///{tmp_path / 'a.db'}")
    yield engine, async_engine
    engine.dispose()
    async_engine.sync_engine.dispose()


async def test_a_handler_needing_a_session_with_the_module_sends(
    engines: tuple[Engine, AsyncEngine],
) -> None:
    engine, async_engine = engines
    mediator = build(
        lambda m: m.add_handler(AsyncSessionHandler, SessionHandler),
        SqlAlchemyModule(engine=engine, async_engine=async_engine),
    )

    assert await mediator.send(Report()) == 5
    assert mediator.send_sync(SyncReport()) == 6


class EngineHandler(QueryHandler[Report, int]):
    @inject
    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine

    async def handle(self, request: Report) -> int:
        return 8


async def test_an_engine_nobody_bound_says_to_bind_it(
    engines: tuple[Engine, AsyncEngine],
) -> None:
    _, async_engine = engines
    with pytest.raises(
        UnresolvableDependencyError,
        match=r"needs AsyncEngine .*bind the engine in a Module "
        r"\(binder\.bind\(AsyncEngine, to=engine\)\)",
    ):
        build(lambda m: m.add_handler(EngineHandler))

    class Bound(Module):
        def configure(self, binder: Binder) -> None:
            binder.bind(AsyncEngine, to=async_engine)

    assert (
        await build(lambda m: m.add_handler(EngineHandler), Bound()).send(Report()) == 8
    )
