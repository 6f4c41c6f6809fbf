"""How handler dependencies are built: singletons, instances, provider methods."""

from __future__ import annotations

import itertools
from typing import ClassVar

import pytest
from injector import Binder, Injector, Module, inject, provider, singleton

from mediator import (
    Mediator,
    MediatorModule,
    Query,
    QueryHandler,
    RequestScope,
    UnresolvableDependencyError,
)

pytestmark = pytest.mark.anyio

_ids = itertools.count(1)


class Clock:
    def __init__(self) -> None:
        self.id = next(_ids)


class Settings:
    def __init__(self, name: str) -> None:
        self.name = name


class Connection:
    def __init__(self) -> None:
        self.id = next(_ids)


class Describe(Query[tuple[int, str, int]]):
    pass


class DescribeHandler(QueryHandler[Describe, tuple[int, str, int]]):
    @inject
    def __init__(
        self, clock: Clock, settings: Settings, connection: Connection
    ) -> None:
        self.clock = clock
        self.settings = settings
        self.connection = connection

    async def handle(self, request: Describe) -> tuple[int, str, int]:
        return self.clock.id, self.settings.name, self.connection.id


class Infrastructure(Module):
    def configure(self, binder: Binder) -> None:
        binder.bind(Clock, to=Clock, scope=singleton)
        binder.bind(Settings, to=Settings("shop"))

    @provider
    def connection(self) -> Connection:  # a provider method: opaque to the wiring
        return Connection()


async def test_dependencies_keep_their_injector_scopes() -> None:
    injector = Injector(
        [Infrastructure(), MediatorModule(lambda m: m.add_handler(DescribeHandler))]
    )
    mediator = injector.get(Mediator)

    clock_a, name_a, connection_a = await mediator.send(Describe())
    clock_b, name_b, connection_b = await mediator.send(Describe())

    assert clock_a == clock_b == injector.get(Clock).id  # one singleton, shared
    assert name_a == name_b == "shop"  # the bound instance
    assert connection_a != connection_b  # a provider method runs per send


async def test_a_provider_method_may_return_a_request_scoped_service() -> None:
    class Scoped(Module):
        def configure(self, binder: Binder) -> None:
            binder.bind(Clock, to=Clock, scope=singleton)
            binder.bind(Settings, to=Settings("scoped"))
            binder.bind(Connection, to=Connection, scope=RequestScope)

    mediator = Injector(
        [Scoped(), MediatorModule(lambda m: m.add_handler(DescribeHandler))]
    ).get(Mediator)

    _, _, first = await mediator.send(Describe())
    _, _, second = await mediator.send(Describe())

    assert first != second


async def test_without_auto_binding_handlers_build_and_missing_deps_are_named() -> None:
    class Partial(Module):
        def configure(self, binder: Binder) -> None:
            binder.bind(Settings, to=Settings("strict"))
            binder.bind(Connection, to=Connection)

    module = MediatorModule(lambda m: m.add_handler(DescribeHandler))
    with pytest.raises(
        UnresolvableDependencyError, match="DescribeHandler -> Clock has no binding"
    ):
        Injector([Partial(), module], auto_bind=False).get(Mediator)

    class Complete(Partial):
        def configure(self, binder: Binder) -> None:
            super().configure(binder)
            binder.bind(Clock, to=Clock, scope=singleton)

    mediator = Injector([Complete(), module], auto_bind=False).get(Mediator)
    assert (await mediator.send(Describe()))[1] == "strict"


@singleton
class CountingHandler(QueryHandler[Describe, tuple[int, str, int]]):
    built: ClassVar[int] = 0

    def __init__(self) -> None:
        CountingHandler.built += 1

    def handle(self, request: Describe) -> tuple[int, str, int]:
        return CountingHandler.built, "singleton", 0


class Nested(Query[int]):
    pass


@singleton
class NestedHandler(QueryHandler[Nested, int]):
    """A singleton that sends: built on first use, not while the mediator is built."""

    @inject
    def __init__(self, mediator: Mediator) -> None:
        self.mediator = mediator

    async def handle(self, request: Nested) -> int:
        return (await self.mediator.send(Describe()))[0]


async def test_a_singleton_handler_is_built_once_and_shared_with_the_injector() -> None:
    CountingHandler.built = 0
    injector = Injector([MediatorModule(lambda m: m.add_handler(CountingHandler))])
    mediator = injector.get(Mediator)

    assert CountingHandler.built == 1  # built with the mediator
    assert mediator.send_sync(Describe()) == (1, "singleton", 0)
    assert (await mediator.send(Describe()))[0] == 1
    assert injector.get(CountingHandler) is injector.get(CountingHandler)
    assert CountingHandler.built == 1


async def test_a_singleton_handler_that_sends_is_built_on_first_use() -> None:
    CountingHandler.built = 0
    injector = Injector(
        [MediatorModule(lambda m: m.add_handler(CountingHandler, NestedHandler))]
    )
    mediator = injector.get(Mediator)

    assert await mediator.send(Nested()) == 1
    assert await mediator.send(Nested()) == 1
    assert injector.get(NestedHandler).mediator is mediator


@singleton
class AsyncSingletonHandler(QueryHandler[Nested, int]):
    async def handle(self, request: Nested) -> int:
        return id(self)


async def test_an_async_singleton_handler_serves_every_send() -> None:
    injector = Injector(
        [MediatorModule(lambda m: m.add_handler(AsyncSingletonHandler))]
    )
    mediator = injector.get(Mediator)

    first = await mediator.send(Nested())

    assert (
        await mediator.send(Nested())
        == first
        == id(injector.get(AsyncSingletonHandler))
    )


def test_a_singleton_handler_builds_without_auto_binding_too() -> None:
    CountingHandler.built = 0
    module = MediatorModule(lambda m: m.add_handler(CountingHandler))

    mediator = Injector([module], auto_bind=False).get(Mediator)

    assert mediator.send_sync(Describe()) == (1, "singleton", 0)
    assert mediator.send_sync(Describe()) == (1, "singleton", 0)


def test_a_handler_class_bound_in_a_parent_injector_is_built_by_its_binding() -> None:
    class Original(QueryHandler[Nested, int]):
        def handle(self, request: Nested) -> int:
            return 1

    class Replacement(Original):
        def handle(self, request: Nested) -> int:
            return 2

    class Replace(Module):
        def configure(self, binder: Binder) -> None:
            binder.bind(Original, to=Replacement)

    parent = Injector([Replace()])
    child = parent.create_child_injector(
        [MediatorModule(lambda m: m.add_handler(Original))]
    )

    assert child.get(Mediator).send_sync(Nested()) == 2
