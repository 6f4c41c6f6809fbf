"""The request scope: one per top-level send, joined by nested sends, never shared."""

from __future__ import annotations

import asyncio
import inspect
import itertools
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Any, ClassVar

import pytest
from injector import Binder, Injector, ProviderOf, inject

from mediator import (
    Command,
    CommandHandler,
    Mediator,
    MediatorModule,
    Next,
    Notification,
    NotificationHandler,
    Query,
    QueryHandler,
    RequestScope,
    ScopeError,
    Stage,
    StreamHandler,
    StreamQuery,
    SyncPathError,
    UnresolvableDependencyError,
    at_scope_exit,
    request_scope,
)

pytestmark = pytest.mark.anyio

_ids = itertools.count(1)


@request_scope
class UnitOfWork:
    """A request-scoped service: one per top-level send."""

    def __init__(self) -> None:
        self.id = next(_ids)
        self.writes: list[str] = []


class Session:
    """Bound in RequestScope explicitly, not by decorator."""

    def __init__(self) -> None:
        self.id = next(_ids)


class WhichUnit(Query[int]):
    pass


class WhichUnitHandler(QueryHandler[WhichUnit, int]):
    @inject
    def __init__(self, unit: UnitOfWork) -> None:
        self.unit = unit

    async def handle(self, request: WhichUnit) -> int:
        await asyncio.sleep(0)  # noqa: TID251 - a yield to the loop, not a wait
        return self.unit.id


class Outer(Command[tuple[int, int, int]]):
    pass


class OuterHandler(CommandHandler[Outer, tuple[int, int, int]]):
    @inject
    def __init__(self, mediator: Mediator, unit: UnitOfWork) -> None:
        self.mediator = mediator
        self.unit = unit

    async def handle(self, request: Outer) -> tuple[int, int, int]:
        first = await self.mediator.send(WhichUnit())
        second = await self.mediator.send(WhichUnit())
        return self.unit.id, first, second


class WhichSession(Query[int]):
    pass


class WhichSessionHandler(QueryHandler[WhichSession, int]):
    @inject
    def __init__(self, session: Session) -> None:
        self.session = session

    def handle(self, request: WhichSession) -> int:
        return self.session.id


def bind_session(binder: Binder) -> None:
    binder.bind(Session, to=Session, scope=RequestScope)


def make_mediator(*handlers: type[Any], behaviors: tuple[Any, ...] = ()) -> Mediator:
    module = MediatorModule(lambda m: m.add_handler(*handlers).add_behavior(*behaviors))
    return Injector([bind_session, module]).get(Mediator)


async def test_a_nested_send_joins_the_scope_of_its_parent() -> None:
    mediator = make_mediator(OuterHandler, WhichUnitHandler)

    own, first, second = await mediator.send(Outer())

    assert own == first == second


async def test_each_top_level_send_gets_a_fresh_scope() -> None:
    mediator = make_mediator(WhichUnitHandler, WhichSessionHandler)

    units = {await mediator.send(WhichUnit()) for _ in range(3)}
    sessions = {await mediator.send(WhichSession()) for _ in range(3)}

    assert len(units) == 3
    assert len(sessions) == 3


async def test_two_hundred_concurrent_sends_never_see_each_others_scope() -> None:
    mediator = make_mediator(OuterHandler, WhichUnitHandler)

    results = await asyncio.gather(*(mediator.send(Outer()) for _ in range(200)))

    assert all(own == first == second for own, first, second in results)
    assert len({own for own, _, _ in results}) == 200


def test_send_sync_opens_and_joins_scopes_the_same_way() -> None:
    class SyncOuter(Command[tuple[int, int]]):
        pass

    class SyncOuterHandler(CommandHandler[SyncOuter, tuple[int, int]]):
        @inject
        def __init__(self, mediator: Mediator, session: Session) -> None:
            self.mediator = mediator
            self.session = session

        def handle(self, request: SyncOuter) -> tuple[int, int]:
            return self.session.id, self.mediator.send_sync(WhichSession())

    mediator = make_mediator(SyncOuterHandler, WhichSessionHandler)

    own, nested = mediator.send_sync(SyncOuter())
    again, _ = mediator.send_sync(SyncOuter())

    assert own == nested
    assert again != own


def test_asking_for_a_scoped_service_outside_a_send_is_a_clear_error() -> None:
    injector = Injector([bind_session, MediatorModule()])

    with pytest.raises(
        ScopeError, match="Session is request-scoped and no send is running"
    ):
        injector.get(Session)


async def test_behaviors_reach_scoped_services_through_provider_of() -> None:
    seen: list[tuple[int, int]] = []

    class UsesUnit:
        stage = Stage.TRANSACTION

        @inject
        def __init__(self, units: ProviderOf[UnitOfWork]) -> None:
            self.units = units

        async def handle(self, request: Any, next: Next[Any]) -> Any:
            result = await next()
            seen.append((self.units.get().id, result))
            return result

    mediator = make_mediator(WhichUnitHandler, behaviors=(UsesUnit,))

    await mediator.send(WhichUnit())
    await mediator.send(WhichUnit())

    assert [unit for unit, _ in seen] == [handled for _, handled in seen]
    assert seen[0][0] != seen[1][0]


