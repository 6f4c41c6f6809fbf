"""``@fallback`` and its handler: refused when decorated or built, not in an outage."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
from injector import Injector, inject

from mediator import (
    Command,
    CommandHandler,
    ConfigurationError,
    FallbackBehavior,
    FallbackHandler,
    Mediator,
    MediatorModule,
    Query,
    QueryHandler,
    UnresolvableDependencyError,
    degradation,
    fallback,
)
from tests.mediator.fallback.split.queries import ShelfStock, ShelfStockHandler


class Answer(FallbackHandler["Marked", int]):
    def handle(self, request: Marked, failure: Exception) -> int:
        return 0


@fallback(Answer)
class Marked(Query[int]):
    pass


class MarkedHandler(QueryHandler[Marked, int]):
    def handle(self, request: Marked) -> int:
        raise ConnectionError("down")


def build(*handlers: type[Any], defaults: bool = True) -> Mediator:
    def configure(m: Any) -> None:
        m.add_handler(*handlers)
        if defaults:
            m.use_defaults()

    return Injector([MediatorModule(configure)]).get(Mediator)


# --- at decoration ------------------------------------------------------------


def test_a_command_cannot_be_marked() -> None:
    class Reserve(Command[int]):
        sku: str

    with pytest.raises(
        TypeError,
        match=re.escape(
            "@fallback goes on Query classes, not on the Command "
            "test_a_command_cannot_be_marked.<locals>.Reserve: a write cannot "
            "answer from elsewhere, its failure must reach the caller"
        ),
    ):
        fallback(Answer)(Reserve)  # type: ignore[type-var]


@pytest.mark.parametrize("target", [object, 42, "Marked"])
def test_only_a_query_class_can_be_marked(target: Any) -> None:
    with pytest.raises(TypeError, match=r"@fallback\(Answer\) goes on Query classes"):
        fallback(Answer)(target)


def test_fallback_written_bare_is_refused() -> None:
    with pytest.raises(
        TypeError, match=re.escape("@fallback takes a FallbackHandler class")
    ):
        fallback(Marked)  # type: ignore[arg-type]


def test_an_abstract_fallback_handler_is_refused() -> None:
    class Unfinished(FallbackHandler[Marked, int]):
        pass

    with pytest.raises(TypeError, match="is abstract: implement handle"):
        fallback(Unfinished)


def test_a_generator_fallback_handler_is_refused() -> None:
    class Yielding(FallbackHandler[Marked, int]):
        def handle(self, request: Marked, failure: Exception) -> Iterator[int]:  # type: ignore[override]
            yield 0

    with pytest.raises(TypeError, match="handle\\(\\) is a generator"):
        fallback(Yielding)


def test_the_mark_is_inherited_and_a_subclass_may_name_another() -> None:
    class Narrower(Marked):
        pass

    class Other(FallbackHandler["Renamed", int]):
        def handle(self, request: Any, failure: Exception) -> int:
            return 1

    @fallback(Other)
    class Renamed(Marked):
        pass

    from mediator._core.markers import fallback_handler_of

    assert fallback_handler_of(Narrower) is Answer
    assert fallback_handler_of(Renamed) is Other
    assert fallback_handler_of(Marked) is Answer


# --- when the mediator is built ----------------------------------------------


def test_a_marked_query_answers_from_its_fallback() -> None:
    assert build(MarkedHandler).send_sync(Marked()) == 0
    assert degradation() is not None


def test_a_hand_wired_chain_without_the_behavior_fails_at_build() -> None:
    with pytest.raises(
        ConfigurationError,
        match=re.escape(
            "Marked (module tests.mediator.fallback.test_marker) is marked "
            "@fallback, but no behavior of stage FALLBACK in the mediator's chain "
            "applies to it, so the marker would do nothing: call .use_defaults() "
            "in the MediatorModule callback, or .add_behavior(FallbackBehavior)"
        ),
    ):
        build(MarkedHandler, defaults=False)


def test_a_hand_wired_chain_with_the_behavior_falls_back() -> None:
    mediator = Injector(
        [
            MediatorModule(
                lambda m: m.add_handler(MarkedHandler).add_behavior(FallbackBehavior)
            )
        ]
    ).get(Mediator)
    assert mediator.send_sync(Marked()) == 0


class ForAnother(FallbackHandler["Marked", int]):
    def handle(self, request: Marked, failure: Exception) -> int:
        return 0


@fallback(ForAnother)
class Wrongly(Query[int]):
    pass


class WronglyHandler(QueryHandler[Wrongly, int]):
    def handle(self, request: Wrongly) -> int:
        return 1


def test_a_fallback_for_another_query_fails_at_build() -> None:
    with pytest.raises(
        ConfigurationError,
        match=re.escape(
            "Wrongly (module tests.mediator.fallback.test_marker) is marked "
            "@fallback(ForAnother), but ForAnother (module "
            "tests.mediator.fallback.test_marker) answers Marked: derive it from "
            "FallbackHandler[Wrongly, ...]"
        ),
    ):
        build(WronglyHandler)


class ReturnsText(FallbackHandler["CountQuery", str]):
    def handle(self, request: CountQuery, failure: Exception) -> str:
        return "none"


@fallback(ReturnsText)
class CountQuery(Query[int]):
    pass


class CountHandler(QueryHandler[CountQuery, int]):
    def handle(self, request: CountQuery) -> int:
        return 1


def test_a_fallback_returning_another_type_fails_at_build() -> None:
    with pytest.raises(
        ConfigurationError,
        match=re.escape(
            "ReturnsText (module tests.mediator.fallback.test_marker) returns str, "
            "but CountQuery (module tests.mediator.fallback.test_marker) answers "
            "int: a fallback returns what the query's handler does, "
            "FallbackHandler[CountQuery, int]"
        ),
    ):
        build(CountHandler)


class ReturnsList(FallbackHandler["Listing", list[str]]):
    def handle(self, request: Listing, failure: Exception) -> list[str]:
        return []


@fallback(ReturnsList)
class Listing(Query[list[int]]):
    pass


class ListingHandler(QueryHandler[Listing, list[int]]):
    def handle(self, request: Listing) -> list[int]:
        return [1]


def test_a_generic_response_type_is_compared_whole() -> None:
    with pytest.raises(ConfigurationError, match=r"returns list\[str\]"):
        build(ListingHandler)


class Nameless(FallbackHandler["Nowhere", int]):  # type: ignore[name-defined]
    def handle(self, request: Any, failure: Exception) -> int:
        return 0


@fallback(Nameless)
class Lost(Query[int]):
    pass


class LostHandler(QueryHandler[Lost, int]):
    def handle(self, request: Lost) -> int:
        return 1


def test_a_forward_reference_that_names_nothing_fails_at_build() -> None:
    with pytest.raises(ConfigurationError, match="answers Nowhere: derive it"):
        build(LostHandler)


class Store:
    """A service nobody binds: it is abstract."""

    def __init__(self, url: str) -> None:
        self.url = url


class NeedsStore(FallbackHandler["Stocked", int]):
    @inject
    def __init__(self, store: Store) -> None:
        self.store = store

    def handle(self, request: Stocked, failure: Exception) -> int:
        return 0


@fallback(NeedsStore)
class Stocked(Query[int]):
    pass


class StockedHandler(QueryHandler[Stocked, int]):
    def handle(self, request: Stocked) -> int:
        return 1


def test_a_fallback_that_cannot_be_built_fails_at_build() -> None:
    with pytest.raises(
        UnresolvableDependencyError,
        match=re.escape(
            "fallback handler NeedsStore (module tests.mediator.fallback.test_marker)"
            " for Stocked (module tests.mediator.fallback.test_marker)"
        ),
    ):
        build(StockedHandler)


def test_a_query_imported_only_for_type_checking_is_matched_by_its_name() -> None:
    assert build(ShelfStockHandler).send_sync(ShelfStock(sku="A")) == 5


def test_an_unmarked_command_is_left_alone() -> None:
    class Plain(Command[int]):
        pass

    class PlainHandler(CommandHandler[Plain, int]):
        def handle(self, request: Plain) -> int:
            raise ConnectionError("down")

    with pytest.raises(ConnectionError):
        build(PlainHandler).send_sync(Plain())
