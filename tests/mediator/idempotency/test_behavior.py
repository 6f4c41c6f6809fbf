"""IdempotencyBehavior on the fake store and unit of work, on both paths."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest
from injector import Injector

from mediator import (
    BusinessRuleError,
    Command,
    CommandHandler,
    ConfigurationError,
    ConflictError,
    ForbiddenError,
    IdempotencyKeyMismatchError,
    IdempotencyOptions,
    Mediator,
    MediatorModule,
    Next,
    Principal,
    Request,
    Stage,
    SyncNext,
    SyncPathError,
    ValidationError,
    acting_as,
    current_idempotency_key,
    derive_idempotency_key,
    idempotency_key,
    idempotent,
    is_replay,
)
from mediator._behaviors.idempotency.marker import ScopeMode, scope_of
from tests.mediator.idempotency.fakes import World
from tests.mediator.idempotency.shop import (
    HANDLERS,
    CardDeclined,
    Charge,
    Checkout,
    Forget,
    InsufficientFunds,
    Note,
    Receipt,
    Tag,
    build,
)

pytestmark = pytest.mark.anyio


def scope(
    command: str, principal: Principal | None = None, mode: ScopeMode = "principal"
) -> str:
    """The scope the behavior keeps `command` under for `principal`."""
    return scope_of(
        principal,
        (("command", f"tests.mediator.idempotency.shop:{command}"),),
        mode=mode,
    )


ANONYMOUS_CHARGE = scope("Charge")


@dataclass(frozen=True)
class Path:
    """How a test sends: `send_sync`, or `send` with an async or a sync store."""

    name: str

    def options(self) -> dict[str, Any]:
        if self.name == "async store":
            return {"async_store": True, "sync_store": False}
        return {}

    async def send(self, mediator: Mediator, request: Request[Any]) -> Any:
        if self.name == "sync":
            return mediator.send_sync(request)
        return await mediator.send(request)


@pytest.fixture(params=["sync", "async store", "async over sync store"])
def path(request: pytest.FixtureRequest) -> Path:
    return Path(request.param)


@pytest.fixture
def world() -> World:
    return World()


def mediator_for(world: World, path: Path, **options: Any) -> Mediator:
    return build(world, **path.options(), **options)


async def test_a_new_key_runs_the_handler_and_completes_before_the_commit(
    world: World, path: Path
) -> None:
    mediator = mediator_for(world, path)

    receipt = await path.send(mediator, Charge(request_id="k-1", cents=500))

    assert world.journal == ["claim", "begin", "handler", "complete", "commit"]
    assert world.db.effects == ["charge 500"]
    assert receipt.cents == 500
    assert receipt.charge_id.startswith("d-")
    assert is_replay() is False
    record = world.db.records[(ANONYMOUS_CHARGE, "k-1")]
    assert record.state == "completed"
    assert record.outcome is not None
    assert record.outcome.kind == "response"
    assert record.outcome.type_name == "tests.mediator.idempotency.shop:Receipt"


async def test_the_same_key_again_replays_without_running_the_handler(
    world: World, path: Path
) -> None:
    mediator = mediator_for(world, path)
    first = await path.send(mediator, Charge(request_id="k-1", cents=500))
    world.journal.clear()

    again = await path.send(mediator, Charge(request_id="k-1", cents=500))

    assert again == first
    assert isinstance(again, Receipt)
    assert world.journal == ["claim"]
    assert world.db.effects == ["charge 500"]
    assert is_replay() is True
    assert [r.replayed for r in world.sink.records] == [False, True]
    assert world.sink.records[1].outcome == "ok"


async def test_a_key_still_running_is_a_conflict(world: World, path: Path) -> None:
    mediator = mediator_for(world, path)
    request = Charge(request_id="busy", cents=1)
    world.store.claim(
        ANONYMOUS_CHARGE,
        "busy",
        _fingerprint_of(request),
        now=world.clock.now(),
        lease=timedelta(seconds=60),
        retention=timedelta(hours=1),
    )

    with pytest.raises(ConflictError) as raised:
        await path.send(mediator, request)

    assert str(raised.value) == (
        "Charge with this idempotency key is still running: try again later"
    )
    assert world.journal == ["claim", "claim"]
    with pytest.raises(IdempotencyKeyMismatchError):  # mismatch is answered first
        await path.send(mediator, Charge(request_id="busy", cents=2))


def _fingerprint_of(request: Charge) -> str:
    from mediator._behaviors.idempotency.fingerprint import fingerprint

    return fingerprint(request, exclude="request_id")


async def test_the_same_key_with_another_request_is_a_mismatch(
    world: World, path: Path
) -> None:
    mediator = mediator_for(world, path)
    await path.send(mediator, Charge(request_id="k-1", cents=500))

    with pytest.raises(IdempotencyKeyMismatchError) as raised:
        await path.send(mediator, Charge(request_id="k-1", cents=501))

    assert isinstance(raised.value, BusinessRuleError)
    assert str(raised.value) == (
        "this idempotency key was used with another Charge request: use a new key "
        "for a new request"
    )
    assert world.db.effects == ["charge 500"]


async def test_a_domain_error_is_stored_and_replayed(world: World, path: Path) -> None:
    mediator = mediator_for(world, path)

    with pytest.raises(InsufficientFunds):
        await path.send(mediator, Charge(request_id="k-2", cents=9, fail="funds"))
    assert world.journal == [
        "claim", "begin", "handler", "rollback", "finish",
    ]  # fmt: skip
    assert world.db.effects == []

    with pytest.raises(InsufficientFunds, match="9 is more than the balance") as again:
        await path.send(mediator, Charge(request_id="k-2", cents=9, fail="funds"))
    assert is_replay() is True
    assert world.journal[-1] == "claim"
    assert any(
        "replayed from the idempotency store" in n for n in again.value.__notes__
    )
    assert [r.outcome for r in world.sink.records] == ["InsufficientFunds"] * 2
    assert [r.replayed for r in world.sink.records] == [False, True]


async def test_a_domain_error_with_its_own_constructor_replays_as_its_base(
    world: World, path: Path
) -> None:
    mediator = mediator_for(world, path)
    with pytest.raises(CardDeclined):
        await path.send(mediator, Charge(request_id="k", cents=9, fail="declined"))

    with pytest.raises(BusinessRuleError, match="declined with code 51") as again:
        await path.send(mediator, Charge(request_id="k", cents=9, fail="declined"))

    assert type(again.value) is BusinessRuleError


async def test_a_validation_error_replays_with_its_field_errors(
    world: World, path: Path
) -> None:
    mediator = mediator_for(world, path)
    with pytest.raises(ValidationError):
        await path.send(mediator, Charge(request_id="k", cents=9, fail="invalid"))

    with pytest.raises(ValidationError) as again:
        await path.send(mediator, Charge(request_id="k", cents=9, fail="invalid"))

    assert [(e.path, e.message) for e in again.value.errors] == [
        (("cents",), "too many")
    ]


async def test_a_transient_failure_releases_the_key_for_the_next_send(
    world: World, path: Path
) -> None:
    mediator = mediator_for(world, path)

    with pytest.raises(RuntimeError, match="crashed"):
        await path.send(mediator, Charge(request_id="k", cents=3, fail="crash"))
    assert world.journal == ["claim", "begin", "handler", "rollback", "release"]
    assert world.db.records == {}

    world.journal.clear()
    await path.send(mediator, Charge(request_id="k", cents=3))
    assert world.journal == ["claim", "begin", "handler", "complete", "commit"]
    assert world.db.effects == ["charge 3"]


async def test_a_command_that_is_not_transactional_is_finished_after_it_returns(
    world: World, path: Path
) -> None:
    mediator = mediator_for(world, path)

    with idempotency_key("note-1"):
        assert await path.send(mediator, Note(text="a")) == 1
        assert await path.send(mediator, Note(text="a")) == 1

    assert world.journal == ["claim", "handler", "finish", "claim"]
    assert is_replay() is True


async def test_none_and_plain_responses_replay(world: World, path: Path) -> None:
    mediator = mediator_for(world, path)

    with idempotency_key("k"):
        assert await path.send(mediator, Forget(what="x")) is None
        assert await path.send(mediator, Forget(what="x")) is None
        assert await path.send(mediator, Tag(tags=["b", "a"])) == ["a", "b"]
        assert await path.send(mediator, Tag(tags=["b", "a"])) == ["a", "b"]

    assert world.db.effects == ["forget x", "tag"]


async def test_the_field_wins_over_the_context_and_none_falls_back_to_it(
    world: World, path: Path
) -> None:
    mediator = mediator_for(world, path)

    with idempotency_key("from-context"):
        await path.send(mediator, Charge(request_id="from-field", cents=1))
        await path.send(mediator, Charge(cents=1))

    keys = [claim[1] for claim in world.store.claims]
    assert keys == ["from-field", "from-context"]
    assert current_idempotency_key() is None


@pytest.mark.parametrize(
    ("key", "problem"),
    [
        ("", "must not be empty"),
        ("k" * 10_000, "at most 255 characters, got 10000"),
        ("k" * 256, "at most 255 characters, got 256"),
        ("ключ", "visible ASCII"),
        ("a\x00b", "visible ASCII"),
        ("a\tb", "visible ASCII"),
        ("a b", "visible ASCII"),
        ("a\x7fb", "visible ASCII"),
    ],
)
async def test_a_bad_key_is_a_validation_error_and_nothing_is_stored(
    world: World, path: Path, key: str, problem: str
) -> None:
    mediator = mediator_for(world, path)

    with pytest.raises(ValidationError) as raised:
        await path.send(mediator, Charge(request_id=key, cents=1))
    with idempotency_key(key), pytest.raises(ValidationError) as from_context:
        await path.send(mediator, Note(text="x"))

    assert raised.value.errors[0].path == ("request_id",)
    assert problem in raised.value.errors[0].message
    assert from_context.value.errors[0].path == ("idempotency_key",)
    assert len(raised.value.errors[0].message) < 200  # never the whole key
    assert world.journal == []
    assert world.db.records == {}


async def test_the_longest_key_is_taken(world: World, path: Path) -> None:
    mediator = mediator_for(world, path)

    await path.send(mediator, Charge(request_id="~" * 255, cents=1))

    assert world.db.effects == ["charge 1"]


async def test_no_key_at_all_is_a_validation_error(world: World, path: Path) -> None:
    mediator = mediator_for(world, path)

    with pytest.raises(ValidationError) as raised:
        await path.send(mediator, Charge(cents=1))
    with pytest.raises(ValidationError) as bare:
        await path.send(mediator, Note(text="x"))

    assert str(raised.value) == (
        "Charge is @idempotent and was sent without an idempotency key"
    )
    assert raised.value.errors[0].path == ("request_id",)
    assert bare.value.errors[0].path == ("idempotency_key",)
    assert world.journal == []


async def test_the_same_key_from_two_principals_is_two_operations(
    world: World, path: Path
) -> None:
    mediator = mediator_for(world, path)
    ada = Principal("ada", claims={"tenant": "t-1"})
    bob = Principal("bob", claims={"tenant": "t-1"})
    eve = Principal("eve", claims={"tenant": "t-2"})

    with idempotency_key("shared"):
        for principal in (ada, bob, eve, None):
            with acting_as(principal):
                await path.send(mediator, Note(text="x"))

    assert world.db.effects == ["note x"] * 4  # one tenant's users share nothing
    assert [claim[0] for claim in world.store.claims] == [
        scope("Note", ada),
        scope("Note", bob),
        scope("Note", eve),
        scope("Note"),
    ]


async def test_with_the_tenant_scope_a_tenants_users_share_an_operation(
    world: World, path: Path
) -> None:
    options = IdempotencyOptions(scope="tenant", allow_anonymous=True)
    mediator = mediator_for(world, path, options=options)
    ada = Principal("ada", claims={"tenant": "t-1"})
    bob = Principal("bob", claims={"tenant": "t-1"})
    eve = Principal("eve", claims={"tenant": "t-2"})

    replays: list[bool] = []
    with idempotency_key("shared"):
        for principal in (ada, bob, eve):
            with acting_as(principal):
                await path.send(mediator, Note(text="x"))
                replays.append(is_replay())

    assert replays == [False, True, False]
    assert world.db.effects == ["note x", "note x"]
    assert [claim[0] for claim in world.store.claims] == [
        scope("Note", ada, "tenant"),
        scope("Note", ada, "tenant"),
        scope("Note", eve, "tenant"),
    ]


@pytest.mark.parametrize("mode", ["principal", "tenant"])
async def test_a_principal_named_like_a_tenant_never_gets_its_answer(
    world: World, path: Path, mode: ScopeMode
) -> None:
    mediator = mediator_for(
        world, path, options=IdempotencyOptions(scope=mode, allow_anonymous=True)
    )

    with idempotency_key("k"):
        with acting_as(Principal("u-1", claims={"tenant": "acme"})):
            first = await path.send(mediator, Charge(cents=5))
        with acting_as(Principal("acme")):
            second = await path.send(mediator, Charge(cents=5))
            assert is_replay() is False

    assert world.db.effects == ["charge 5", "charge 5"]
    assert first.charge_id != second.charge_id
    assert world.store.claims[1][0] == scope("Charge", Principal("acme"), mode)


@pytest.mark.parametrize(
    ("ids", "tenants"),
    [
        (("a|b", "a"), (None, None)),
        (("u", "u"), ("t|x", "t")),
        (("u", 'u"'), ('"t', "t")),
    ],
)
async def test_a_separator_in_an_id_or_a_tenant_forges_no_scope(
    world: World, path: Path, ids: tuple[str, str], tenants: tuple[str | None, ...]
) -> None:
    mediator = mediator_for(world, path)

    with idempotency_key("k"):
        for id_, tenant in zip(ids, tenants, strict=True):
            claims = {} if tenant is None else {"tenant": tenant}
            with acting_as(Principal(id_, claims=claims)):
                await path.send(mediator, Note(text="x"))
                assert is_replay() is False

    assert world.db.effects == ["note x", "note x"]


async def test_an_anonymous_send_is_refused_by_default(
    world: World, path: Path
) -> None:
    mediator = mediator_for(world, path, options=IdempotencyOptions())

    with pytest.raises(ForbiddenError) as raised:
        await path.send(mediator, Charge(request_id="k", cents=1))

    assert str(raised.value) == (
        "Charge is @idempotent and was sent with no principal: every anonymous "
        "caller would share its records. Send it as a principal (acting_as), or "
        "bind IdempotencyOptions(allow_anonymous=True) for a worker that sends "
        "without one"
    )
    assert world.journal == []  # nothing claimed, nothing run
    with acting_as(Principal("u-1")):
        await path.send(mediator, Charge(request_id="k", cents=1))
    assert world.db.effects == ["charge 1"]


async def test_anonymous_sends_allowed_are_one_scope_of_their_own(
    world: World, path: Path
) -> None:
    mediator = mediator_for(world, path)  # the fakes opt in

    with idempotency_key("k"):
        await path.send(mediator, Note(text="x"))
        await path.send(mediator, Note(text="x"))
        assert is_replay() is True
        with acting_as(Principal("")):  # an empty id is not anonymous
            await path.send(mediator, Note(text="x"))
            assert is_replay() is False

    assert world.db.effects == ["note x", "note x"]


async def test_an_expired_lease_is_taken_over_and_the_first_never_commits(
    world: World, path: Path
) -> None:
    mediator = mediator_for(world, path)
    request = Charge(request_id="slow", cents=7)

    def stall_then_lose_the_claim(_: Any) -> None:
        world.during = None
        world.clock.advance(61)  # past the 60 s lease: another send takes over
        taken = world.store.claim(
            ANONYMOUS_CHARGE,
            "slow",
            _fingerprint_of(request),
            now=world.clock.now(),
            lease=timedelta(seconds=60),
            retention=timedelta(hours=24),
        )
        assert taken.status == "claimed"

    world.during = stall_then_lose_the_claim
    with pytest.raises(ConflictError, match="taken over"):
        await path.send(mediator, request)

    assert world.journal == [
        "claim", "begin", "handler", "claim", "complete", "rollback",
    ]  # fmt: skip
    assert world.db.effects == []  # never a second committed effect
    record = world.db.records[(ANONYMOUS_CHARGE, "slow")]
    assert (record.state, record.token) == ("pending", "t2")  # not released


async def test_a_crashed_claim_is_run_again_after_its_lease(
    world: World, path: Path
) -> None:
    mediator = mediator_for(world, path)
    request = Charge(request_id="crashed", cents=7)
    world.store.claim(
        ANONYMOUS_CHARGE,
        "crashed",
        _fingerprint_of(request),
        now=world.clock.now(),
        lease=timedelta(seconds=60),
        retention=timedelta(hours=24),
    )
    with pytest.raises(ConflictError):
        await path.send(mediator, request)

    world.clock.advance(60)
    await path.send(mediator, request)

    assert world.db.effects == ["charge 7"]


class TryTwice:
    """A stand-in for retry at its stage: runs the rest of the chain once more."""

    stage = Stage.RETRY

    async def handle(self, request: Any, next: Next[Any]) -> Any:
        try:
            return await next()
        except OSError:
            return await next()

    def handle_sync(self, request: Any, next: SyncNext[Any]) -> Any:
        try:
            return next()
        except OSError:
            return next()


async def test_a_retried_attempt_completes_under_the_same_claim(
    world: World, path: Path
) -> None:
    mediator = build(world, behaviors=(TryTwice,), **path.options())
    world.db.fail_commits = 1
    keys: list[str | None] = []
    world.during = lambda _: keys.append(derive_idempotency_key("charge"))

    receipt = await path.send(mediator, Charge(request_id="k", cents=2))

    assert world.journal == [
        "claim",
        "begin", "handler", "complete", "commit failed", "rollback",
        "begin", "handler", "complete", "commit",
    ]  # fmt: skip
    assert world.db.effects == ["charge 2"]
    assert keys[0] == keys[1] == receipt.charge_id


async def test_a_nested_send_completes_with_the_outer_commit(world: World) -> None:
    mediator = build(world)

    with idempotency_key("n-1"):
        assert mediator.send_sync(Checkout(text="x")) == "ok"

    assert world.journal == [
        "begin", "checkout", "claim", "handler", "complete", "commit",
    ]  # fmt: skip
    assert world.db.effects == ["checkout", "note x"]


async def test_a_nested_send_is_released_when_the_outer_rolls_back(
    world: World,
) -> None:
    mediator = build(world)

    with idempotency_key("n-1"), pytest.raises(RuntimeError):
        mediator.send_sync(Checkout(text="x", fail=True))

    assert world.journal == [
        "begin", "checkout", "claim", "handler", "rollback", "release",
    ]  # fmt: skip
    assert world.db.records == {}
    with idempotency_key("n-1"):
        mediator.send_sync(Checkout(text="x"))
    assert world.db.effects == ["checkout", "note x"]


async def test_derived_keys_differ_by_purpose_key_and_tenant(world: World) -> None:
    mediator = build(world)
    seen: list[tuple[str | None, str | None]] = []
    world.during = lambda _: seen.append(
        (derive_idempotency_key("charge"), derive_idempotency_key("refund"))
    )

    mediator.send_sync(Charge(request_id="a", cents=1))
    mediator.send_sync(Charge(request_id="b", cents=1))
    with acting_as(Principal("u", claims={"tenant": "t"})):
        mediator.send_sync(Charge(request_id="a", cents=1))

    flat = [key for pair in seen for key in pair]
    assert len(set(flat)) == 6
    assert all(k is not None and len(k) == 34 and k[:2] == "d-" for k in flat)
    assert derive_idempotency_key("charge") is None
    with pytest.raises(ValueError, match="needs a purpose"):
        derive_idempotency_key("")
    with pytest.raises(TypeError):
        derive_idempotency_key(1)  # type: ignore[arg-type]


async def test_options_reach_the_store(world: World) -> None:
    options = IdempotencyOptions(
        lease=timedelta(minutes=5), retention=3600, allow_anonymous=True
    )
    mediator = build(world, options=options)

    mediator.send_sync(Charge(request_id="k", cents=1))

    assert world.store.claims[0][3:] == (timedelta(minutes=5), timedelta(hours=1))


async def test_without_a_store_an_idempotent_command_fails_the_build(
    world: World,
) -> None:
    with pytest.raises(ConfigurationError, match="no idempotency store is bound"):
        build(world, sync_store=False)


async def test_with_only_an_async_store_send_sync_is_refused(world: World) -> None:
    mediator = build(world, sync_store=False, async_store=True)

    with pytest.raises(SyncPathError, match="only an AsyncIdempotencyStore"):
        mediator.send_sync(Charge(request_id="k", cents=1))
    assert world.journal == []


async def test_a_hand_wired_chain_without_the_behavior_fails_at_build(
    world: World,
) -> None:
    # An @idempotent command whose chain has no IdempotencyBehavior would run
    # twice for one key, silently: the build refuses it, saying what to add.
    injector = Injector(
        [MediatorModule(lambda m: m.add_handler(*HANDLERS)), world.module()]
    )

    with pytest.raises(ConfigurationError, match=r"is marked @idempotent") as error:
        injector.get(Mediator)

    assert ".add_behavior(IdempotencyBehavior)" in str(error.value)
    assert world.db.effects == []


async def test_a_failed_release_is_noted_on_the_failure_it_followed(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    mediator = build(world)

    def refuse(scope: str, key: str, token: str) -> None:
        raise OSError("the store is down")

    monkeypatch.setattr(world.store, "release", refuse)
    with idempotency_key("n-1"), pytest.raises(RuntimeError) as nested:
        mediator.send_sync(Checkout(text="x", fail=True))
    with pytest.raises(RuntimeError) as own:
        mediator.send_sync(Charge(request_id="k", cents=1, fail="crash"))

    assert nested.value.__notes__ == [
        "releasing an idempotency key also failed: OSError: the store is down"
    ]
    assert own.value.__notes__ == [
        "settling the idempotency key also failed: OSError: the store is down"
    ]


async def test_a_response_type_that_cannot_be_stored_fails_the_build(
    world: World,
) -> None:
    class Opaque:
        pass

    @idempotent
    class Odd(Command[Opaque]):
        pass

    class OddHandler(CommandHandler[Odd, Opaque]):
        def handle(self, request: Odd) -> Opaque:
            return Opaque()

    with pytest.raises(ConfigurationError, match="response type cannot be stored"):
        Injector(
            [
                MediatorModule(lambda m: m.add_handler(OddHandler).use_defaults()),
                world.module(),
            ]
        ).get(Mediator)
