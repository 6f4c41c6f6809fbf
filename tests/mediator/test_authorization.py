"""`@authorize` and AuthorizationBehavior: roles, policies and resources."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest
from injector import Binder, Injector, Module, inject

from mediator import (
    AuthorizationBehavior,
    Command,
    CommandHandler,
    DomainError,
    ForbiddenError,
    Mediator,
    MediatorConfig,
    MediatorModule,
    Policy,
    Principal,
    PrincipalProvider,
    Query,
    QueryHandler,
    SyncPathError,
    acting_as,
    authorize,
)

pytestmark = pytest.mark.anyio


def principal(id: str, *roles: str) -> Principal:
    return Principal(id, roles=frozenset(roles))


class Orders:
    """Which orders are open; a policy asks it, as it would ask a database."""

    def __init__(self, *open_orders: int) -> None:
        self.open = set(open_orders)


class Journal:
    def __init__(self) -> None:
        self.handled: list[str] = []


# --- roles --------------------------------------------------------------------------


@authorize(roles=["admin", "support"])
class Refund(Command[str]):
    order_id: int


class RefundHandler(CommandHandler[Refund, str]):
    @inject
    def __init__(self, journal: Journal) -> None:
        self.journal = journal

    def handle(self, request: Refund) -> str:
        self.journal.handled.append(f"refund {request.order_id}")
        return f"refunded {request.order_id}"


# --- policies that look at the request ------------------------------------------------


class CancelOrder(Command[str]):
    order_id: int
    owner: str


class OwnsOrder(Policy[CancelOrder]):
    def allows(self, principal: Principal, request: CancelOrder) -> bool:
        return principal.id == request.owner


class OrderIsOpen(Policy[CancelOrder]):
    @inject
    def __init__(self, orders: Orders) -> None:
        self.orders = orders

    async def allows(self, principal: Principal, request: CancelOrder) -> bool:
        return request.order_id in self.orders.open


@authorize(policies=[OwnsOrder, OrderIsOpen])
class Cancel(CancelOrder):
    pass


class CancelHandler(CommandHandler[Cancel, str]):
    @inject
    def __init__(self, journal: Journal) -> None:
        self.journal = journal

    def handle(self, request: Cancel) -> str:
        self.journal.handled.append(f"cancel {request.order_id}")
        return f"cancelled {request.order_id}"


@authorize(policies=[OwnsOrder])
class Archive(CancelOrder):
    pass


class ArchiveHandler(CommandHandler[Archive, str]):
    def handle(self, request: Archive) -> str:
        return f"archived {request.order_id}"


# --- several requirements -------------------------------------------------------------


@authorize(roles=["staff"])
class StaffCommand(Command[str]):
    pass


@authorize(roles=["payroll"])
class RunPayroll(StaffCommand):
    month: str


class RunPayrollHandler(CommandHandler[RunPayroll, str]):
    def handle(self, request: RunPayroll) -> str:
        return f"paid {request.month}"


class SameTenant(Policy[Any]):
    def allows(self, principal: Principal, request: Any) -> bool:
        tenant: str = request.tenant
        return principal.claims.get("tenant") == tenant


@authorize(roles=["clerk"])
@authorize(policies=[SameTenant])
class Invoice(Command[str]):
    tenant: str


class InvoiceHandler(CommandHandler[Invoice, str]):
    def handle(self, request: Invoice) -> str:
        return f"invoiced {request.tenant}"


# --- unmarked -------------------------------------------------------------------------


class Price(Query[int]):
    sku: str


class PriceHandler(QueryHandler[Price, int]):
    async def handle(self, request: Price) -> int:
        return 42


class Report(Query[str]):
    pass


@authorize(roles=["admin"])
class SecretReport(Report):
    pass


class ReportHandler(QueryHandler[Report, str]):
    def handle(self, request: Report) -> str:
        return "report"


class SecretReportHandler(QueryHandler[SecretReport, str]):
    def handle(self, request: SecretReport) -> str:
        return "secret report"


class Infrastructure(Module):
    def __init__(self, journal: Journal, orders: Orders) -> None:
        self.journal = journal
        self.orders = orders

    def configure(self, binder: Binder) -> None:
        binder.bind(Journal, to=self.journal)
        binder.bind(Orders, to=self.orders)


HANDLERS = (
    RefundHandler,
    CancelHandler,
    ArchiveHandler,
    RunPayrollHandler,
    InvoiceHandler,
    PriceHandler,
    ReportHandler,
    SecretReportHandler,
)


@pytest.fixture
def journal() -> Journal:
    return Journal()


@pytest.fixture
def mediator(journal: Journal) -> Mediator:
    module = MediatorModule(lambda m: m.add_handler(*HANDLERS).use_defaults())
    return Injector([module, Infrastructure(journal, Orders(1, 2))]).get(Mediator)


# --- roles --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "roles", [("admin",), ("support",), ("clerk", "support"), ("admin", "support")]
)
async def test_any_one_of_the_roles_is_enough(
    mediator: Mediator, journal: Journal, roles: tuple[str, ...]
) -> None:
    with acting_as(principal("u-1", *roles)):
        assert await mediator.send(Refund(order_id=7)) == "refunded 7"
    assert journal.handled == ["refund 7"]


async def test_a_principal_without_the_roles_is_refused_naming_them(
    mediator: Mediator, journal: Journal
) -> None:
    with (
        acting_as(principal("u-1", "clerk")),
        pytest.raises(ForbiddenError) as caught,
    ):
        await mediator.send(Refund(order_id=7))

    assert str(caught.value) == (
        "Refund refused: requires one of the roles ['admin', 'support']"
    )
    assert journal.handled == []


async def test_no_principal_is_refused(mediator: Mediator, journal: Journal) -> None:
    with pytest.raises(ForbiddenError) as caught:
        await mediator.send(Refund(order_id=7))

    assert str(caught.value) == "Refund refused: no authenticated principal"
    assert journal.handled == []


async def test_acting_as_none_is_anonymous(mediator: Mediator) -> None:
    with (
        acting_as(principal("u-1", "admin")),
        acting_as(None),
        pytest.raises(ForbiddenError, match="no authenticated principal"),
    ):
        await mediator.send(Refund(order_id=7))


def test_forbidden_error_is_a_domain_error() -> None:
    assert issubclass(ForbiddenError, DomainError)


async def test_a_refusal_can_be_caught_as_a_domain_error(mediator: Mediator) -> None:
    with pytest.raises(DomainError):
        mediator.send_sync(Refund(order_id=7))


def test_send_sync_checks_roles_too(mediator: Mediator, journal: Journal) -> None:
    with acting_as(principal("u-1", "support")):
        assert mediator.send_sync(Refund(order_id=3)) == "refunded 3"
    with (
        acting_as(principal("u-1", "guest")),
        pytest.raises(ForbiddenError, match=re.escape("['admin', 'support']")),
    ):
        mediator.send_sync(Refund(order_id=4))
    assert journal.handled == ["refund 3"]


# --- policies -------------------------------------------------------------------------


async def test_sync_and_async_policies_look_at_the_request(
    mediator: Mediator, journal: Journal
) -> None:
    with acting_as(principal("ada")):
        assert await mediator.send(Cancel(order_id=1, owner="ada")) == "cancelled 1"

        with pytest.raises(ForbiddenError) as not_hers:
            await mediator.send(Cancel(order_id=2, owner="grace"))
        with pytest.raises(ForbiddenError) as closed:
            await mediator.send(Cancel(order_id=9, owner="ada"))

    assert str(not_hers.value) == "Cancel refused: policy OwnsOrder refused"
    assert str(closed.value) == "Cancel refused: policy OrderIsOpen refused"
    assert journal.handled == ["cancel 1"]


async def test_policies_get_injected_dependencies(journal: Journal) -> None:
    orders = Orders()
    module = MediatorModule(lambda m: m.add_handler(CancelHandler).use_defaults())
    mediator = Injector([module, Infrastructure(journal, orders)]).get(Mediator)

    with acting_as(principal("ada")):
        with pytest.raises(ForbiddenError, match="policy OrderIsOpen refused"):
            await mediator.send(Cancel(order_id=5, owner="ada"))
        orders.open.add(5)  # the policy asks the same Orders on every send
        assert await mediator.send(Cancel(order_id=5, owner="ada")) == "cancelled 5"


def test_send_sync_runs_a_sync_policy(mediator: Mediator) -> None:
    with acting_as(principal("ada")):
        assert mediator.send_sync(Archive(order_id=1, owner="ada")) == "archived 1"
        with pytest.raises(
            ForbiddenError, match=r"^Archive refused: policy OwnsOrder refused$"
        ):
            mediator.send_sync(Archive(order_id=1, owner="grace"))


def test_send_sync_refuses_an_async_policy_by_name(
    mediator: Mediator, journal: Journal
) -> None:
    with (
        acting_as(principal("ada")),
        pytest.raises(SyncPathError) as caught,
    ):
        mediator.send_sync(Cancel(order_id=1, owner="ada"))

    assert str(caught.value) == (
        f"policy OrderIsOpen (module {__name__}) is async, so send_sync cannot "
        "run it: await "
        "mediator.send(...) instead, or make allows() a plain def"
    )
    assert journal.handled == []


# --- several requirements -------------------------------------------------------------


@pytest.mark.parametrize(
    ("roles", "refusal"),
    [
        ((), "RunPayroll refused: requires one of the roles ['staff']"),
        (("payroll",), "RunPayroll refused: requires one of the roles ['staff']"),
        (("staff",), "RunPayroll refused: requires one of the roles ['payroll']"),
        (("staff", "payroll"), None),
    ],
)
async def test_authorize_on_a_base_class_must_pass_too(
    mediator: Mediator, roles: tuple[str, ...], refusal: str | None
) -> None:
    with acting_as(principal("u-1", *roles)):
        if refusal is None:
            assert await mediator.send(RunPayroll(month="May")) == "paid May"
            return
        with pytest.raises(ForbiddenError) as caught:
            await mediator.send(RunPayroll(month="May"))
    assert str(caught.value) == refusal


@pytest.mark.parametrize(
    ("who", "refusal"),
    [
        (
            Principal("u-1", frozenset({"clerk"}), {"tenant": "other"}),
            "Invoice refused: policy SameTenant refused",
        ),
        (
            Principal("u-1", frozenset({"guest"}), {"tenant": "acme"}),
            "Invoice refused: requires one of the roles ['clerk']",
        ),
        (Principal("u-1", frozenset({"clerk"}), {"tenant": "acme"}), None),
    ],
)
async def test_several_authorize_on_one_class_must_all_pass(
    mediator: Mediator, who: Principal, refusal: str | None
) -> None:
    with acting_as(who):
        if refusal is None:
            assert await mediator.send(Invoice(tenant="acme")) == "invoiced acme"
            return
        with pytest.raises(ForbiddenError) as caught:
            await mediator.send(Invoice(tenant="acme"))
    assert str(caught.value) == refusal


# --- requests without @authorize ------------------------------------------------------


async def test_an_unmarked_request_is_never_checked(mediator: Mediator) -> None:
    assert await mediator.send(Price(sku="A")) == 42  # no principal at all


async def test_an_unmarked_request_has_no_authorization_in_its_route(
    journal: Journal,
) -> None:
    def build(configure: Callable[[MediatorConfig], object]) -> Mediator:
        module = MediatorModule(configure)
        return Injector([module, Infrastructure(journal, Orders())]).get(Mediator)

    with_behavior = build(
        lambda m: m.add_handler(PriceHandler, RefundHandler).add_behavior(
            AuthorizationBehavior
        )
    )
    # Without the behavior, a @authorize request fails the build (see
    # tests/mediator/test_startup_errors.py): the bare mediator has Price only.
    bare = build(lambda m: m.add_handler(PriceHandler))

    def code(mediator: Mediator, kind: type[Any]) -> object:
        routes = mediator._send_routes  # pyright: ignore[reportPrivateUsage]
        return routes[kind].__code__

    assert code(with_behavior, Price) is code(bare, Price)
    assert code(with_behavior, Refund) is not code(bare, Price)
    assert await with_behavior.send(Price(sku="A")) == 42


# --- the principal from elsewhere -----------------------------------------------------


class FixedPrincipals:
    """A host's own provider, e.g. one reading a request header."""

    def __init__(self, principal: Principal | None) -> None:
        self.principal = principal
        self.asked = 0

    def current(self) -> Principal | None:
        self.asked += 1
        return self.principal


