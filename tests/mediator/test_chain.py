"""The behavior chain: order by stage or by registration, and filtering per type."""

from __future__ import annotations

import random
from collections.abc import AsyncIterator
from typing import Any, ClassVar

import pytest
from injector import Binder, Module

from mediator import (
    Command,
    CommandHandler,
    Next,
    Notification,
    NotificationHandler,
    Query,
    QueryHandler,
    Stage,
    StreamHandler,
    StreamQuery,
    register_behavior,
)
from tests.mediator._support.support import Journal, build, recording_behavior

STAGES = [
    Stage.AUDIT,
    Stage.VALIDATION,
    Stage.AUTHORIZATION,
    Stage.IDEMPOTENCY,
    Stage.RETRY,
    Stage.TRANSACTION,
]
NAMES = ["audit", "validation", "authorization", "idempotency", "retry", "transaction"]
NESTED = [f"{n}>" for n in NAMES] + ["handler"] + [f"<{n}" for n in reversed(NAMES)]

pytestmark = pytest.mark.anyio


class Place(Command[str]):
    sku: str


class PlaceHandler(CommandHandler[Place, str]):
    def __init__(self) -> None:
        self.calls = 0

    async def handle(self, request: Place) -> str:
        JOURNAL_OF_TEST[-1].add("handler")
        return f"placed {request.sku}"


class PlaceSync(Command[str]):
    sku: str


class PlaceSyncHandler(CommandHandler[PlaceSync, str]):
    def handle(self, request: PlaceSync) -> str:
        JOURNAL_OF_TEST[-1].add("handler")
        return f"placed {request.sku}"


class Items(StreamQuery[int]):
    count: int


class ItemsHandler(StreamHandler[Items, int]):
    async def handle(self, query: Items) -> AsyncIterator[int]:
        JOURNAL_OF_TEST[-1].add("handler")
        for index in range(query.count):
            yield index


class Placed(Notification):
    sku: str


class OnPlaced(NotificationHandler[Placed]):
    async def handle(self, notification: Placed) -> None:
        JOURNAL_OF_TEST[-1].add("handler")


class OnPlacedSync(NotificationHandler[Placed]):
    def handle(self, notification: Placed) -> None:
        JOURNAL_OF_TEST[-1].add("handler")


# Handlers have no constructor dependencies here, so they reach the test's journal
# through this list; each test pushes its own.
JOURNAL_OF_TEST: list[Journal] = []


@pytest.fixture
def journal() -> Journal:
    JOURNAL_OF_TEST.append(Journal())
    return JOURNAL_OF_TEST[-1]


class BehaviorsModule(Module):
    """Registers behaviors from outside MediatorModule, as another package would."""

    def __init__(self, *behaviors: type[Any]) -> None:
        self.behaviors = behaviors

    def configure(self, binder: Binder) -> None:
        for behavior in self.behaviors:
            register_behavior(binder, behavior)


def _behaviors(journal: Journal) -> list[type[Any]]:
    return [
        recording_behavior(n, s, journal) for n, s in zip(NAMES, STAGES, strict=True)
    ]


@pytest.mark.parametrize("seed", range(8))
async def test_use_defaults_orders_by_stage_whatever_the_registration_order(
    journal: Journal, seed: int
) -> None:
    behaviors = _behaviors(journal)
    random.Random(seed).shuffle(behaviors)
    # Split over the MediatorModule and two other modules, in shuffled order.
    own, first, second = behaviors[:2], behaviors[2:4], behaviors[4:]
    mediator = build(
        lambda m: (
            m.add_handler(PlaceHandler, ItemsHandler, OnPlaced)
            .add_behavior(*own)
            .use_defaults()
        ),
        BehaviorsModule(*first),
        BehaviorsModule(*second),
    )

    assert await mediator.send(Place(sku="A")) == "placed A"
    assert journal.entries == NESTED

    journal.entries.clear()
    assert [i async for i in mediator.stream(Items(count=2))] == [0, 1]
    assert journal.entries == NESTED

    journal.entries.clear()
    await mediator.publish(Placed(sku="A"))
    assert journal.entries == NESTED


