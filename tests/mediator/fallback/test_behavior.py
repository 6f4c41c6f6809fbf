"""FallbackBehavior: once, after the retries, on an outage only; the answer says so."""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Coroutine
from datetime import timedelta
from typing import Any, ClassVar

import pytest
from injector import Injector, inject

from mediator import (
    ConfigurationError,
    Degradation,
    FallbackHandler,
    ForbiddenError,
    Mediator,
    MediatorModule,
    Next,
    NotFoundError,
    Query,
    QueryHandler,
    Stage,
    SyncNext,
    SyncPathError,
    ValidationError,
    at_scope_exit,
    degradation,
    degraded,
    fallback,
    request_scope,
)
from mediator._behaviors.fallback.behavior import is_outage
from mediator._core.scope import active_scope
from mediator_resilience import ResilienceMediatorModule
from tests.mediator.fallback.shop import (
    CACHED_AT,
    NOW,
    Fakes,
    GetStock,
    GetStockAsync,
    Outage,
    Records,
    shop,
)

pytestmark = pytest.mark.anyio

DEGRADED = Degradation(
    source="stock-cache",
    as_of=CACHED_AT,
    age=timedelta(seconds=42),
    failure="ConnectionError",
)
AFTER_RETRIES = ["handler"] * 4 + ["fallback:ConnectionError"]


def test_the_fallback_runs_once_after_the_retries_on_the_sync_path() -> None:
    outage, records = Outage(failures=4), Records()
    mediator, clock = shop(outage, records)

    assert mediator.send_sync(GetStock(sku="A")) == 7

    assert outage.journal == AFTER_RETRIES
    assert clock.sleeps == [0.2, 0.4, 0.8]  # all three retries ran first
    assert degradation() == DEGRADED
    [record] = records.records
    assert (record.outcome, record.degraded) == ("ok", DEGRADED)


async def test_the_fallback_runs_once_after_the_retries_on_the_async_path() -> None:
    outage, records = Outage(failures=4), Records()
    mediator, clock = shop(outage, records)

    assert await mediator.send(GetStockAsync(sku="A")) == 7

    assert outage.journal == AFTER_RETRIES
    assert clock.sleeps == [0.2, 0.4, 0.8]
    assert degradation() == DEGRADED
    [record] = records.records
    assert (record.outcome, record.degraded) == ("ok", DEGRADED)


async def test_a_plain_def_fallback_runs_under_send_too() -> None:
    outage = Outage(failures=4)
    mediator, _ = shop(outage)

    assert await mediator.send(GetStock(sku="A")) == 7
    assert outage.journal == AFTER_RETRIES
    assert degradation() == DEGRADED


async def test_a_retry_that_succeeds_is_not_degraded() -> None:
    outage, records = Outage(failures=3), Records()
    mediator, _ = shop(outage, records)

    assert await mediator.send(GetStockAsync(sku="A")) == 40
    assert mediator.send_sync(GetStock(sku="A")) == 40

    assert "fallback:ConnectionError" not in " ".join(outage.journal)
    assert degradation() is None
    assert [r.degraded for r in records.records] == [None, None]


async def test_a_domain_error_is_never_replaced() -> None:
    outage, records = Outage(failures=4), Records()
    mediator, _ = shop(outage, records)

    with pytest.raises(NotFoundError):
        await mediator.send(GetStockAsync(sku="gone"))
    with pytest.raises(NotFoundError):
        mediator.send_sync(GetStock(sku="gone"))

    assert outage.journal == []  # neither retried nor fallen back on
    assert degradation() is None
    assert [(r.outcome, r.degraded) for r in records.records] == [
        ("NotFoundError", None),
        ("NotFoundError", None),
    ]


async def test_a_cancellation_is_not_replaced() -> None:
    outage = Outage(failures=1, error=asyncio.CancelledError())
    mediator, _ = shop(outage)

    with pytest.raises(asyncio.CancelledError):
        await mediator.send(GetStockAsync(sku="A"))
    assert outage.journal == ["handler"]


def test_an_interrupt_is_not_replaced_on_the_sync_path() -> None:
    outage = Outage(failures=1, error=KeyboardInterrupt())
    mediator, _ = shop(outage)

    with pytest.raises(KeyboardInterrupt):
        mediator.send_sync(GetStock(sku="A"))
    assert outage.journal == ["handler"]


