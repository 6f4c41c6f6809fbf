"""`with_retry`: every rule of the stream retry, on a fake clock.

The sync tests, `test_with_retry_sync`, are generated from these by
``tools/unasync.py``: edit this module and run the script. Cancellation, the
async side's alone, is in `test_with_retry_by_colour`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import aclosing
from typing import Any

import pytest

from http_resilience import (
    PartialStreamPolicy,
    StreamRetryContext,
    StreamRetryOptions,
    suppressed_failure,
    with_retry,
)
from http_resilience.testing import FakeClock

from .sources import (
    Attempt,
    Broken,
    CloseFailed,
    async_factory,
    bare_async_factory,
    breaks,
)

pytestmark = pytest.mark.anyio  # unasync: async-only

ITEMS = [10, 11, 12, 13, 14]
RESTART = PartialStreamPolicy.RESTART_FROM_START


def options(clock: FakeClock, **overrides: Any) -> StreamRetryOptions:
    """Jitter off, so each delay is exact; anything else as given."""
    return StreamRetryOptions.model_validate(
        {"clock": clock, "use_jitter": False, **overrides}
    )


async def collect(stream: AsyncIterator[int], into: list[int]) -> list[int]:
    async for item in stream:
        into.append(item)
    return into


# --- completion and retries before the first item -----------------------------


async def test_a_stream_that_does_not_break_is_passed_on_once() -> None:
    clock = FakeClock()
    factory = async_factory(ITEMS)
    assert await collect(with_retry(factory, options(clock)), []) == ITEMS
    assert factory.contexts == [StreamRetryContext(1, 0)]
    assert factory.closes == [1]
    assert clock.sleeps == []


async def test_a_failure_before_the_first_item_is_retried_after_a_backoff() -> None:
    clock = FakeClock()
    factory = async_factory(ITEMS, breaks(0), breaks(0))
    assert await collect(with_retry(factory, options(clock)), []) == ITEMS
    assert factory.contexts == [
        StreamRetryContext(1, 0),
        StreamRetryContext(2, 0),
        StreamRetryContext(3, 0),
    ]
    assert clock.sleeps == [0.2, 0.4]
    assert clock.monotonic() == pytest.approx(0.6)
    assert factory.closes == [1, 1, 1]


async def test_each_retry_is_logged_with_the_failure_type_only(
    caplog: pytest.LogCaptureFixture,
) -> None:
    factory = async_factory(
        ITEMS, breaks(0, failure=ConnectionResetError("reset by db.internal:5432"))
    )
    with caplog.at_level(logging.WARNING, logger="http_resilience"):
        await collect(with_retry(factory, options(FakeClock())), [])
    assert [(r.name, r.levelname, r.getMessage()) for r in caplog.records] == [
        (
            "http_resilience",
            "WARNING",
            "a stream: attempt 1 failed with ConnectionResetError, "
            "0 yielded so far; retrying in 0.200 s",
        )
    ]


async def test_the_backoff_doubles_up_to_max_delay() -> None:
    clock = FakeClock()
    factory = async_factory(ITEMS, *[breaks(0)] * 6)
    chosen = options(clock, max_retry_attempts=6, base_delay="1s", max_delay="5s")
    assert await collect(with_retry(factory, chosen), []) == ITEMS
    assert clock.sleeps == [1.0, 2.0, 4.0, 5.0, 5.0, 5.0]


async def test_jitter_scales_each_delay_by_the_injected_random_draw() -> None:
    clock = FakeClock()
    draws = iter([0.0, 0.5, 0.999])
    chosen = StreamRetryOptions(clock=clock, random=lambda: next(draws))
    factory = async_factory(ITEMS, breaks(0), breaks(0), breaks(0))
    assert await collect(with_retry(factory, chosen), []) == ITEMS
    assert clock.sleeps == pytest.approx([0.1, 0.3, 0.7996])


async def test_a_random_draw_outside_the_unit_interval_is_an_error() -> None:
    chosen = StreamRetryOptions(clock=FakeClock(), random=lambda: 1.0)
    factory = async_factory(ITEMS, breaks(0))
    with pytest.raises(ValueError, match=r"must return a float in \[0, 1\)"):
        await collect(with_retry(factory, chosen), [])


async def test_the_last_failure_is_raised_when_the_budget_is_spent() -> None:
    clock = FakeClock()
    factory = async_factory(ITEMS, *[breaks(0)] * 5)
    with pytest.raises(Broken, match="attempt 3 broke"):
        await collect(with_retry(factory, options(clock, max_retry_attempts=2)), [])
    assert len(factory.contexts) == 3
    assert clock.sleeps == [0.2, 0.4]
    assert factory.closes == [1, 1, 1]


async def test_the_default_budget_is_three_retries() -> None:
    clock = FakeClock()
    factory = async_factory(ITEMS, *[breaks(0)] * 4)
    with pytest.raises(Broken, match="attempt 4 broke"):
        await collect(with_retry(factory, options(clock)), [])
    assert clock.sleeps == [0.2, 0.4, 0.8]


async def test_no_retry_at_all_with_a_budget_of_zero() -> None:
    clock = FakeClock()
    factory = async_factory(ITEMS, breaks(0))
    with pytest.raises(Broken):
        await collect(with_retry(factory, options(clock, max_retry_attempts=0)), [])
    assert len(factory.contexts) == 1
    assert clock.sleeps == []


async def test_a_failing_factory_is_a_failed_attempt() -> None:
    clock = FakeClock()
    calls: list[StreamRetryContext] = []

    def factory(context: StreamRetryContext) -> AsyncIterator[int]:
        calls.append(context)
        if context.attempt_number == 1:
            raise ConnectionError("refused")
        return async_factory(ITEMS)(context)

    assert await collect(with_retry(factory, options(clock)), []) == ITEMS
    assert len(calls) == 2
    assert clock.sleeps == [0.2]


# --- the partial-stream policies ------------------------------------------------


async def test_rethrow_mid_stream_reraises_a_failure_after_the_first_item() -> None:
    clock = FakeClock()
    factory = async_factory(ITEMS, breaks(2))
    received: list[int] = []
    with pytest.raises(Broken):
        await collect(with_retry(factory, options(clock)), received)
    assert received == [10, 11]
    assert len(factory.contexts) == 1
    assert factory.closes == [1]
    assert clock.sleeps == []


async def test_rethrow_mid_stream_after_a_retry_before_the_first_item() -> None:
    clock = FakeClock()
    factory = async_factory(ITEMS, breaks(0), breaks(1))
    received: list[int] = []
    with pytest.raises(Broken, match="attempt 2 broke"):
        await collect(with_retry(factory, options(clock)), received)
    assert received == [10]
    assert clock.sleeps == [0.2]


async def test_restart_from_start_without_resuming_repeats_items() -> None:
    clock = FakeClock()
    factory = async_factory(ITEMS, breaks(2))
    chosen = options(clock, partial_stream_policy=RESTART)
    assert await collect(with_retry(factory, chosen), []) == [10, 11, *ITEMS]
    assert factory.contexts == [StreamRetryContext(1, 0), StreamRetryContext(2, 2)]
    assert clock.sleeps == [0.2]


async def test_restart_from_start_with_a_resuming_source_continues() -> None:
    clock = FakeClock()
    factory = async_factory(ITEMS, breaks(2), breaks(0), breaks(1), resume=True)
    chosen = options(clock, partial_stream_policy="restart_from_start")
    assert await collect(with_retry(factory, chosen), []) == ITEMS
    assert factory.contexts == [
        StreamRetryContext(1, 0),
        StreamRetryContext(2, 2),
        StreamRetryContext(3, 2),
        StreamRetryContext(4, 3),
    ]
    assert clock.sleeps == [0.2, 0.4, 0.8]


async def test_the_budget_is_shared_across_restarts_progress_does_not_refill_it() -> (
    None
):
    clock = FakeClock()
    # Every attempt makes progress (one new item) before it breaks.
    factory = async_factory(ITEMS, *[breaks(1)] * 10, resume=True)
    received: list[int] = []
    chosen = options(clock, partial_stream_policy=RESTART, max_retry_attempts=3)
    with pytest.raises(Broken, match="attempt 4 broke"):
        await collect(with_retry(factory, chosen), received)
    assert received == [10, 11, 12, 13]
    assert [c.items_yielded for c in factory.contexts] == [0, 1, 2, 3]
    assert clock.sleeps == [0.2, 0.4, 0.8]


# --- the classifier -----------------------------------------------------------


async def test_should_retry_sees_each_failure_and_may_decline() -> None:
    clock = FakeClock()
    seen: list[Exception] = []

    def only_timeouts(failure: Exception) -> bool:
        seen.append(failure)
        return isinstance(failure, TimeoutError)

    refused = PermissionError("no")
    factory = async_factory(
        ITEMS, breaks(0, failure=TimeoutError()), breaks(0, failure=refused)
    )
    with pytest.raises(PermissionError) as raised:
        await collect(
            with_retry(factory, options(clock, should_retry=only_timeouts)), []
        )
    assert raised.value is refused
    assert [type(failure) for failure in seen] == [TimeoutError, PermissionError]
    assert len(factory.contexts) == 2


async def test_should_retry_is_not_asked_once_the_budget_is_spent() -> None:
    seen: list[Exception] = []

    def record(failure: Exception) -> bool:
        seen.append(failure)
        return True

    chosen = options(FakeClock(), max_retry_attempts=1, should_retry=record)
    with pytest.raises(Broken):
        await collect(
            with_retry(async_factory(ITEMS, breaks(0), breaks(0)), chosen), []
        )
    assert len(seen) == 1


async def test_the_default_classifier_retries_everything_but_cancellation() -> None:
    default = StreamRetryOptions().should_retry
    assert default(ValueError())
    assert default(PermissionError())
    assert not default(asyncio.CancelledError())  # type: ignore[arg-type]
    assert not default(KeyboardInterrupt())  # type: ignore[arg-type]


# --- the first failure wins -----------------------------------------------------


@pytest.mark.parametrize("after", [0, 1])
@pytest.mark.parametrize("policy", list(PartialStreamPolicy))
async def test_a_failure_while_closing_the_broken_source_is_kept_on_the_break(
    after: int, policy: PartialStreamPolicy
) -> None:
    clock = FakeClock()
    broke, cleanup = Broken("broke"), CloseFailed("cleanup")
    factory = async_factory(ITEMS, breaks(after, failure=broke, close_failure=cleanup))
    chosen = options(clock, max_retry_attempts=0, partial_stream_policy=policy)
    with pytest.raises(Broken) as raised:
        await collect(with_retry(factory, chosen), [])
    assert raised.value is broke
    assert suppressed_failure(raised.value) is cleanup
    assert factory.closes == [1]


async def test_the_break_not_the_cleanup_is_classified() -> None:
    clock = FakeClock()
    seen: list[Exception] = []

    def record(failure: Exception) -> bool:
        seen.append(failure)
        return True

    broke = Broken("broke")
    factory = async_factory(
        ITEMS, breaks(0, failure=broke, close_failure=CloseFailed())
    )
    assert (
        await collect(with_retry(factory, options(clock, should_retry=record)), [])
        == ITEMS
    )
    assert seen == [broke]


async def test_a_failure_while_closing_a_finished_source_is_a_failure() -> None:
    clock = FakeClock()
    cleanup = CloseFailed("cleanup")
    # An empty source: nothing was yielded, so the close failure is retried.
    factory = async_factory([], Attempt(close_failure=cleanup))
    assert await collect(with_retry(factory, options(clock)), []) == []
    assert len(factory.contexts) == 2
    assert clock.sleeps == [0.2]
    # Once items are out, RETHROW_MID_STREAM re-raises it.
    factory = async_factory(ITEMS, Attempt(close_failure=cleanup))
    received: list[int] = []
    with pytest.raises(CloseFailed):
        await collect(with_retry(factory, options(clock)), received)
    assert received == ITEMS


async def test_nothing_is_suppressed_on_a_plain_failure() -> None:
    factory = async_factory(ITEMS, breaks(0))
    with pytest.raises(Broken) as raised:
        await collect(
            with_retry(factory, options(FakeClock(), max_retry_attempts=0)), []
        )
    assert suppressed_failure(raised.value) is None


async def test_the_same_failure_twice_keeps_the_first_suppressed_one() -> None:
    broke, first, second = Broken(), CloseFailed("first"), CloseFailed("second")
    factory = async_factory(
        ITEMS,
        breaks(0, failure=broke, close_failure=first),
        breaks(0, failure=broke, close_failure=second),
    )
    with pytest.raises(Broken) as raised:
        await collect(
            with_retry(factory, options(FakeClock(), max_retry_attempts=1)), []
        )
    assert suppressed_failure(raised.value) is first


async def test_a_close_that_reraises_the_break_suppresses_nothing() -> None:
    broke = Broken()
    factory = async_factory(ITEMS, breaks(0, failure=broke, close_failure=broke))
    with pytest.raises(Broken) as raised:
        await collect(
            with_retry(factory, options(FakeClock(), max_retry_attempts=0)), []
        )
    assert suppressed_failure(raised.value) is None


@pytest.mark.parametrize("stop", [asyncio.CancelledError, KeyboardInterrupt])
async def test_a_stop_while_closing_a_finished_source_propagates(
    stop: type[BaseException],
) -> None:
    factory = async_factory(ITEMS, Attempt(close_failure=stop()))
    received: list[int] = []
    with pytest.raises(stop) as raised:
        await collect(with_retry(factory, options(FakeClock())), received)
    assert received == ITEMS
    assert suppressed_failure(raised.value) is None


@pytest.mark.parametrize("policy", list(PartialStreamPolicy))
async def test_a_source_with_nothing_to_close(policy: PartialStreamPolicy) -> None:
    clock = FakeClock()
    chosen = options(clock, partial_stream_policy=policy)
    assert await collect(
        with_retry(bare_async_factory(ITEMS, breaks(0)), chosen), []
    ) == (ITEMS)
    stream = with_retry(bare_async_factory(ITEMS), chosen)
    assert await anext(stream) == 10
    await stream.aclose()
    assert clock.sleeps == [0.2]


# --- the consumer stops early ----------------------------------------------------


async def test_closing_the_stream_early_closes_the_source() -> None:
    factory = async_factory(ITEMS)
    received: list[int] = []
    async with aclosing(with_retry(factory, options(FakeClock()))) as stream:
        async for item in stream:
            received.append(item)
            if len(received) == 2:
                break
    assert received == [10, 11]
    assert factory.closes == [1]
    assert factory.sources[0].produced == [10, 11]


@pytest.mark.parametrize("policy", list(PartialStreamPolicy))
async def test_a_stop_wins_over_a_failure_while_closing(
    policy: PartialStreamPolicy,
) -> None:
    factory = async_factory(ITEMS, Attempt(close_failure=CloseFailed()))
    stream = with_retry(factory, options(FakeClock(), partial_stream_policy=policy))
    assert await anext(stream) == 10
    await stream.aclose()  # does not raise: the consumer asked to stop
    assert factory.closes == [1]
    assert len(factory.contexts) == 1


async def test_a_stop_while_closing_on_an_early_stop_replaces_it() -> None:
    factory = async_factory(ITEMS, Attempt(close_failure=KeyboardInterrupt()))
    stream = with_retry(factory, options(FakeClock()))
    assert await anext(stream) == 10
    with pytest.raises(KeyboardInterrupt) as raised:
        await stream.aclose()
    assert isinstance(suppressed_failure(raised.value), GeneratorExit)


async def test_an_exception_thrown_in_by_the_consumer_is_not_classified() -> None:
    clock = FakeClock()
    factory = async_factory(ITEMS)
    stream = with_retry(factory, options(clock, partial_stream_policy=RESTART))
    assert await anext(stream) == 10
    with pytest.raises(LookupError):
        await stream.athrow(LookupError("consumer gave up"))
    assert len(factory.contexts) == 1
    assert factory.closes == [1]
    assert clock.sleeps == []


async def test_an_async_generator_source_is_closed_when_the_consumer_stops() -> None:
    finished: list[str] = []

    async def numbers(context: StreamRetryContext) -> AsyncGenerator[int, None]:
        try:
            for n in ITEMS:
                yield n
        finally:
            finished.append("closed")

    async with aclosing(with_retry(numbers)) as stream:
        assert await anext(stream) == 10
    assert finished == ["closed"]


@pytest.mark.parametrize(
    "stop", [asyncio.CancelledError, KeyboardInterrupt, SystemExit, GeneratorExit]
)
async def test_cancellation_from_the_source_is_never_classified_nor_retried(
    stop: type[BaseException],
) -> None:
    seen: list[Exception] = []

    def record(failure: Exception) -> bool:
        seen.append(failure)
        return True

    clock = FakeClock()
    factory = async_factory(
        ITEMS, breaks(0, failure=stop(), close_failure=CloseFailed())
    )
    with pytest.raises(stop) as raised:
        await collect(with_retry(factory, options(clock, should_retry=record)), [])
    assert seen == []
    assert len(factory.contexts) == 1
    assert factory.closes == [1]
    assert clock.sleeps == []
    assert isinstance(suppressed_failure(raised.value), CloseFailed)


@pytest.mark.parametrize("stop", [KeyboardInterrupt, SystemExit, GeneratorExit])
async def test_a_stop_mid_stream_is_not_retried_even_by_restart_from_start(
    stop: type[BaseException],
) -> None:
    clock = FakeClock()
    factory = async_factory(
        ITEMS, breaks(1, failure=stop(), close_failure=CloseFailed())
    )
    with pytest.raises(stop) as raised:
        await collect(
            with_retry(factory, options(clock, partial_stream_policy=RESTART)), []
        )
    assert len(factory.contexts) == 1
    assert factory.closes == [1]
    assert clock.sleeps == []
    assert isinstance(suppressed_failure(raised.value), CloseFailed)


@pytest.mark.parametrize("stop", [asyncio.CancelledError, KeyboardInterrupt])
async def test_a_stop_while_closing_the_broken_source_keeps_the_break(
    stop: type[BaseException],
) -> None:
    broke = Broken()
    factory = async_factory(ITEMS, breaks(0, failure=broke, close_failure=stop()))
    with pytest.raises(stop) as raised:
        await collect(with_retry(factory, options(FakeClock())), [])
    assert suppressed_failure(raised.value) is broke
    assert len(factory.contexts) == 1


# --- validation on the call ------------------------------------------------------


async def test_a_factory_that_is_not_callable_fails_on_the_call() -> None:
    with pytest.raises(TypeError, match=r"with_retry\(\) needs a callable factory"):
        with_retry([1, 2, 3])  # type: ignore[arg-type]


async def test_options_of_the_wrong_type_fail_on_the_call() -> None:
    factory = async_factory(ITEMS)
    with pytest.raises(
        TypeError, match=r"options must be a StreamRetryOptions or None, got dict"
    ):
        with_retry(factory, {"max_retry_attempts": 1})  # type: ignore[arg-type]
    assert factory.contexts == []


async def test_nothing_is_iterated_before_the_first_item_is_asked_for() -> None:
    factory = async_factory(ITEMS)
    stream = with_retry(factory)
    assert factory.contexts == []
    await stream.aclose()
    assert factory.contexts == []
