"""Placing behaviors in the chain: stage order, ready instances, and every refusal.

Written to close what mutation testing (`make mutation`) found the other chain
tests let through: the refusals are pinned word for word, and ready instances
are checked beside classes.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from injector import Injector

from mediator import (
    ConfigurationError,
    Mediator,
    MediatorConfig,
    MediatorModule,
    Next,
    Query,
    QueryHandler,
    Stage,
    SyncNext,
    SyncPathError,
    request_scope,
)
from tests.mediator._support.support import Journal, build

pytestmark = pytest.mark.anyio


class Ping(Query[int]):
    n: int


class PingHandler(QueryHandler[Ping, int]):
    def handle(self, request: Ping) -> int:
        return request.n


class Marking:
    """A ready-made behavior: an instance, registered as it is."""

    def __init__(self, label: str, stage: Stage, journal: Journal) -> None:
        self.label = label
        self.stage = stage
        self.journal = journal

    async def handle(self, request: Any, next: Next[Any]) -> Any:
        self.journal.add(self.label)
        return await next()

    def handle_sync(self, request: Any, next: SyncNext[Any]) -> Any:
        self.journal.add(self.label)
        return next()


class Outer(Marking):
    pass


class Inner(Marking):
    pass


class Twice:
    stage = Stage.AUDIT

    async def handle(self, request: Any, next: Next[Any]) -> Any:
        return await next()


class NoStage:
    async def handle(self, request: Any, next: Next[Any]) -> Any:
        return await next()


class NoHandle:
    stage = Stage.AUDIT


class SyncHandle:
    stage = Stage.AUDIT

    def handle(self, request: Any, next: SyncNext[Any]) -> Any:
        return next()


class ReturningStream:
    stage = Stage.AUDIT

    async def handle(self, request: Any, next: Next[Any]) -> Any:
        return await next()

    async def handle_stream(self, request: Any, next: Any) -> AsyncIterator[Any]:
        return next()  # type: ignore[no-any-return]


class AsyncOnly:
    stage = Stage.AUDIT

    async def handle(self, request: Any, next: Next[Any]) -> Any:
        return await next()


def refusal(*behaviors: object, use_defaults: bool = False) -> str:
    def configure(config: MediatorConfig) -> object:
        config.add_handler(PingHandler).add_behavior(*behaviors)
        return config.use_defaults() if use_defaults else config

    with pytest.raises(ConfigurationError) as refused:
        build(configure)
    return str(refused.value)


def test_an_unnamed_stage_shows_as_custom() -> None:
    assert repr(Stage(350)) == "Stage(350, 'custom')"
    assert repr(Stage(350, "TENANCY")) == "Stage(350, 'TENANCY')"


async def test_ready_instances_of_different_classes_are_placed_by_stage() -> None:
    journal = Journal()
    inner = Inner("inner", Stage.RETRY, journal)
    outer = Outer("outer", Stage.AUDIT, journal)
    tenancy = Marking("tenancy", Stage(350, "TENANCY"), journal)
    mediator = build(
        lambda m: (
            m.add_handler(PingHandler)
            .add_behavior(inner, tenancy, outer)
            .use_defaults()
        )
    )

    assert await mediator.send(Ping(n=4)) == 4
    assert journal.entries == ["outer", "tenancy", "inner"]
    assert mediator.send_sync(Ping(n=5)) == 5
    assert journal.entries[3:] == ["outer", "tenancy", "inner"]


@request_scope
class Basket:
    """A request-scoped service."""


class ReachesTheScope:
    """A ready instance may hold the injector and ask it for scoped services."""

    stage = Stage.AUDIT

    def __init__(self) -> None:
        self.injector: Injector | None = None
        self.same: list[bool] = []

    async def handle(self, request: Any, next: Next[Any]) -> Any:
        assert self.injector is not None
        first = self.injector.get(Basket)
        self.same.append(first is self.injector.get(Basket))
        return await next()


async def test_a_ready_instance_runs_inside_a_request_scope() -> None:
    behavior = ReachesTheScope()
    injector = Injector(
        [MediatorModule(lambda m: m.add_handler(PingHandler).add_behavior(behavior))]
    )
    behavior.injector = injector
    mediator = injector.get(Mediator)

    assert await mediator.send(Ping(n=1)) == 1
    assert await mediator.send(Ping(n=2)) == 2
    assert behavior.same == [True, True]


def test_a_behavior_registered_twice_is_refused_word_for_word() -> None:
    assert refusal(Twice, Twice) == (
        f"behavior Twice (module {__name__}) is registered twice; it would run "
        "twice per request. Register it once."
    )


def test_a_behavior_without_a_stage_is_refused_word_for_word() -> None:
    assert refusal(NoStage, use_defaults=True) == (
        f"behavior NoStage (module {__name__}) declares no stage, so "
        "use_defaults() cannot place it: give the class `stage = Stage.<NAME>` or "
        "a custom Stage(value, name)"
    )


@pytest.mark.parametrize("behavior", [NoHandle, SyncHandle])
def test_a_behavior_without_an_async_handle_is_refused_word_for_word(
    behavior: type[Any],
) -> None:
    assert refusal(behavior) == (
        f"behavior {behavior.__name__} (module {__name__}) must define "
        "`async def handle(self, request, next)`; put synchronous logic in "
        "handle_sync"
    )


def test_a_handle_stream_that_is_no_generator_is_refused_word_for_word() -> None:
    assert refusal(ReturningStream) == (
        f"behavior ReturningStream (module {__name__}): handle_stream must be an "
        "async generator (async def with `async for item in next(): yield item`)"
    )


def test_the_sync_path_names_the_behavior_without_handle_sync() -> None:
    mediator = build(lambda m: m.add_handler(PingHandler).add_behavior(AsyncOnly))

    with pytest.raises(SyncPathError) as refused:
        mediator.send_sync(Ping(n=1))
    assert str(refused.value) == (
        f"behavior AsyncOnly (module {__name__}) applies to Ping but has no "
        "handle_sync, so send_sync cannot run it: await mediator.send(...) "
        "instead, or give the behavior a handle_sync"
    )