@pytest.mark.parametrize(
    "error",
    [
        ValidationError("bad", []),
        ForbiddenError("not yours"),
        ConfigurationError("set up wrongly"),
        ExceptionGroup("two", [ConnectionError(), NotFoundError("x")]),
    ],
    ids=["validation", "authorization", "configuration", "group-with-a-domain-error"],
)
def test_what_is_not_an_outage_reaches_the_caller(error: Exception) -> None:
    outage = Outage(failures=10, error=error)
    mediator, _ = shop(outage)

    with pytest.raises(type(error)) as raised:
        mediator.send_sync(GetStock(sku="A"))
    assert raised.value is error
    assert "fallback" not in " ".join(outage.journal)


def test_the_outage_rule() -> None:
    from pydantic import BaseModel
    from pydantic import ValidationError as PydanticError

    class Model(BaseModel):
        n: int

    with pytest.raises(PydanticError) as invalid:
        Model.model_validate({"n": "x"})
    assert is_outage(ConnectionError())
    assert is_outage(TimeoutError())
    assert is_outage(ExceptionGroup("both", [ConnectionError(), OSError()]))
    assert not is_outage(invalid.value)
    assert not is_outage(NotFoundError("x"))
    assert not is_outage(asyncio.CancelledError())
    assert not is_outage(BaseExceptionGroup("stop", [KeyboardInterrupt()]))


@pytest.mark.parametrize("path", ["sync", "async"])
async def test_a_fallback_that_fails_raises_the_original_with_its_own_attached(
    path: str,
) -> None:
    original = ConnectionError("down")
    broken = RuntimeError("the cache is down too")
    outage = Outage(failures=4, error=original, fallback_error=broken)
    records = Records()
    mediator, _ = shop(outage, records)

    async def send() -> int:
        if path == "sync":
            return mediator.send_sync(GetStock(sku="A"))
        return await mediator.send(GetStockAsync(sku="A"))

    with pytest.raises(ConnectionError) as raised:
        await send()

    assert raised.value is original
    assert raised.value.fallback_failure is broken  # type: ignore[attr-defined]
    assert broken.__context__ is original
    [note] = raised.value.__notes__
    assert "failed too, with RuntimeError" in note
    assert "the cache is down too" not in note
    assert outage.journal == AFTER_RETRIES  # called once
    assert degradation() is None
    assert [(r.outcome, r.degraded) for r in records.records] == [
        ("ConnectionError", None)
    ]


async def test_a_cancellation_during_the_fallback_propagates_as_it_is() -> None:
    outage = Outage(failures=4, fallback_error=asyncio.CancelledError())
    mediator, _ = shop(outage)

    with pytest.raises(asyncio.CancelledError):
        await mediator.send(GetStockAsync(sku="A"))


async def in_a_fresh_context(body: Coroutine[Any, Any, None]) -> None:
    """Run `body` with every context variable at its default.

    An earlier test on this worker may have left its own reading in the
    context a test starts in: a sync send in the main thread's, or an async
    one in the runner task anyio keeps across tests.
    """
    await asyncio.create_task(body, context=contextvars.Context())


async def test_degradation_is_read_per_send() -> None:
    outage = Outage(failures=4)
    mediator, _ = shop(outage)

    async def sends() -> None:
        assert degradation() is None
        await mediator.send(GetStockAsync(sku="A"))
        assert degradation() == DEGRADED
        # The handler answers now (its fifth call): this send was not degraded.
        assert await mediator.send(GetStockAsync(sku="A")) == 40
        assert degradation() is None

    await in_a_fresh_context(sends())


async def test_a_task_started_before_the_send_does_not_see_its_degradation() -> None:
    outage = Outage(failures=4)
    mediator, _ = shop(outage)
    seen: list[Degradation | None] = []

    async def elsewhere() -> None:
        seen.append(degradation())

    async def sends() -> None:
        other = asyncio.ensure_future(elsewhere())
        await mediator.send(GetStockAsync(sku="A"))
        await other
        assert degradation() == DEGRADED
        assert seen == [None]

    await in_a_fresh_context(sends())


# --- a @fallback send answers for itself, not for a send nested in it ----------


