# Generated from test_with_retry.py by tools/unasync.py; do not edit.
# Edit the async source and run `python tools/unasync.py`.
"""`with_retry_sync`: every rule of the stream retry, on a fake clock.

Generated from `test_with_retry` by ``tools/unasync.py``: edit that module
and run the script. Cancellation, the async side's alone, is in
`test_with_retry_by_colour`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Generator, Iterator
from contextlib import closing
from typing import Any

import pytest

from http_resilience import (
    PartialStreamPolicy,
    StreamRetryContext,
    StreamRetryOptions,
    suppressed_failure,
    with_retry_sync,
)
from http_resilience.testing import FakeClock

from .sources import (
    Attempt,
    Broken,
    CloseFailed,
    bare_sync_factory,
    breaks,
    sync_factory,
)

ITEMS = [10, 11, 12, 13, 14]
RESTART = PartialStreamPolicy.RESTART_FROM_START


def options(clock: FakeClock, **overrides: Any) -> StreamRetryOptions:
    """Jitter off, so each delay is exact; anything else as given."""
    return StreamRetryOptions.model_validate(
        {"clock": clock, "use_jitter": False, **overrides}
    )


def collect(stream: Iterator[int], into: list[int]) -> list[int]:
    for item in stream:
        into.append(item)
    return into


# --- completion and retries before the first item -----------------------------


def test_a_stream_that_does_not_break_is_passed_on_once() -> None:
    clock = FakeClock()
    factory = sync_factory(ITEMS)
    assert collect(with_retry_sync(factory, options(clock)), []) == ITEMS
    assert factory.contexts == [StreamRetryContext(1, 0)]
    assert factory.closes == [1]
    assert clock.sleeps == []


def test_a_failure_before_the_first_item_is_retried_after_a_backoff() -> None:
    clock = FakeClock()
    factory = sync_factory(ITEMS, breaks(0), breaks(0))
    assert collect(with_retry_sync(factory, options(clock)), []) == ITEMS
    assert factory.contexts == [
        StreamRetryContext(1, 0),
        StreamRetryContext(2, 0),
        StreamRetryContext(3, 0),
    ]
    assert clock.sleeps == [0.2, 0.4]
    assert clock.monotonic() == pytest.approx(0.6)
    assert factory.closes == [1, 1, 1]


def test_each_retry_is_logged_with_the_failure_type_only(
    caplog: pytest.LogCaptureFixture,
) -> None:
    factory = sync_factory(
        ITEMS, breaks(0, failure=ConnectionResetError("reset by db.internal:5432"))
    )
    with caplog.at_level(logging.WARNING, logger="http_resilience"):
        collect(with_retry_sync(factory, options(FakeClock())), [])
    assert [(r.name, r.levelname, r.getMessage()) for r in caplog.records] == [
        (
            "http_resilience",
            "WARNING",
            "a stream: attempt 1 failed with ConnectionResetError, "
            "0 yielded so far; retrying in 0.200 s",
        )
    ]


def test_the_backoff_doubles_up_to_max_delay() -> None:
    clock = FakeClock()
    factory = sync_factory(ITEMS, *[breaks(0)] * 6)
    chosen = options(clock, max_retry_attempts=6, base_delay="1s", max_delay="5s")
    assert collect(with_retry_sync(factory, chosen), []) == ITEMS
    assert clock.sleeps == [1.0, 2.0, 4.0, 5.0, 5.0, 5.0]


def test_jitter_scales_each_delay_by_the_injected_random_draw() -> None:
    clock = FakeClock()
    draws = iter([0.0, 0.5, 0.999])
    chosen = StreamRetryOptions(clock=clock, random=lambda: next(draws))
    factory = sync_factory(ITEMS, breaks(0), breaks(0), breaks(0))
    assert collect(with_retry_sync(factory, chosen), []) == ITEMS
    assert clock.sleeps == pytest.approx([0.1, 0.3, 0.7996])


def test_a_random_draw_outside_the_unit_interval_is_an_error() -> None:
    chosen = StreamRetryOptions(clock=FakeClock(), random=lambda: 1.0)
    factory = sync_factory(ITEMS, breaks(0))
    with pytest.raises(ValueError, match=r"must return a float in \[0, 1\)"):
        collect(with_retry_sync(factory, chosen), [])


def test_the_last_failure_is_raised_when_the_budget_is_spent() -> None:
    clock = FakeClock()
    factory = sync_factory(ITEMS, *[breaks(0)] * 5)
    with pytest.raises(Broken, match="attempt 3 broke"):
        collect(with_retry_sync(factory, options(clock, max_retry_attempts=2)), [])
    assert len(factory.contexts) == 3
    assert clock.sleeps == [0.2, 0.4]
    assert factory.closes == [1, 1, 1]


def test_the_default_budget_is_three_retries() -> None:
    clock = FakeClock()
    factory = sync_factory(ITEMS, *[breaks(0)] * 4)
    with pytest.raises(Broken, match="attempt 4 broke"):
        collect(with_retry_sync(factory, options(clock)), [])
    assert clock.sleeps == [0.2, 0.4, 0.8]


def test_no_retry_at_all_with_a_budget_of_zero() -> None:
    clock = FakeClock()
    factory = sync_factory(ITEMS, breaks(0))
    with pytest.raises(Broken):
        collect(with_retry_sync(factory, options(clock, max_retry_attempts=0)), [])
    assert len(factory.contexts) == 1
    assert clock.sleeps == []


def test_a_failing_factory_is_a_failed_attempt() -> None:
    clock = FakeClock()
    calls: list[StreamRetryContext] = []

    def factory(context: StreamRetryContext) -> Iterator[int]:
        calls.append(context)
        if context.attempt_number == 1:
            raise ConnectionError("refused")
        return sync_factory(ITEMS)(context)

    assert collect(with_retry_sync(factory, options(clock)), []) == ITEMS
    assert len(calls) == 2
    assert clock.sleeps == [0.2]


# --- the partial-stream policies ------------------------------------------------


def test_rethrow_mid_stream_reraises_a_failure_after_the_first_item() -> None:
    clock = FakeClock()
    factory = sync_factory(ITEMS, breaks(2))
    received: list[int] = []
    with pytest.raises(Broken):
        collect(with_retry_sync(factory, options(clock)), received)
    assert received == [10, 11]
    assert len(factory.contexts) == 1
    assert factory.closes == [1]
    assert clock.sleeps == []


def test_rethrow_mid_stream_after_a_retry_before_the_first_item() -> None:
    clock = FakeClock()
    factory = sync_factory(ITEMS, breaks(0), breaks(1))
    received: list[int] = []
    with pytest.raises(Broken, match="attempt 2 broke"):
        collect(with_retry_sync(factory, options(clock)), received)
    assert received == [10]
    assert clock.sleeps == [0.2]


def test_restart_from_start_without_resuming_repeats_items() -> None:
    clock = FakeClock()
    factory = sync_factory(ITEMS, breaks(2))
    chosen = options(clock, partial_stream_policy=RESTART)
    assert collect(with_retry_sync(factory, chosen), []) == [10, 11, *ITEMS]
    assert factory.contexts == [StreamRetryContext(1, 0), StreamRetryContext(2, 2)]
    assert clock.sleeps == [0.2]


def test_restart_from_start_with_a_resuming_source_continues() -> None:
    clock = FakeClock()
    factory = sync_factory(ITEMS, breaks(2), breaks(0), breaks(1), resume=True)
    chosen = options(clock, partial_stream_policy="restart_from_start")
    assert collect(with_retry_sync(factory, chosen), []) == ITEMS
    assert factory.contexts == [
        StreamRetryContext(1, 0),
        StreamRetryContext(2, 2),
        StreamRetryContext(3, 2),
        StreamRetryContext(4, 3),
    ]
    assert clock.sleeps == [0.2, 0.4, 0.8]


def test_the_budget_is_shared_across_restarts_progress_does_not_refill_it() -> None:
    clock = FakeClock()
    # Every attempt makes progress (one new item) before it breaks.
    factory = sync_factory(ITEMS, *[breaks(1)] * 10, resume=True)
    received: list[int] = []
    chosen = options(clock, partial_stream_policy=RESTART, max_retry_attempts=3)
    with pytest.raises(Broken, match="attempt 4 broke"):
        collect(with_retry_sync(factory, chosen), received)
    assert received == [10, 11, 12, 13]
    assert [c.items_yielded for c in factory.contexts] == [0, 1, 2, 3]
    assert clock.sleeps == [0.2, 0.4, 0.8]


# --- the classifier -----------------------------------------------------------


def test_should_retry_sees_each_failure_and_may_decline() -> None:
    clock = FakeClock()
    seen: list[Exception] = []

    def only_timeouts(failure: Exception) -> bool:
        seen.append(failure)
        return isinstance(failure, TimeoutError)

    refused = PermissionError("no")
    factory = sync_factory(
        ITEMS, breaks(0, failure=TimeoutError()), breaks(0, failure=refused)
    )
    with pytest.raises(PermissionError) as raised:
        collect(
            with_retry_sync(factory, options(clock, should_retry=only_timeouts)), []
        )
    assert raised.value is refused
    assert [type(failure) for failure in seen] == [TimeoutError, PermissionError]
    assert len(factory.contexts) == 2


def test_should_retry_is_not_asked_once_the_budget_is_spent() -> None:
    seen: list[Exception] = []

    def record(failure: Exception) -> bool:
        seen.append(failure)
        return True

    chosen = options(FakeClock(), max_retry_attempts=1, should_retry=record)
    with pytest.raises(Broken):
        collect(with_retry_sync(sync_factory(ITEMS, breaks(0), breaks(0)), chosen), [])
    assert len(seen) == 1


def test_the_default_classifier_retries_everything_but_cancellation() -> None:
    default = StreamRetryOptions().should_retry
    assert default(ValueError())
    assert default(PermissionError())
    assert not default(asyncio.CancelledError())  # type: ignore[arg-type]
    assert not default(KeyboardInterrupt())  # type: ignore[arg-type]


# --- the first failure wins -----------------------------------------------------


@pytest.mark.parametrize("after", [0, 1])
@pytest.mark.parametrize("policy", list(PartialStreamPolicy))
def test_a_failure_while_closing_the_broken_source_is_kept_on_the_break(
    after: int, policy: PartialStreamPolicy
) -> None:
    clock = FakeClock()
    broke, cleanup = Broken("broke"), CloseFailed("cleanup")
    factory = sync_factory(ITEMS, breaks(after, failure=broke, close_failure=cleanup))
    chosen = options(clock, max_retry_attempts=0, partial_stream_policy=policy)
    with pytest.raises(Broken) as raised:
        collect(with_retry_sync(factory, chosen), [])
    assert raised.value is broke
    assert suppressed_failure(raised.value) is cleanup
    assert factory.closes == [1]


def test_the_break_not_the_cleanup_is_classified() -> None:
    clock = FakeClock()
    seen: list[Exception] = []

    def record(failure: Exception) -> bool:
        seen.append(failure)
        return True

    broke = Broken("broke")
    factory = sync_factory(ITEMS, breaks(0, failure=broke, close_failure=CloseFailed()))
    assert (
        collect(with_retry_sync(factory, options(clock, should_retry=record)), [])
        == ITEMS
    )
    assert seen == [broke]


def test_a_failure_while_closing_a_finished_source_is_a_failure() -> None:
    clock = FakeClock()
    cleanup = CloseFailed("cleanup")
    # An empty source: nothing was yielded, so the close failure is retried.
    factory = sync_factory([], Attempt(close_failure=cleanup))
    assert collect(with_retry_sync(factory, options(clock)), []) == []
    assert len(factory.contexts) == 2
    assert clock.sleeps == [0.2]
    # Once items are out, RETHROW_MID_STREAM re-raises it.
    factory = sync_factory(ITEMS, Attempt(close_failure=cleanup))
    received: list[int] = []
    with pytest.raises(CloseFailed):
        collect(with_retry_sync(factory, options(clock)), received)
    assert received == ITEMS


def test_nothing_is_suppressed_on_a_plain_failure() -> None:
    factory = sync_factory(ITEMS, breaks(0))
    with pytest.raises(Broken) as raised:
        collect(
            with_retry_sync(factory, options(FakeClock(), max_retry_attempts=0)), []
        )
    assert suppressed_failure(raised.value) is None


def test_the_same_failure_twice_keeps_the_first_suppressed_one() -> None:
    broke, first, second = Broken(), CloseFailed("first"), CloseFailed("second")
    factory = sync_factory(
        ITEMS,
        breaks(0, failure=broke, close_failure=first),
        breaks(0, failure=broke, close_failure=second),
    )
    with pytest.raises(Broken) as raised:
        collect(
            with_retry_sync(factory, options(FakeClock(), max_retry_attempts=1)), []
        )
    assert suppressed_failure(raised.value) is first


def test_a_close_that_reraises_the_break_suppresses_nothing() -> None:
    broke = Broken()
    factory = sync_factory(ITEMS, breaks(0, failure=broke, close_failure=broke))
    with pytest.raises(Broken) as raised:
        collect(
            with_retry_sync(factory, options(FakeClock(), max_retry_attempts=0)), []
        )
    assert suppressed_failure(raised.value) is None


@pytest.mark.parametrize("stop", [asyncio.CancelledError, KeyboardInterrupt])
def test_a_stop_while_closing_a_finished_source_propagates(
    stop: type[BaseException],
) -> None:
    factory = sync_factory(ITEMS, Attempt(close_failure=stop()))
    received: list[int] = []
    with pytest.raises(stop) as raised:
        collect(with_retry_sync(factory, options(FakeClock())), received)
    assert received == ITEMS
    assert suppressed_failure(raised.value) is None


@pytest.mark.parametrize("policy", list(PartialStreamPolicy))
def test_a_source_with_nothing_to_close(policy: PartialStreamPolicy) -> None:
    clock = FakeClock()
    chosen = options(clock, partial_stream_policy=policy)
    assert collect(
        with_retry_sync(bare_sync_factory(ITEMS, breaks(0)), chosen), []
    ) == (ITEMS)
    stream = with_retry_sync(bare_sync_factory(ITEMS), chosen)
    assert next(stream) == 10
    stream.close()
    assert clock.sleeps == [0.2]


# --- the consumer stops early ----------------------------------------------------


def test_closing_the_stream_early_closes_the_source() -> None:
    factory = sync_factory(ITEMS)
    received: list[int] = []
    with closing(with_retry_sync(factory, options(FakeClock()))) as stream:
        for item in stream:
            received.append(item)
            if len(received) == 2:
                break
    assert received == [10, 11]
    assert factory.closes == [1]
    assert factory.sources[0].produced == [10, 11]


@pytest.mark.parametrize("policy", list(PartialStreamPolicy))
def test_a_stop_wins_over_a_failure_while_closing(
    policy: PartialStreamPolicy,
) -> None:
    factory = sync_factory(ITEMS, Attempt(close_failure=CloseFailed()))
    stream = with_retry_sync(
        factory, options(FakeClock(), partial_stream_policy=policy)
    )
    assert next(stream) == 10
    stream.close()  # does not raise: the consumer asked to stop
    assert factory.closes == [1]
    assert len(factory.contexts) == 1


def test_a_stop_while_closing_on_an_early_stop_replaces_it() -> None:
    factory = sync_factory(ITEMS, Attempt(close_failure=KeyboardInterrupt()))
    stream = with_retry_sync(factory, options(FakeClock()))
    assert next(stream) == 10
    with pytest.raises(KeyboardInterrupt) as raised:
        stream.close()
    assert isinstance(suppressed_failure(raised.value), GeneratorExit)


def test_an_exception_thrown_in_by_the_consumer_is_not_classified() -> None:
    clock = FakeClock()
    factory = sync_factory(ITEMS)
    stream = with_retry_sync(factory, options(clock, partial_stream_policy=RESTART))
    assert next(stream) == 10
    with pytest.raises(LookupError):
        stream.throw(LookupError("consumer gave up"))
    assert len(factory.contexts) == 1
    assert factory.closes == [1]
    assert clock.sleeps == []


def test_a_generator_source_is_closed_when_the_consumer_stops() -> None:
    finished: list[str] = []

    def numbers(context: StreamRetryContext) -> Generator[int, None, None]:
        try:
            yield from ITEMS
        finally:
            finished.append("closed")

    with closing(with_retry_sync(numbers)) as stream:
        assert next(stream) == 10
    assert finished == ["closed"]


@pytest.mark.parametrize(
    "stop", [asyncio.CancelledError, KeyboardInterrupt, SystemExit, GeneratorExit]
)
def test_cancellation_from_the_source_is_never_classified_nor_retried(
    stop: type[BaseException],
) -> None:
    seen: list[Exception] = []

    def record(failure: Exception) -> bool:
        seen.append(failure)
        return True

    clock = FakeClock()
    factory = sync_factory(
        ITEMS, breaks(0, failure=stop(), close_failure=CloseFailed())
    )
    with pytest.raises(stop) as raised:
        collect(with_retry_sync(factory, options(clock, should_retry=record)), [])
    assert seen == []
    assert len(factory.contexts) == 1
    assert factory.closes == [1]
    assert clock.sleeps == []
    assert isinstance(suppressed_failure(raised.value), CloseFailed)


@pytest.mark.parametrize("stop", [KeyboardInterrupt, SystemExit, GeneratorExit])
def test_a_stop_mid_stream_is_not_retried_even_by_restart_from_start(
    stop: type[BaseException],
) -> None:
    clock = FakeClock()
    factory = sync_factory(
        ITEMS, breaks(1, failure=stop(), close_failure=CloseFailed())
    )
    with pytest.raises(stop) as raised:
        collect(
            with_retry_sync(factory, options(clock, partial_stream_policy=RESTART)), []
        )
    assert len(factory.contexts) == 1
    assert factory.closes == [1]
    assert clock.sleeps == []
    assert isinstance(suppressed_failure(raised.value), CloseFailed)


@pytest.mark.parametrize("stop", [asyncio.CancelledError, KeyboardInterrupt])
def test_a_stop_while_closing_the_broken_source_keeps_the_break(
    stop: type[BaseException],
) -> None:
    broke = Broken()
    factory = sync_factory(ITEMS, breaks(0, failure=broke, close_failure=stop()))
    with pytest.raises(stop) as raised:
        collect(with_retry_sync(factory, options(FakeClock())), [])
    assert suppressed_failure(raised.value) is broke
    assert len(factory.contexts) == 1


# --- validation on the call ------------------------------------------------------


def test_a_factory_that_is_not_callable_fails_on_the_call() -> None:
    with pytest.raises(
        TypeError, match=r"with_retry_sync\(\) needs a callable factory"
    ):
        with_retry_sync([1, 2, 3])  # type: ignore[arg-type]


def test_options_of_the_wrong_type_fail_on_the_call() -> None:
    factory = sync_factory(ITEMS)
    with pytest.raises(
        TypeError, match=r"options must be a StreamRetryOptions or None, got dict"
    ):
        with_retry_sync(factory, {"max_retry_attempts": 1})  # type: ignore[arg-type]
    assert factory.contexts == []


def test_nothing_is_iterated_before_the_first_item_is_asked_for() -> None:
    factory = sync_factory(ITEMS)
    stream = with_retry_sync(factory)
    assert factory.contexts == []
    stream.close()
    assert factory.contexts == []
