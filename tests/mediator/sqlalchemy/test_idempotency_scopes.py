"""No caller gets another's stored outcome: the behavior on the real stores, sync and
async, on SQLite and PostgreSQL, with callers crafted to collide under a joined
scope, and values a database would refuse in a scope of their own."""

from __future__ import annotations

import pytest
import sqlalchemy as sa
from injector import Binder, Injector, InstanceProvider, Module, inject
from sqlalchemy.orm import Session

from mediator import (
    Command,
    CommandHandler,
    ForbiddenError,
    IdempotencyOptions,
    Mediator,
    MediatorModule,
    Principal,
    acting_as,
    idempotency_key,
    idempotent,
    is_replay,
    transactional,
)
from mediator._behaviors.idempotency.marker import ScopeMode
from mediator.sqlalchemy import SqlAlchemyModule, idempotency_table
from tests.mediator.sqlalchemy.idempotency_db import Backend, effects

pytestmark = pytest.mark.anyio


@idempotent
@transactional
class Pay(Command[str]):
    cents: int


class PayHandler(CommandHandler[Pay, str]):
    @inject
    def __init__(self, session: Session) -> None:
        self.session = session

    def handle(self, request: Pay) -> str:
        self.session.execute(sa.insert(effects).values(note=f"pay {request.cents}"))
        count = self.session.execute(sa.select(sa.func.count()).select_from(effects))
        return f"receipt {count.scalar_one()}"


def mediator_on(backend: Backend, options: IdempotencyOptions) -> Mediator:
    class Options(Module):
        def configure(self, binder: Binder) -> None:
            binder.bind(IdempotencyOptions, to=InstanceProvider(options))

    return Injector(
        [
            MediatorModule(lambda m: m.add_handler(PayHandler).use_defaults()),
            SqlAlchemyModule(engine=backend.engine),
            Options(),
        ]
    ).get(Mediator)


def send_as(mediator: Mediator, principal: Principal | None) -> tuple[str, bool]:
    with idempotency_key("shared-key"), acting_as(principal):
        answer = mediator.send_sync(Pay(cents=1))
        return answer, is_replay()


def member(id_: str, tenant: str) -> Principal:
    return Principal(id_, claims={"tenant": tenant})


CROSS_CALLERS: list[tuple[str, ScopeMode, Principal | None, Principal | None]] = [
    ("an id equal to a tenant", "principal", member("u-1", "acme"), Principal("acme")),
    ("an id equal to a tenant", "tenant", member("u-1", "acme"), Principal("acme")),
    ("a separator in a tenant", "tenant", member("u", "a|b"), member("u|a", "b")),
    ("a separator in an id", "principal", Principal("a|b"), member("a", "b")),
    ("a quote in a tenant", "tenant", member("u", 'a"],["b'), member("u", "a")),
    ("users of one tenant", "principal", member("ada", "acme"), member("bob", "acme")),
]


@pytest.mark.parametrize(
    ("case", "mode", "first", "second"),
    CROSS_CALLERS,
    ids=[f"{case} ({mode})" for case, mode, _, _ in CROSS_CALLERS],
)
def test_a_crafted_caller_never_gets_anothers_outcome(
    backend: Backend,
    case: str,
    mode: ScopeMode,
    first: Principal | None,
    second: Principal | None,
) -> None:
    mediator = mediator_on(backend, IdempotencyOptions(scope=mode))

    assert send_as(mediator, first) == ("receipt 1", False)
    assert send_as(mediator, second) == ("receipt 2", False)
    assert send_as(mediator, first) == ("receipt 1", True)  # each keeps its own
    assert backend.effects() == ["pay 1", "pay 1"]
    assert len({row.scope for row in backend.rows()}) == 2


def test_with_the_tenant_scope_a_tenants_users_share_the_outcome(
    backend: Backend,
) -> None:
    mediator = mediator_on(backend, IdempotencyOptions(scope="tenant"))

    assert send_as(mediator, member("ada", "acme")) == ("receipt 1", False)
    assert send_as(mediator, member("bob", "acme")) == ("receipt 1", True)
    assert backend.effects() == ["pay 1"]


def test_an_anonymous_send_is_refused_and_stores_nothing(backend: Backend) -> None:
    mediator = mediator_on(backend, IdempotencyOptions())

    with pytest.raises(ForbiddenError, match=r"allow_anonymous=True"):
        send_as(mediator, None)

    assert (backend.rows(), backend.effects()) == ([], [])


def test_allowed_anonymous_sends_share_a_scope_no_principal_has(
    backend: Backend,
) -> None:
    mediator = mediator_on(backend, IdempotencyOptions(allow_anonymous=True))

    assert send_as(mediator, None) == ("receipt 1", False)
    assert send_as(mediator, None) == ("receipt 1", True)
    assert send_as(mediator, Principal("")) == ("receipt 2", False)


ODD = [
    "a|b",
    '"quoted"',
    "%7C",
    "nul\x00inside",
    "t" * 4096,
    "\x00" * 512,
    "caf\u00e9 \ud800",
]


@pytest.mark.parametrize("mode", ["principal", "tenant"])
def test_odd_and_huge_ids_and_tenants_are_kept_apart(
    backend: Backend, mode: ScopeMode
) -> None:
    mediator = mediator_on(backend, IdempotencyOptions(scope=mode))
    callers = [Principal(odd) for odd in ODD] + [member("u", odd) for odd in ODD]

    answers = [send_as(mediator, caller) for caller in callers]
    replays = [send_as(mediator, caller) for caller in callers]

    assert answers == [(f"receipt {n}", False) for n in range(1, len(callers) + 1)]
    assert replays == [(answer, True) for answer, _ in answers]
    with backend.engine.connect() as connection:
        longest = connection.execute(
            sa.select(sa.func.max(sa.func.length(idempotency_table.c.scope)))
        ).scalar_one()
    assert longest == 67


@idempotent
class Refund(Command[str]):
    cents: int


refunds: list[int] = []


class RefundHandler(CommandHandler[Refund, str]):
    async def handle(self, request: Refund) -> str:
        refunds.append(request.cents)
        return f"refund {len(refunds)}"


async def test_async_sends_on_the_async_store_are_apart(backend: Backend) -> None:
    refunds.clear()
    mediator = Injector(
        [
            MediatorModule(lambda m: m.add_handler(RefundHandler).use_defaults()),
            SqlAlchemyModule(async_engine=backend.async_engine),
        ]
    ).get(Mediator)
    seen: list[tuple[str, bool]] = []
    for principal in (member("u-1", "acme"), Principal("acme"), member("u-1", "acme")):
        with idempotency_key("k"), acting_as(principal):
            seen.append((await mediator.send(Refund(cents=2)), is_replay()))
    assert seen == [("refund 1", False), ("refund 2", False), ("refund 1", True)]