async def test_a_behavior_needing_a_scoped_service_directly_is_refused() -> None:
    class Eager:
        stage = Stage.TRANSACTION

        @inject
        def __init__(self, unit: UnitOfWork) -> None:
            self.unit = unit

        async def handle(self, request: Any, next: Next[Any]) -> Any:
            return await next()

    with pytest.raises(UnresolvableDependencyError, match="inject ProviderOf"):
        make_mediator(WhichUnitHandler, behaviors=(Eager,))


async def test_a_task_outliving_its_send_does_not_reuse_the_closed_scope() -> None:
    spawned: list[asyncio.Task[int]] = []
    release = asyncio.Event()

    class Spawns(Command[int]):
        pass

    class SpawnsHandler(CommandHandler[Spawns, int]):
        @inject
        def __init__(self, mediator: Mediator, unit: UnitOfWork) -> None:
            self.mediator = mediator
            self.unit = unit

        async def handle(self, request: Spawns) -> int:
            async def later() -> int:
                await release.wait()
                return await self.mediator.send(WhichUnit())

            spawned.append(asyncio.create_task(later()))
            return self.unit.id

    mediator = make_mediator(SpawnsHandler, WhichUnitHandler)
    parent_unit = await mediator.send(Spawns())
    release.set()

    assert await spawned[0] != parent_unit


async def test_a_stream_runs_in_its_own_scope_which_the_consumer_never_sees() -> None:
    class Units(StreamQuery[int]):
        pass

    class UnitsHandler(StreamHandler[Units, int]):
        @inject
        def __init__(self, unit: UnitOfWork, mediator: Mediator) -> None:
            self.unit = unit
            self.mediator = mediator

        async def handle(self, query: Units) -> AsyncIterator[int]:
            yield self.unit.id
            yield await self.mediator.send(WhichUnit())  # nested: same scope

    mediator = make_mediator(UnitsHandler, WhichUnitHandler)
    stream_units: list[int] = []
    between: list[int] = []

    async for unit in mediator.stream(Units()):
        stream_units.append(unit)
        between.append(await mediator.send(WhichUnit()))  # the consumer's own send

    assert stream_units[0] == stream_units[1]
    assert stream_units[0] not in between
    assert between[0] != between[1]


async def test_closing_a_stream_early_closes_the_handler_generator() -> None:
    closed: list[str] = []

    class Endless(StreamQuery[int]):
        pass

    class EndlessHandler(StreamHandler[Endless, int]):
        @inject
        def __init__(self, unit: UnitOfWork) -> None:
            self.unit = unit

        async def handle(self, query: Endless) -> AsyncIterator[int]:
            try:
                for index in itertools.count():
                    yield index
            finally:
                closed.append("handler")

    mediator = make_mediator(EndlessHandler)
    stream = mediator.stream(Endless())

    assert [await anext(stream), await anext(stream)] == [0, 1]
    await stream.aclose()

    assert closed == ["handler"]
    with pytest.raises(StopAsyncIteration):
        await anext(stream)


class Happened(Notification):
    pass


UNITS_SEEN: list[int] = []


class FirstListener(NotificationHandler[Happened]):
    @inject
    def __init__(self, unit: UnitOfWork) -> None:
        self.unit = unit

    async def handle(self, notification: Happened) -> None:
        UNITS_SEEN.append(self.unit.id)


class SecondListener(FirstListener):
    pass


class SyncListener(NotificationHandler[Happened]):
    @inject
    def __init__(self, unit: UnitOfWork) -> None:
        self.unit = unit

    def handle(self, notification: Happened) -> None:
        UNITS_SEEN.append(self.unit.id)


class SyncListenerToo(SyncListener):
    pass


@pytest.mark.parametrize("concurrent", [False, True])
async def test_one_publish_is_one_scope_for_all_its_handlers(concurrent: bool) -> None:
    UNITS_SEEN.clear()
    mediator = make_mediator(FirstListener, SecondListener)

    await mediator.publish(Happened(), concurrent=concurrent)
    await mediator.publish(Happened(), concurrent=concurrent)

    assert UNITS_SEEN[0] == UNITS_SEEN[1]
    assert UNITS_SEEN[2] == UNITS_SEEN[3]
    assert UNITS_SEEN[0] != UNITS_SEEN[2]


def test_publish_sync_is_one_scope_for_all_its_handlers() -> None:
    UNITS_SEEN.clear()
    mediator = make_mediator(SyncListener, SyncListenerToo)

    mediator.publish_sync(Happened())
    mediator.publish_sync(Happened())

    assert UNITS_SEEN[0] == UNITS_SEEN[1] != UNITS_SEEN[2] == UNITS_SEEN[3]


