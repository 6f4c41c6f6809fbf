"""RetryBehavior: attempt counts, what is never retried, waits, events, sync path."""

from __future__ import annotations

import asyncio
import logging
import random
import subprocess
import sys
import textwrap
from typing import Any, ClassVar

import pytest
from injector import Injector

from mediator import (
    BusinessRuleError,
    Command,
    CommandHandler,
    ConfigurationError,
    ConflictError,
    DomainError,
    ForbiddenError,
    Mediator,
    MediatorModule,
    NotFoundError,
    Query,
    QueryHandler,
    ValidationError,
)
from mediator_resilience import (
    ResilienceMediatorModule,
    ResilienceMediatorOptions,
    RetryEvent,
    is_transient_failure,
    retryable,
)
from mediator_resilience.testing import FakeClock

pytestmark = pytest.mark.anyio


class Script:
    """What the handler does on each attempt: raise the exception, or return."""

    steps: ClassVar[list[BaseException | str]] = []
    attempts: ClassVar[int] = 0

    @classmethod
    def next_step(cls) -> str:
        cls.attempts += 1
        step = cls.steps[min(cls.attempts, len(cls.steps)) - 1]
        if isinstance(step, BaseException):
            raise step
        return step


@pytest.fixture(autouse=True)
def _reset() -> None:
    Script.steps = []
    Script.attempts = 0


@retryable
class GetQuote(Query[str]):
    secret_account: str = "acct-0042"


class GetQuoteHandler(QueryHandler[GetQuote, str]):
    async def handle(self, request: GetQuote) -> str:
        return Script.next_step()


@retryable
class SyncQuote(Query[str]):
    pass


class SyncQuoteHandler(QueryHandler[SyncQuote, str]):
    def handle(self, request: SyncQuote) -> str:
        return Script.next_step()


class PlaceOrder(Command[str]):
    """Not marked: must never be retried."""


class PlaceOrderHandler(CommandHandler[PlaceOrder, str]):
    async def handle(self, request: PlaceOrder) -> str:
        return Script.next_step()


def build(
    clock: FakeClock | None = None,
    *,
    options: ResilienceMediatorOptions | None = None,
    listeners: tuple[Any, ...] = (),
) -> Mediator:
    module = MediatorModule(
        lambda m: m.add_handler(
            GetQuoteHandler, SyncQuoteHandler, PlaceOrderHandler
        ).use_defaults()
    )
    resilience = ResilienceMediatorModule(
        options or ResilienceMediatorOptions(use_jitter=False),
        clock=clock or FakeClock(),
        random=random.Random(7).random,
        listeners=listeners,
    )
    return Injector([module, resilience]).get(Mediator)


async def test_a_transient_failure_is_retried_with_exponential_waits() -> None:
    clock = FakeClock()
    Script.steps = [ConnectionError("reset"), TimeoutError("slow"), "quote"]

    assert await build(clock).send(GetQuote()) == "quote"

    assert Script.attempts == 3
    assert clock.sleeps == pytest.approx([0.2, 0.4])


async def test_exhaustion_raises_the_last_failure_after_one_plus_max_attempts() -> None:
    clock = FakeClock()
    Script.steps = [
        ConnectionError("1"),
        ConnectionError("2"),
        ConnectionError("3"),
        ConnectionError("last"),
    ]

    with pytest.raises(ConnectionError, match="last"):
        await build(clock).send(GetQuote())

    assert Script.attempts == 4
    assert clock.sleeps == pytest.approx([0.2, 0.4, 0.8])


@pytest.mark.parametrize(
    "error",
    [
        ValidationError("bad"),
        BusinessRuleError("no stock"),
        NotFoundError("gone"),
        ForbiddenError("no"),
        ConflictError("dup"),
    ],
)
async def test_domain_errors_are_never_retried(error: DomainError) -> None:
    clock = FakeClock()
    Script.steps = [error, "never"]

    with pytest.raises(type(error)):
        await build(clock).send(GetQuote())

    assert Script.attempts == 1
    assert clock.sleeps == []