@pytest.mark.parametrize("where", ["before", "after"])
async def test_the_principal_comes_from_a_provider_bound_in_a_module(
    journal: Journal, where: str
) -> None:
    provider = FixedPrincipals(principal("svc", "support"))

    def bind(binder: Binder) -> None:
        binder.bind(PrincipalProvider, to=provider)

    module = MediatorModule(lambda m: m.add_handler(RefundHandler).use_defaults())
    modules: list[Any] = [bind, module] if where == "before" else [module, bind]
    mediator = Injector([*modules, Infrastructure(journal, Orders())]).get(Mediator)

    # acting_as is ignored: the bound provider decides.
    with acting_as(principal("u-1", "guest")):
        assert await mediator.send(Refund(order_id=1)) == "refunded 1"
    assert provider.asked >= 1

    provider.principal = None
    with pytest.raises(ForbiddenError, match="no authenticated principal"):
        await mediator.send(Refund(order_id=2))


# --- authorize() mistakes -------------------------------------------------------------


def test_authorize_needs_roles_or_policies() -> None:
    with pytest.raises(
        TypeError,
        match=re.escape("authorize() needs roles=[...], policies=[...] or both"),
    ):
        authorize()


def test_authorize_takes_role_names_only() -> None:
    roles: Any = ["admin", 7]

    with pytest.raises(
        TypeError, match=re.escape("authorize(roles=...) takes role names, got 7")
    ):
        authorize(roles=roles)