async def test_closing_a_finished_stream_again_is_harmless() -> None:
    class Two(StreamQuery[int]):
        pass

    class TwoHandler(StreamHandler[Two, int]):
        @inject
        def __init__(self, unit: UnitOfWork) -> None:
            self.unit = unit

        async def handle(self, query: Two) -> AsyncIterator[int]:
            yield self.unit.id
            yield self.unit.id

    stream = make_mediator(TwoHandler).stream(Two())
    items = [item async for item in stream]

    await stream.aclose()
    assert len(set(items)) == 1


async def test_a_scoped_stream_behaves_as_an_async_generator() -> None:
    class Numbers(StreamQuery[int]):
        pass

    class NumbersHandler(StreamHandler[Numbers, int]):
        @inject
        def __init__(self, unit: UnitOfWork) -> None:
            self.unit = unit

        async def handle(self, query: Numbers) -> AsyncIterator[int]:
            try:
                yield 1
                yield 2
            except LookupError:
                yield -1

    mediator = make_mediator(NumbersHandler)

    stream = mediator.stream(Numbers())
    assert await stream.asend(None) == 1
    assert await stream.athrow(LookupError("recover")) == -1  # handled inside
    with pytest.raises(StopAsyncIteration):
        await anext(stream)

    unstarted = mediator.stream(Numbers())
    with pytest.raises(KeyError):
        await unstarted.athrow(KeyError("before the first item"))
    with pytest.raises(StopAsyncIteration):
        await anext(unstarted)


# --- cleanups registered with at_scope_exit ---------------------------------------


class Cleaned(Command[str]):
    """Registers the cleanups it is given, then fails if `fail` is set."""

    fail: bool = False


class CleanedHandler(CommandHandler[Cleaned, str]):
    cleanups: ClassVar[list[Callable[[], object]]] = []

    @inject
    def __init__(self, unit: UnitOfWork) -> None:
        self.unit = unit  # a request-scoped service: the route opens a scope

    def handle(self, request: Cleaned) -> str:
        for cleanup in self.cleanups:
            at_scope_exit(cleanup)
        if request.fail:
            raise ValueError("the handler failed")
        return "done"


def cleaned_mediator(*cleanups: Callable[[], object]) -> Mediator:
    CleanedHandler.cleanups = list(cleanups)
    return make_mediator(CleanedHandler)


async def test_cleanups_run_newest_first_and_async_ones_are_awaited() -> None:
    ran: list[str] = []

    async def closing() -> None:
        await asyncio.sleep(0)  # noqa: TID251 - a yield to the loop, not a wait
        ran.append("async")

    mediator = cleaned_mediator(
        lambda: ran.append("first"), closing, lambda: ran.append("last")
    )
    assert await mediator.send(Cleaned()) == "done"
    assert ran == ["last", "async", "first"]


async def test_failing_cleanups_do_not_stop_the_others_and_are_raised_together() -> (
    None
):
    ran: list[str] = []

    def broken() -> None:
        raise RuntimeError("cleanup one")

    async def broken_async() -> None:
        raise KeyError("cleanup two")

    mediator = cleaned_mediator(lambda: ran.append("kept"), broken, broken_async)
    with pytest.raises(ExceptionGroup) as raised:
        await mediator.send(Cleaned())
    assert [type(e) for e in raised.value.exceptions] == [KeyError, RuntimeError]
    assert ran == ["kept"]


async def test_a_failing_cleanup_is_noted_on_the_send_failure_not_raised() -> None:
    def broken() -> None:
        raise RuntimeError("cleanup")

    mediator = cleaned_mediator(broken)
    with pytest.raises(ValueError, match="the handler failed") as raised:
        await mediator.send(Cleaned(fail=True))
    assert raised.value.__notes__ == [
        "scope cleanup also failed: RuntimeError: cleanup"
    ]


def test_send_sync_refuses_an_async_cleanup_and_runs_the_rest() -> None:
    ran: list[str] = []
    awaitables: list[Coroutine[Any, Any, None]] = []

    async def closing() -> None:
        ran.append("async")  # never runs: the coroutine is closed unawaited

    def start_closing() -> Coroutine[Any, Any, None]:
        awaitables.append(closing())
        return awaitables[-1]

    mediator = cleaned_mediator(lambda: ran.append("first"), start_closing)
    with pytest.raises(SyncPathError, match="is async and the send is sync"):
        mediator.send_sync(Cleaned())
    assert ran == ["first"]
    # closed, so there is no "never awaited" warning
    assert inspect.getcoroutinestate(awaitables[0]) == inspect.CORO_CLOSED


def test_send_sync_runs_sync_cleanups_newest_first() -> None:
    ran: list[str] = []
    mediator = cleaned_mediator(lambda: ran.append("first"), lambda: ran.append("last"))
    assert mediator.send_sync(Cleaned()) == "done"
    assert ran == ["last", "first"]