@pytest.mark.parametrize(
    "error",
    [asyncio.CancelledError(), KeyboardInterrupt(), SystemExit(1), GeneratorExit()],
)
async def test_cancellation_is_never_retried_whatever_the_predicate_says(
    error: BaseException,
) -> None:
    clock = FakeClock()
    Script.steps = [error, "never"]
    retry_everything = ResilienceMediatorOptions(
        use_jitter=False, should_retry=lambda e: True
    )

    with pytest.raises(type(error)):
        await build(clock, options=retry_everything).send(GetQuote())

    assert Script.attempts == 1
    assert clock.sleeps == []


async def test_cancellation_during_a_later_failure_stops_the_retries() -> None:
    clock = FakeClock()
    Script.steps = [ConnectionError("1"), asyncio.CancelledError(), "never"]

    with pytest.raises(asyncio.CancelledError):
        await build(clock).send(GetQuote())

    assert Script.attempts == 2
    assert clock.sleeps == pytest.approx([0.2])


class BlockingClock(FakeClock):
    """Its `block_at`-th wait lasts until the waiting task is cancelled."""

    def __init__(self, block_at: int) -> None:
        super().__init__()
        self.block_at = block_at
        self.blocked = asyncio.Event()

    async def sleep(self, seconds: float) -> None:
        await super().sleep(seconds)
        if len(self.sleeps) == self.block_at:
            self.blocked.set()
            await asyncio.Event().wait()  # only cancellation ends this wait


@pytest.mark.parametrize("failures_before", [1, 2])
async def test_no_attempt_starts_after_a_cancellation_during_the_backoff(
    failures_before: int,
) -> None:
    clock = BlockingClock(block_at=failures_before)
    failures: list[BaseException | str] = [
        ConnectionError(str(n)) for n in range(failures_before)
    ]
    Script.steps = [*failures, "late"]
    mediator = build(clock)
    task = asyncio.create_task(mediator.send(GetQuote()))
    await clock.blocked.wait()
    task.cancel()  # the task is inside the backoff wait now

    with pytest.raises(asyncio.CancelledError):
        await task

    assert Script.attempts == failures_before


async def test_a_custom_predicate_decides_for_ordinary_errors() -> None:
    Script.steps = [KeyError("k"), "never"]
    only_connections = ResilienceMediatorOptions(
        use_jitter=False, should_retry=lambda e: isinstance(e, ConnectionError)
    )

    with pytest.raises(KeyError):
        await build(options=only_connections).send(GetQuote())

    assert Script.attempts == 1


async def test_zero_retries_turns_retry_off() -> None:
    Script.steps = [ConnectionError("once"), "never"]

    with pytest.raises(ConnectionError):
        await build(options=ResilienceMediatorOptions(max_retry_attempts=0)).send(
            GetQuote()
        )

    assert Script.attempts == 1


async def test_a_soft_failure_result_is_retried_and_shares_the_budget() -> None:
    clock = FakeClock()
    Script.steps = ["busy", ConnectionError("reset"), "busy", "ok"]
    options = ResilienceMediatorOptions(
        use_jitter=False, should_retry_result=lambda result: result == "busy"
    )

    assert await build(clock, options=options).send(GetQuote()) == "ok"

    assert Script.attempts == 4
    assert clock.sleeps == pytest.approx([0.2, 0.4, 0.8])


async def test_exhausted_on_soft_failures_the_last_result_is_returned() -> None:
    Script.steps = ["busy"]
    options = ResilienceMediatorOptions(
        use_jitter=False,
        max_retry_attempts=2,
        should_retry_result=lambda r: r == "busy",
    )

    assert await build(options=options).send(GetQuote()) == "busy"
    assert Script.attempts == 3


async def test_an_unmarked_request_is_never_retried() -> None:
    clock = FakeClock()
    Script.steps = [ConnectionError("once"), "never"]

    with pytest.raises(ConnectionError):
        await build(clock).send(PlaceOrder())

    assert Script.attempts == 1
    assert clock.sleeps == []