@pytest.mark.parametrize("seed", range(4))
def test_use_defaults_orders_the_sync_path_by_stage_too(
    journal: Journal, seed: int
) -> None:
    behaviors = _behaviors(journal)
    random.Random(seed).shuffle(behaviors)
    mediator = build(
        lambda m: m.add_handler(PlaceSyncHandler, OnPlacedSync).use_defaults(),
        BehaviorsModule(*behaviors),
    )

    assert mediator.send_sync(PlaceSync(sku="B")) == "placed B"
    assert journal.entries == NESTED

    journal.entries.clear()
    mediator.publish_sync(Placed(sku="B"))
    assert journal.entries == NESTED


@pytest.mark.parametrize("seed", range(8))
async def test_hand_wired_chain_follows_registration_order(
    journal: Journal, seed: int
) -> None:
    behaviors = _behaviors(journal)
    random.Random(seed).shuffle(behaviors)
    own, others = behaviors[:3], behaviors[3:]
    mediator = build(
        lambda m: m.add_handler(
            PlaceHandler, PlaceSyncHandler, ItemsHandler, OnPlaced
        ).add_behavior(*own),
        BehaviorsModule(*others),
    )
    names = [b.__name__.removeprefix("Recording") for b in behaviors]
    expected = (
        [f"{n}>" for n in names] + ["handler"] + [f"<{n}" for n in reversed(names)]
    )

    await mediator.send(Place(sku="A"))
    assert journal.entries == expected
    journal.entries.clear()
    mediator.send_sync(PlaceSync(sku="A"))
    assert journal.entries == expected
    journal.entries.clear()
    _ = [i async for i in mediator.stream(Items(count=1))]
    assert journal.entries == expected
    journal.entries.clear()
    await mediator.publish(Placed(sku="A"))
    assert journal.entries == expected


def test_equal_stages_keep_registration_order(journal: Journal) -> None:
    first = recording_behavior("first", Stage.AUDIT, journal)
    second = recording_behavior("second", Stage.AUDIT, journal)
    inner = recording_behavior("inner", Stage.RETRY, journal)
    mediator = build(
        lambda m: (
            m.add_handler(PlaceSyncHandler)
            .add_behavior(inner, first, second)
            .use_defaults()
        )
    )

    mediator.send_sync(PlaceSync(sku="C"))

    assert journal.entries == [
        "first>", "second>", "inner>", "handler", "<inner", "<second", "<first"
    ]  # fmt: skip


def test_custom_stages_fit_between_the_built_in_ones(journal: Journal) -> None:
    tenancy = recording_behavior("tenancy", Stage(320, "TENANCY"), journal)
    behaviors = [*_behaviors(journal), tenancy]
    mediator = build(
        lambda m: (
            m.add_handler(PlaceSyncHandler)
            .add_behavior(*reversed(behaviors))
            .use_defaults()
        )
    )

    mediator.send_sync(PlaceSync(sku="D"))

    assert journal.entries[:6] == [
        "audit>",
        "validation>",
        "authorization>",
        "tenancy>",
        "idempotency>",
        "retry>",
    ]


class CommandsOnly:
    """Applies only to commands; counts how often it was asked."""

    stage = Stage.VALIDATION
    asked: ClassVar[list[type[Any]]] = []
    ran: ClassVar[list[str]] = []

    def applies_to(self, request_type: type[Any]) -> bool:
        CommandsOnly.asked.append(request_type)
        return issubclass(request_type, Command)

    async def handle(self, request: Any, next: Next[Any]) -> Any:
        CommandsOnly.ran.append(type(request).__name__)
        return await next()


class Lookup(Query[int]):
    pass


class LookupHandler(QueryHandler[Lookup, int]):
    async def handle(self, request: Lookup) -> int:
        return 7


async def test_applies_to_is_asked_once_per_type_at_build_never_per_send(
    journal: Journal,
) -> None:
    CommandsOnly.asked.clear()
    CommandsOnly.ran.clear()
    mediator = build(
        lambda m: m.add_handler(PlaceHandler, LookupHandler).add_behavior(CommandsOnly)
    )
    asked_at_build = list(CommandsOnly.asked)

    for _ in range(5):
        await mediator.send(Place(sku="A"))
        assert await mediator.send(Lookup()) == 7

    assert sorted(t.__name__ for t in asked_at_build) == ["Lookup", "Place"]
    assert CommandsOnly.asked == asked_at_build  # nothing asked while sending
    assert CommandsOnly.ran == ["Place"] * 5  # the query never met the behavior


