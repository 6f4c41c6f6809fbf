"""`BuildContext.overrides`: kinds of step a context builds in the step's place."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from http_resilience import BreakerOptions, RetryOptions
from http_resilience._core.builder import (
    BuildContext,
    StepBuilder,
    StepOptions,
    build_async,
    build_sync,
)
from http_resilience._core.call import AsyncHandler, Call, SyncHandler
from http_resilience._core.send import AsyncSend, SyncSend
from http_resilience._core.telemetry import Telemetry
from http_resilience._strategies.breaker.strategy import AsyncBreaker, SyncBreaker
from http_resilience._strategies.retry.drive import AsyncRetry
from http_resilience._strategies.retry.drive_sync import SyncRetry
from http_resilience.testing import FakeClock


class TaggedAsync:
    """A link that marks the responses passing through it."""

    def __init__(self, next: AsyncHandler) -> None:
        self.next = next

    async def handle(self, request: httpx.Request, call: Call) -> httpx.Response:
        response = await self.next.handle(request, call)
        response.headers["x-built-by"] = "override"
        return response


class TaggedSync:
    """`TaggedAsync` for the sync chain."""

    def __init__(self, next: SyncHandler) -> None:
        self.next = next

    def handle_sync(self, request: httpx.Request, call: Call) -> httpx.Response:
        response = self.next.handle_sync(request, call)
        response.headers["x-built-by"] = "override"
        return response


class Builder:
    """Makes a `StepBuilder` whose strategy takes the first `take` steps asked."""

    def __init__(self, take: int = 1) -> None:
        self.take = take
        self.asked: list[BreakerOptions] = []

    def strategy(self, step: BreakerOptions, context: BuildContext) -> str | None:
        self.asked.append(step)
        return "taken" if len(self.asked) <= self.take else None

    def step_builder(self) -> StepBuilder[BreakerOptions, str]:
        return StepBuilder(
            BreakerOptions,
            self.strategy,
            lambda next, strategy: TaggedAsync(next),
            lambda next, strategy: TaggedSync(next),
        )


class MyBreakerOptions(BreakerOptions):
    """A user's own breaker options, derived from the package's."""


def ok(request: httpx.Request) -> httpx.Response:
    return httpx.Response(200)


def context(builder: Builder) -> BuildContext:
    overrides: dict[type[StepOptions], StepBuilder[Any, Any]] = {
        BreakerOptions: builder.step_builder()
    }
    return BuildContext(FakeClock(), Telemetry("orders"), overrides=overrides)


def call() -> Call:
    return Call("orders", "GET", "http://orders:80")


REQUEST = httpx.Request("GET", "http://orders/")


def test_without_overrides_every_step_builds_itself() -> None:
    built = build_sync(
        [RetryOptions(), BreakerOptions()],
        SyncSend(httpx.MockTransport(ok)),
        BuildContext(FakeClock(), Telemetry("orders")),
    )
    assert [type(strategy) for strategy in built.strategies] == [SyncRetry, SyncBreaker]


def test_a_registered_kind_is_built_by_its_builder_the_others_by_themselves() -> None:
    builder = Builder()
    built = build_sync(
        [RetryOptions(), BreakerOptions()],
        SyncSend(httpx.MockTransport(ok)),
        context(builder),
    )
    assert [type(strategy) for strategy in built.strategies] == [SyncRetry, TaggedSync]
    assert [type(step) for step in builder.asked] == [BreakerOptions]
    response = built.handler.handle_sync(REQUEST, call())
    assert response.headers["x-built-by"] == "override"


def test_a_builder_that_declines_leaves_the_step_to_its_own_options() -> None:
    builder = Builder(take=1)
    built = build_sync(
        [BreakerOptions(), BreakerOptions()],
        SyncSend(httpx.MockTransport(ok)),
        context(builder),
    )
    # Built innermost first: the inner step is the one the builder took.
    assert [type(strategy) for strategy in built.strategies] == [
        SyncBreaker,
        TaggedSync,
    ]
    assert len(builder.asked) == 2


def test_a_subclass_of_a_registered_kind_is_found_through_its_bases() -> None:
    builder = Builder()
    built = build_sync(
        [MyBreakerOptions()],
        SyncSend(httpx.MockTransport(ok)),
        context(builder),
    )
    assert [type(strategy) for strategy in built.strategies] == [TaggedSync]


@pytest.mark.anyio
async def test_the_async_chain_asks_the_same_table() -> None:
    builder = Builder(take=1)
    built = build_async(
        [RetryOptions(), BreakerOptions(), BreakerOptions()],
        AsyncSend(httpx.MockTransport(ok)),
        context(builder),
    )
    assert [type(strategy) for strategy in built.strategies] == [
        AsyncRetry,
        AsyncBreaker,
        TaggedAsync,
    ]
    response = await built.handler.handle(REQUEST, call())
    assert response.headers["x-built-by"] == "override"