async def test_jitter_scales_each_wait_into_half_to_full() -> None:
    clock = FakeClock()
    Script.steps = [ConnectionError("1"), ConnectionError("2"), "ok"]

    await build(clock, options=ResilienceMediatorOptions()).send(GetQuote())

    first, second = clock.sleeps
    assert 0.1 <= first < 0.2
    assert 0.2 <= second < 0.4


async def test_each_retry_emits_an_event_and_a_warning_without_field_values(
    caplog: pytest.LogCaptureFixture,
) -> None:
    events: list[RetryEvent] = []
    Script.steps = [ConnectionError("acct-0042 refused"), "ok"]

    with caplog.at_level(logging.WARNING, logger="mediator_resilience"):
        await build(listeners=(events.append,)).send(GetQuote())

    assert events == [
        RetryEvent(
            request_type="GetQuote",
            attempt=1,
            delay=0.2,
            exception_type="ConnectionError",
        )
    ]
    assert [r.getMessage() for r in caplog.records] == [
        "GetQuote: attempt 1 failed with ConnectionError; retrying in 0.200 s"
    ]
    assert "acct-0042" not in caplog.text


async def test_a_failing_listener_does_not_fail_the_request(
    caplog: pytest.LogCaptureFixture,
) -> None:
    def broken(event: RetryEvent) -> None:
        raise RuntimeError("listener bug")

    Script.steps = [ConnectionError("1"), "ok"]

    with caplog.at_level(logging.ERROR, logger="mediator_resilience"):
        assert await build(listeners=(broken,)).send(GetQuote()) == "ok"

    assert "retry listener" in caplog.text


def test_the_sync_path_retries_with_sync_waits() -> None:
    clock = FakeClock()
    Script.steps = [ConnectionError("1"), ConnectionError("2"), "sync quote"]

    assert build(clock).send_sync(SyncQuote()) == "sync quote"

    assert Script.attempts == 3
    assert clock.sleeps == pytest.approx([0.2, 0.4])


def test_the_sync_path_exhausts_and_never_retries_domain_errors() -> None:
    Script.steps = [ConnectionError("x")]
    with pytest.raises(ConnectionError):
        build().send_sync(SyncQuote())
    assert Script.attempts == 4

    Script.attempts = 0
    Script.steps = [ConflictError("dup")]
    with pytest.raises(ConflictError):
        build().send_sync(SyncQuote())
    assert Script.attempts == 1


def test_there_is_one_retry_pipeline_per_injector() -> None:
    with pytest.raises(ConfigurationError, match="already registered"):
        Injector([ResilienceMediatorModule(), ResilienceMediatorModule()])


def test_invalid_options_fail_on_the_registration_call() -> None:
    import pydantic

    with pytest.raises(pydantic.ValidationError, match="base_delay"):
        ResilienceMediatorModule(
            config={"resilience": {"mediator": {"base_delay": "-1s"}}}
        )
    with pytest.raises(TypeError, match="must be a ResilienceMediatorOptions"):
        ResilienceMediatorModule(options={"max_retry_attempts": 1})  # type: ignore[arg-type]


def test_the_default_predicate() -> None:
    assert is_transient_failure(ConnectionError())
    assert is_transient_failure(RuntimeError())
    assert not is_transient_failure(ConflictError())
    assert not is_transient_failure(asyncio.CancelledError())
    assert not is_transient_failure(KeyboardInterrupt())


async def test_exhaustion_announces_only_the_retries_that_happen() -> None:
    events: list[RetryEvent] = []
    clock = FakeClock()
    Script.steps = [ConnectionError("always")]

    with pytest.raises(ConnectionError):
        await build(clock, listeners=(events.append,)).send(GetQuote())

    assert [(e.attempt, e.delay) for e in events] == [(1, 0.2), (2, 0.4), (3, 0.8)]
    assert clock.sleeps == pytest.approx([0.2, 0.4, 0.8])