async def test_a_behavior_that_does_not_apply_is_not_in_the_chain(
    journal: Journal,
) -> None:
    mediator = build(lambda m: m.add_handler(LookupHandler).add_behavior(CommandsOnly))
    bare = build(lambda m: m.add_handler(LookupHandler))

    # The query's route is the same shape as with no behaviors registered at all.
    route = mediator._send_routes[Lookup]  # pyright: ignore[reportPrivateUsage]
    bare_route = bare._send_routes[Lookup]  # pyright: ignore[reportPrivateUsage]
    assert route.__code__ is bare_route.__code__
    assert await mediator.send(Lookup()) == 7


async def test_behaviors_can_replace_the_response_or_short_circuit(
    journal: Journal,
) -> None:
    class Shout:
        stage = Stage.AUDIT

        async def handle(self, request: Any, next: Next[str]) -> str:
            return (await next()).upper()

    class Refuse:
        stage = Stage.AUTHORIZATION

        async def handle(self, request: Any, next: Next[str]) -> str:
            if request.sku == "blocked":
                return "refused"
            return await next()

    mediator = build(
        lambda m: m.add_handler(PlaceHandler).add_behavior(Refuse, Shout).use_defaults()
    )

    assert await mediator.send(Place(sku="ok")) == "PLACED OK"
    assert await mediator.send(Place(sku="blocked")) == "REFUSED"
    assert journal.entries == ["handler"]  # the blocked one never reached the handler


async def test_exceptions_travel_out_through_every_behavior(journal: Journal) -> None:
    class Boom(Command[str]):
        pass

    class BoomHandler(CommandHandler[Boom, str]):
        async def handle(self, request: Boom) -> str:
            raise LookupError("nothing here")

    class Seen:
        stage = Stage.AUDIT
        errors: ClassVar[list[BaseException]] = []

        async def handle(self, request: Any, next: Next[Any]) -> Any:
            try:
                return await next()
            except Exception as error:
                Seen.errors.append(error)
                raise

    mediator = build(lambda m: m.add_handler(BoomHandler).add_behavior(Seen))

    with pytest.raises(LookupError, match="nothing here"):
        await mediator.send(Boom())
    assert [type(e) for e in Seen.errors] == [LookupError]


async def test_next_may_be_called_again_for_another_attempt(journal: Journal) -> None:
    class Twice:
        stage = Stage.RETRY

        async def handle(self, request: Any, next: Next[str]) -> str:
            first = await next()
            second = await next()
            return f"{first}|{second}"

    mediator = build(lambda m: m.add_handler(PlaceHandler).add_behavior(Twice))

    assert await mediator.send(Place(sku="E")) == "placed E|placed E"
    assert journal.entries == ["handler", "handler"]


async def test_ready_instances_can_be_registered(journal: Journal) -> None:
    class Counting:
        stage = Stage.AUDIT

        def __init__(self) -> None:
            self.count = 0

        async def handle(self, request: Any, next: Next[Any]) -> Any:
            self.count += 1
            return await next()

    counting = Counting()
    mediator = build(lambda m: m.add_handler(PlaceHandler).add_behavior(counting))

    await mediator.send(Place(sku="F"))
    await mediator.send(Place(sku="G"))

    assert counting.count == 2


async def test_stream_behaviors_without_handle_stream_are_left_out(
    journal: Journal,
) -> None:
    class SendOnly:
        stage = Stage.AUDIT

        async def handle(self, request: Any, next: Next[Any]) -> Any:
            journal.add("send-only")
            return await next()

    mediator = build(
        lambda m: m.add_handler(ItemsHandler, PlaceHandler).add_behavior(SendOnly)
    )

    assert [i async for i in mediator.stream(Items(count=3))] == [0, 1, 2]
    assert journal.entries == ["handler"]
    await mediator.send(Place(sku="H"))
    assert journal.entries == ["handler", "send-only", "handler"]