class NeverUsed(FallbackHandler["Overview", str]):
    def handle(self, request: Overview, failure: Exception) -> str:
        raise AssertionError("the overview's handler answers")


@fallback(NeverUsed)
class Overview(Query[str]):
    sku: str


class Unmarked(Query[str]):
    sku: str


class OverviewHandler(QueryHandler[Overview, str]):
    @inject
    def __init__(self, mediator: Mediator) -> None:
        self.mediator = mediator

    async def handle(self, request: Overview) -> str:
        stock = await self.mediator.send(GetStockAsync(sku=request.sku))
        inner = degradation()
        assert inner is not None  # the handler reads its inner send's reading
        return f"{stock} from {inner.source}"


class UnmarkedHandler(QueryHandler[Unmarked, str]):
    @inject
    def __init__(self, mediator: Mediator) -> None:
        self.mediator = mediator

    async def handle(self, request: Unmarked) -> str:
        stock = await self.mediator.send(GetStockAsync(sku=request.sku))
        return str(stock)


async def test_a_nested_degradation_is_not_the_outer_fallback_sends_reading() -> None:
    outage, records = Outage(failures=4), Records()
    mediator, _ = shop(
        outage,
        records,
        OverviewHandler,
        UnmarkedHandler,
    )

    assert await mediator.send(Overview(sku="A")) == "7 from stock-cache"
    assert degradation() is None
    assert [(r.request_type, r.degraded) for r in records.records] == [
        ("GetStockAsync", DEGRADED),
        ("Overview", None),
    ]


async def test_an_unmarked_outer_send_leaves_the_inner_reading_as_documented() -> None:
    outage = Outage(failures=4)
    mediator, _ = shop(
        outage,
        None,
        OverviewHandler,
        UnmarkedHandler,
    )

    assert await mediator.send(Unmarked(sku="A")) == "7"
    assert degradation() == DEGRADED


# --- degraded(): what the fallback says ---------------------------------------


class Silent(FallbackHandler["Quiet", int]):
    def handle(self, request: Quiet, failure: Exception) -> int:
        return -1


@fallback(Silent)
class Quiet(Query[int]):
    pass


class QuietHandler(QueryHandler[Quiet, int]):
    def handle(self, request: Quiet) -> int:
        raise TimeoutError("no answer")


def test_a_fallback_that_says_nothing_is_still_degraded() -> None:
    mediator = Injector(
        [MediatorModule(lambda m: m.add_handler(QuietHandler).use_defaults())]
    ).get(Mediator)

    assert mediator.send_sync(Quiet()) == -1
    assert degradation() == Degradation("fallback", None, None, "TimeoutError")


def test_degraded_outside_a_fallback_is_a_mistake() -> None:
    with pytest.raises(ConfigurationError, match="no fallback handler is running"):
        degraded(source="stock-cache")


@pytest.mark.parametrize(
    ("source", "as_of", "error", "match"),
    [
        (42, None, TypeError, "source must be a string, got int"),
        ("", None, ValueError, "source must be 1 to 64"),
        ("a b", None, ValueError, "source must be 1 to 64"),
        ('say"', None, ValueError, "source must be 1 to 64"),
        ("x" * 65, None, ValueError, "source must be 1 to 64"),
        ("cache", "yesterday", TypeError, "as_of must be a datetime, got str"),
        ("cache", CACHED_AT.replace(tzinfo=None), ValueError, "timezone-aware"),
    ],
)
def test_degraded_refuses_a_bad_source_or_time(
    source: Any, as_of: Any, error: type[Exception], match: str
) -> None:
    with pytest.raises(error, match=match):
        degraded(source=source, as_of=as_of)


class Skewed(FallbackHandler["Ahead", int]):
    def handle(self, request: Ahead, failure: Exception) -> int:
        degraded(source="clock-skew", as_of=NOW + timedelta(hours=1))
        return 1


@fallback(Skewed)
class Ahead(Query[int]):
    pass


class AheadHandler(QueryHandler[Ahead, int]):
    def handle(self, request: Ahead) -> int:
        raise ConnectionError("down")


def test_an_as_of_ahead_of_the_clock_is_age_zero() -> None:
    mediator, _ = shop(Outage(), None, AheadHandler)

    assert mediator.send_sync(Ahead()) == 1
    found = degradation()
    assert found is not None
    assert (found.source, found.age) == ("clock-skew", timedelta(0))