def test_authorize_takes_policy_subclasses_only() -> None:
    class NotAPolicy:
        def allows(self, principal: Principal, request: Any) -> bool:
            return True

    policies: Any = [NotAPolicy]

    with pytest.raises(TypeError) as caught:
        authorize(policies=policies)

    assert str(caught.value) == (
        f"authorize(policies=...) takes Policy subclasses, got {NotAPolicy!r}"
    )


def test_authorize_takes_policy_classes_not_instances() -> None:
    policies: Any = [OwnsOrder()]

    with pytest.raises(TypeError, match=r"takes Policy subclasses, got <"):
        authorize(policies=policies)


def test_authorize_goes_on_request_classes_only() -> None:
    class Helper:
        pass

    mark = authorize(roles=["admin"])

    with pytest.raises(TypeError) as caught:
        mark(Helper)

    assert str(caught.value) == (
        f"@authorize(...) goes on Command or Query classes, not on {Helper!r}"
    )


async def test_marking_a_subclass_leaves_its_base_alone(
    mediator: Mediator,
) -> None:
    assert await mediator.send(Report()) == "report"  # anonymous, unchecked
    with pytest.raises(ForbiddenError, match=r"^SecretReport refused: no auth"):
        await mediator.send(SecretReport())


async def test_roles_given_as_one_string_are_not_read_letter_by_letter(
    journal: Journal,
) -> None:
    # `roles="admin"` type-checks (a str is an Iterable[str]). Refusing it up
    # front, or reading it as the one role "admin", are both fine; reading it
    # as the roles "a", "d", "m", "i", "n" lets the wrong principals in.
    try:

        @authorize(roles="admin")
        class Purge(Command[str]):
            pass

    except TypeError:
        return

    class PurgeHandler(CommandHandler[Purge, str]):
        def handle(self, request: Purge) -> str:
            return "purged"

    module = MediatorModule(lambda m: m.add_handler(PurgeHandler).use_defaults())
    mediator = Injector([module]).get(Mediator)

    for letter in "admin":
        with (
            acting_as(principal("u-1", letter)),
            pytest.raises(ForbiddenError, match="requires one of the roles"),
        ):
            await mediator.send(Purge())
    with acting_as(principal("u-1", "admin")):
        assert await mediator.send(Purge()) == "purged"