def test_a_huge_attempt_number_does_not_overflow() -> None:
    options = ResilienceMediatorOptions(max_retry_attempts=5000)

    assert options.delay_before(5000) == options.max_delay.total_seconds()


def test_a_sync_retry_with_a_delay_no_sleep_can_take_fails_at_validation() -> None:
    # Before: the options took 999,999,999 days, and the sync retry's
    # `time.sleep` raised OverflowError in place of the handler's failure.
    # Nothing sleeps here: the failure comes before the first attempt.
    import pydantic

    from mediator_resilience import SystemClock

    Script.steps = [ConnectionError("down"), "quote"]
    huge = "P999999999D"

    def send() -> str:
        options = ResilienceMediatorOptions.model_validate(
            {"base_delay": huge, "max_delay": huge}
        )
        module = MediatorModule(
            lambda m: m.add_handler(SyncQuoteHandler).use_defaults()
        )
        resilience = ResilienceMediatorModule(options, clock=SystemClock())
        return Injector([module, resilience]).get(Mediator).send_sync(SyncQuote())

    with pytest.raises(pydantic.ValidationError) as raised:
        send()
    assert [error["loc"] for error in raised.value.errors()] == [
        ("base_delay",),
        ("max_delay",),
    ]
    assert raised.value.errors()[1]["msg"] == (
        "Value error, max_delay may be at most 24 days (MAX_DURATION), the longest "
        "wait that sleeps, thread waits and socket timeouts take on every "
        "platform; got 'P999999999D'"
    )
    assert Script.attempts == 0


async def test_the_jitter_is_drawn_from_random_as_in_http_resilience() -> None:
    clock = FakeClock()
    Script.steps = [ConnectionError("reset"), TimeoutError("slow"), "quote"]
    module = MediatorModule(
        lambda m: m.add_handler(
            GetQuoteHandler, SyncQuoteHandler, PlaceOrderHandler
        ).use_defaults()
    )
    resilience = ResilienceMediatorModule(clock=clock, random=lambda: 0.0)
    mediator = Injector([module, resilience]).get(Mediator)

    assert await mediator.send(GetQuote()) == "quote"

    assert clock.sleeps == pytest.approx([0.1, 0.2])  # the factor 0.5 + 0.0 / 2


def test_the_jitter_source_is_given_one_way_only() -> None:
    # `rng=` (a `random.Random`) is gone: `random=` is the one way, as in
    # http_resilience.
    keywords: dict[str, Any] = {"rng": random.Random(1)}
    with pytest.raises(TypeError, match="rng"):
        ResilienceMediatorModule(**keywords)


_LAZY_TENACITY = textwrap.dedent(
    """
    import asyncio, sys

    from injector import Injector

    import mediator_resilience
    from mediator import Mediator, MediatorModule, Query, QueryHandler
    from mediator_resilience import ResilienceMediatorModule, retryable
    from mediator_resilience.testing import FakeClock

    assert "tenacity" not in sys.modules, "imported with the package"

    failures = [ConnectionError("reset")]

    @retryable
    class Quote(Query[str]):
        fail: bool

    class QuoteHandler(QueryHandler[Quote, str]):
        def handle(self, request: Quote) -> str:
            if request.fail and failures:
                raise failures.pop()
            return "quote"

    mediator = Injector(
        [
            MediatorModule(lambda m: m.add_handler(QuoteHandler).use_defaults()),
            ResilienceMediatorModule(clock=FakeClock()),
        ]
    ).get(Mediator)
    assert asyncio.run(mediator.send(Quote(fail=False))) == "quote"
    assert "tenacity" not in sys.modules, "imported by a first attempt that succeeded"
    assert asyncio.run(mediator.send(Quote(fail=True))) == "quote"
    assert "tenacity" in sys.modules, "a retry ran without tenacity"
    """
)


def test_tenacity_is_imported_by_the_first_retry_not_by_the_package() -> None:
    result = subprocess.run(
        [sys.executable, "-c", _LAZY_TENACITY],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )

    assert result.returncode == 0, result.stderr