async def test_send_sync_refuses_an_async_fallback_before_the_chain_runs() -> None:
    class Sync(QueryHandler[GetStockAsync, int]):
        def handle(self, request: GetStockAsync) -> int:
            return 1

    module = MediatorModule(lambda m: m.add_handler(Sync).use_defaults())
    sync_mediator = Injector(
        [Fakes(Outage(), Records()), module, ResilienceMediatorModule()]
    ).get(Mediator)
    with pytest.raises(SyncPathError, match=r"AsyncStockFromCache .* is async def"):
        sync_mediator.send_sync(GetStockAsync(sku="A"))
    assert await sync_mediator.send(GetStockAsync(sku="A")) == 1


def test_the_stage_sits_between_authorization_and_idempotency() -> None:
    assert Stage(330) == Stage.FALLBACK
    assert Stage.FALLBACK.name == "FALLBACK"
    assert Stage.AUTHORIZATION < Stage.FALLBACK < Stage.IDEMPOTENCY < Stage.RETRY


class Around:
    """Records what the rest of the chain gave it: an answer or a failure."""

    def __init__(self, stage: Stage, seen: list[str]) -> None:
        self.stage = stage
        self.seen = seen

    async def handle(self, request: Any, next: Next[Any]) -> Any:
        try:
            answer = await next()
        except Exception as error:
            self.seen.append(f"{self.stage.name} saw {type(error).__name__}")
            raise
        self.seen.append(f"{self.stage.name} saw {answer}")
        return answer

    def handle_sync(self, request: Any, next: SyncNext[Any]) -> Any:
        try:
            answer = next()
        except Exception as error:
            self.seen.append(f"{self.stage.name} saw {type(error).__name__}")
            raise
        self.seen.append(f"{self.stage.name} saw {answer}")
        return answer


class Outside(Around):
    pass


class Inside(Around):
    pass


@pytest.mark.parametrize("path", ["sync", "async"])
async def test_the_fallback_sits_between_authorization_and_retry(path: str) -> None:
    seen: list[str] = []
    outside = Outside(Stage(310, "OUTSIDE"), seen)
    inside = Inside(Stage(340, "INSIDE"), seen)
    mediator, _ = shop(Outage(failures=4), None, behaviors=(inside, outside))

    if path == "sync":
        assert mediator.send_sync(GetStock(sku="A")) == 7
    else:
        assert await mediator.send(GetStockAsync(sku="A")) == 7

    # Inside the fallback, once: the retries had given up. Outside: the answer.
    assert seen == ["INSIDE saw ConnectionError", "OUTSIDE saw 7"]


# --- the request scope: entered for a fallback that needs it, not per send -----


@request_scope
class Shelf:
    """A request-scoped service: built once per scope, closed when it ends."""

    closed: ClassVar[list[str]] = []

    def __init__(self) -> None:
        at_scope_exit(lambda: Shelf.closed.append("shelf"))


class FromShelf(FallbackHandler["Scoped", str]):
    @inject
    def __init__(self, shelf: Shelf) -> None:
        self.shelf = shelf

    def handle(self, request: Scoped, failure: Exception) -> str:
        return "from the shelf"


@fallback(FromShelf)
class Scoped(Query[str]):
    fail: bool


class ScopedHandler(QueryHandler[Scoped, str]):
    def handle(self, request: Scoped) -> str:
        if request.fail:
            raise ConnectionError("down")
        return "open" if active_scope() is not None else "no scope"


@pytest.mark.parametrize("path", ["sync", "async"])
async def test_a_fallback_needing_the_request_scope_gets_one(path: str) -> None:
    Shelf.closed.clear()
    mediator, _ = shop(Outage(), None, ScopedHandler)

    async def send(fail: bool) -> str:
        if path == "sync":
            return mediator.send_sync(Scoped(fail=fail))
        return await mediator.send(Scoped(fail=fail))

    assert await send(False) == "no scope"  # a send that answers opens none
    assert Shelf.closed == []
    assert await send(True) == "from the shelf"
    assert Shelf.closed == ["shelf"]  # the fallback's scope ended with it
