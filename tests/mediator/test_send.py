"""Sending: async and sync handlers, the sync path, streams, and the request models."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import aclosing
from decimal import Decimal
from typing import Any

import pydantic
import pytest

import mediator as package
from mediator import (
    Command,
    CommandHandler,
    ConfigurationError,
    Next,
    Query,
    QueryHandler,
    Stage,
    StreamHandler,
    StreamQuery,
    SyncPathError,
)
from tests.mediator._support.support import build

pytestmark = pytest.mark.anyio


class GetPrice(Query[Decimal]):
    sku: str


class AsyncPrice(QueryHandler[GetPrice, Decimal]):
    async def handle(self, request: GetPrice) -> Decimal:
        return Decimal("2.50")


class Rename(Command[str]):
    name: str


class PlainRename(CommandHandler[Rename, str]):
    def handle(self, request: Rename) -> str:
        return request.name.title()


class AsyncOnly:
    stage = Stage.AUDIT

    async def handle(self, request: Any, next: Next[Any]) -> Any:
        return await next()


async def test_send_awaits_an_async_handler() -> None:
    mediator = build(lambda m: m.add_handler(AsyncPrice))

    assert await mediator.send(GetPrice(sku="A")) == Decimal("2.50")


async def test_a_plain_def_handler_is_accepted_on_the_async_path() -> None:
    mediator = build(lambda m: m.add_handler(PlainRename))

    assert await mediator.send(Rename(name="ada lovelace")) == "Ada Lovelace"


def test_send_sync_runs_a_plain_handler_without_an_event_loop() -> None:
    mediator = build(lambda m: m.add_handler(PlainRename))

    assert mediator.send_sync(Rename(name="grace")) == "Grace"


def test_send_sync_refuses_an_async_handler_by_name() -> None:
    mediator = build(lambda m: m.add_handler(AsyncPrice))

    with pytest.raises(SyncPathError) as caught:
        mediator.send_sync(GetPrice(sku="A"))

    assert "AsyncPrice (module tests.mediator.test_send) handles GetPrice" in str(
        caught.value
    )
    assert "await mediator.send" in str(caught.value)


def test_send_sync_refuses_an_async_only_behavior_by_name() -> None:
    mediator = build(lambda m: m.add_handler(PlainRename).add_behavior(AsyncOnly))

    with pytest.raises(
        SyncPathError, match=r"behavior AsyncOnly \(module .*\) applies to Rename"
    ):
        mediator.send_sync(Rename(name="x"))


async def test_the_async_path_still_works_with_that_behavior() -> None:
    mediator = build(lambda m: m.add_handler(PlainRename).add_behavior(AsyncOnly))

    assert await mediator.send(Rename(name="x")) == "X"


def test_handler_instances_are_built_per_send() -> None:
    built: list[int] = []

    class Counts(CommandHandler[Rename, str]):
        def __init__(self) -> None:
            built.append(1)

        def handle(self, request: Rename) -> str:
            return str(len(built))

    mediator = build(lambda m: m.add_handler(Counts))

    assert [mediator.send_sync(Rename(name="n")) for _ in range(3)] == ["1", "2", "3"]


class Count(StreamQuery[int]):
    upto: int


async def test_a_plain_generator_handler_streams_too() -> None:
    class Plain(StreamHandler[Count, int]):
        def handle(self, query: Count) -> Iterator[int]:
            yield from range(query.upto)

    mediator = build(lambda m: m.add_handler(Plain))

    assert [i async for i in mediator.stream(Count(upto=3))] == [0, 1, 2]


async def test_a_handler_may_return_an_iterable_instead_of_yielding() -> None:
    class ReturnsList(StreamHandler[Count, int]):
        def handle(self, query: Count) -> list[int]:
            return list(range(query.upto))

    class ReturnsNonsense(StreamHandler[Count, int]):
        def handle(self, query: Count) -> Any:
            return 42

    listing = build(lambda m: m.add_handler(ReturnsList))
    assert [i async for i in listing.stream(Count(upto=2))] == [0, 1]
    # A plain-def handler is called in a worker thread when the first item is
    # pulled, so the wrong return shows there, not when the stream is opened.
    nonsense = build(lambda m: m.add_handler(ReturnsNonsense)).stream(Count(upto=1))
    with pytest.raises(TypeError, match=r"ReturnsNonsense .* returned int"):
        await anext(nonsense)


async def test_a_stream_behavior_sees_every_item_and_can_transform_them() -> None:
    class Doubles:
        stage = Stage.AUDIT

        async def handle(self, request: Any, next: Next[Any]) -> Any:
            return await next()

        async def handle_stream(self, request: Any, next: Any) -> AsyncIterator[Any]:
            async for item in next():
                yield item * 2

    class Gen(StreamHandler[Count, int]):
        async def handle(self, query: Count) -> AsyncIterator[int]:
            for index in range(query.upto):
                yield index

    mediator = build(lambda m: m.add_handler(Gen).add_behavior(Doubles))

    assert [i async for i in mediator.stream(Count(upto=3))] == [0, 2, 4]


async def test_a_failure_mid_stream_reaches_the_consumer_after_earlier_items() -> None:
    class Breaks(StreamHandler[Count, int]):
        async def handle(self, query: Count) -> AsyncIterator[int]:
            yield 1
            raise ConnectionError("source went away")

    mediator = build(lambda m: m.add_handler(Breaks))
    seen: list[int] = []

    async def consume() -> None:
        async for item in mediator.stream(Count(upto=5)):
            seen.append(item)

    with pytest.raises(ConnectionError, match="source went away"):
        await consume()

    assert seen == [1]


def test_requests_are_frozen_validated_models() -> None:
    request = GetPrice(sku="A")

    with pytest.raises(pydantic.ValidationError):
        request.sku = "B"  # pyright: ignore[reportAttributeAccessIssue]
    with pytest.raises(pydantic.ValidationError):
        GetPrice(sku=3)  # type: ignore[arg-type]
    with pytest.raises(pydantic.ValidationError):
        GetPrice(sku="A", colour="red")  # type: ignore[call-arg]
    assert request.model_dump() == {"sku": "A"}
    assert hash(request) == hash(GetPrice(sku="A"))


def test_the_public_names_are_pinned_and_sorted() -> None:
    assert package.__all__ == sorted(package.__all__)
    assert set(package.__all__) == {
        "AsyncIdempotencyStore", "AsyncUnitOfWork", "AuditBehavior", "AuditRecord",
        "AuditSink", "AuthorizationBehavior", "Behavior", "BehaviorRegistration",
        "BusinessRuleError", "Claim", "Clock", "Command", "CommandHandler",
        "ConfigurationError", "ConflictError", "ContextPrincipalProvider",
        "DeadlineExceededError", "Degradation",
        "DomainError", "DuplicateHandlerError", "FallbackBehavior",
        "FallbackHandler", "FieldError", "ForbiddenError",
        "HandlerNotFoundError", "IdempotencyBehavior", "IdempotencyKeyMismatchError",
        "IdempotencyOptions", "IdempotencyStore", "LoggingAuditSink", "Mediator",
        "MediatorConfig",
        "MediatorError", "MediatorModule", "Next", "NotFoundError", "Notification",
        "NotificationHandler", "Outbox", "OutboxEntry", "Policy", "Principal",
        "PrincipalProvider", "Query",
        "QueryHandler", "Request", "RequestHandler", "RequestScope",
        "ScopeError", "Sensitive", "Stage", "StoredOutcome", "StreamHandler",
        "StreamNext", "StreamQuery", "SyncNext", "SyncPathError", "SystemClock",
        "SystemWallClock", "TransactionBehavior", "TransientDatabaseError",
        "UnitOfWork", "UnresolvableDependencyError", "ValidationBehavior",
        "ValidationError", "Validator", "WallClock", "acting_as", "at_scope_exit",
        "authorize", "correlation_id", "current_correlation_id",
        "current_idempotency_key", "current_principal", "degradation", "degraded",
        "derive_idempotency_key", "fallback", "idempotency_key", "idempotent",
        "in_unit_of_work", "is_replay",
        "is_transactional",
        "register_behavior", "request_scope", "transactional",
    }  # fmt: skip
    for name in package.__all__:
        assert getattr(package, name) is not None


def test_domain_and_configuration_errors_are_separate_families() -> None:
    domain = [
        package.ValidationError,
        package.BusinessRuleError,
        package.IdempotencyKeyMismatchError,
        package.NotFoundError,
        package.ForbiddenError,
        package.ConflictError,
    ]
    configuration = [
        package.HandlerNotFoundError,
        package.DuplicateHandlerError,
        package.UnresolvableDependencyError,
        package.SyncPathError,
        package.ScopeError,
    ]
    for error in domain:
        assert issubclass(error, package.DomainError)
        assert not issubclass(error, package.ConfigurationError)
    for error in configuration:
        assert issubclass(error, package.ConfigurationError)
        assert not issubclass(error, package.DomainError)
    invalid = package.ValidationError(
        "bad request", [package.FieldError(("lines", 0, "qty"), "must be positive")]
    )
    assert invalid.errors[0].path == ("lines", 0, "qty")
    assert str(invalid) == "bad request"


async def test_a_handler_may_return_an_async_iterable() -> None:
    class Source:
        def __init__(self, upto: int) -> None:
            self.upto = upto

        def __aiter__(self) -> AsyncIterator[int]:
            return self.items()

        async def items(self) -> AsyncIterator[int]:
            for index in range(self.upto):
                yield index

    class ReturnsSource(StreamHandler[Count, int]):
        def handle(self, query: Count) -> Source:
            return Source(query.upto)

    mediator = build(lambda m: m.add_handler(ReturnsSource))

    assert [i async for i in mediator.stream(Count(upto=3))] == [0, 1, 2]


async def test_every_stream_can_be_closed_early_with_aclosing() -> None:
    closed: list[str] = []

    class Endless(StreamHandler[Count, int]):
        async def handle(self, query: Count) -> AsyncIterator[int]:
            try:
                index = 0
                while True:
                    yield index
                    index += 1
            finally:
                closed.append("source")

    class Passes:
        async def handle(self, request: Any, next: Next[Any]) -> Any:
            return await next()

        async def handle_stream(self, request: Any, next: Any) -> AsyncIterator[Any]:
            async for item in next():
                yield item

    bare = build(lambda m: m.add_handler(Endless))
    wrapped = build(lambda m: m.add_handler(Endless).add_behavior(Passes))
    for mediator in (bare, wrapped):
        async with aclosing(mediator.stream(Count(upto=0))) as stream:
            async for item in stream:
                if item == 2:
                    break

    assert closed == ["source", "source"]


async def test_a_behavior_handle_stream_must_be_an_async_generator() -> None:
    class ReturnsIterator:
        async def handle(self, request: Any, next: Next[Any]) -> Any:
            return await next()

        def handle_stream(self, request: Any, next: Any) -> AsyncIterator[Any]:
            return next()  # type: ignore[no-any-return]

    with pytest.raises(
        ConfigurationError, match="handle_stream must be an async generator"
    ):
        build(lambda m: m.add_behavior(ReturnsIterator))
