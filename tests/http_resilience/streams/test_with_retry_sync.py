"""`with_retry_sync`: the same rules as `with_retry`, driven without a loop."""

from __future__ import annotations

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
    return StreamRetryOptions.model_validate(
        {"clock": clock, "use_jitter": False, **overrides}
    )


def test_a_stream_that_does_not_break_is_passed_on_once() -> None:
    clock = FakeClock()
    factory = sync_factory(ITEMS)
    assert list(with_retry_sync(factory, options(clock))) == ITEMS
    assert factory.contexts == [StreamRetryContext(1, 0)]
    assert factory.closes == [1]
    assert clock.sleeps == []


def test_failures_before_the_first_item_are_retried_on_the_sync_sleep() -> None:
    clock = FakeClock()
    factory = sync_factory(ITEMS, breaks(0), breaks(0), breaks(0))
    assert list(with_retry_sync(factory, options(clock))) == ITEMS
    assert clock.sleeps == [0.2, 0.4, 0.8]
    assert factory.closes == [1, 1, 1, 1]


def test_the_budget_is_spent_then_the_last_failure_is_raised() -> None:
    clock = FakeClock()
    factory = sync_factory(ITEMS, *[breaks(0)] * 4)
    with pytest.raises(Broken, match="attempt 4 broke"):
        list(with_retry_sync(factory, options(clock)))
    assert clock.sleeps == [0.2, 0.4, 0.8]


def test_rethrow_mid_stream_reraises_after_the_first_item() -> None:
    factory = sync_factory(ITEMS, breaks(3))
    received: list[int] = []
    with pytest.raises(Broken):
        received.extend(with_retry_sync(factory, options(FakeClock())))
    assert received == [10, 11, 12]
    assert len(factory.contexts) == 1
    assert factory.closes == [1]


def test_restart_from_start_repeats_or_resumes() -> None:
    chosen = options(FakeClock(), partial_stream_policy=RESTART)
    plain = sync_factory(ITEMS, breaks(3))
    assert list(with_retry_sync(plain, chosen)) == [10, 11, 12, *ITEMS]
    resuming = sync_factory(ITEMS, breaks(3), breaks(1), resume=True)
    assert list(with_retry_sync(resuming, chosen)) == ITEMS
    assert [c.items_yielded for c in resuming.contexts] == [0, 3, 4]


@pytest.mark.parametrize("after", [0, 2])
@pytest.mark.parametrize("policy", list(PartialStreamPolicy))
def test_a_failure_while_closing_the_broken_source_is_kept_on_the_break(
    after: int, policy: PartialStreamPolicy
) -> None:
    broke, cleanup = Broken(), CloseFailed()
    factory = sync_factory(ITEMS, breaks(after, failure=broke, close_failure=cleanup))
    chosen = options(FakeClock(), max_retry_attempts=0, partial_stream_policy=policy)
    with pytest.raises(Broken) as raised:
        list(with_retry_sync(factory, chosen))
    assert raised.value is broke
    assert suppressed_failure(raised.value) is cleanup


def test_a_failure_while_closing_a_finished_source_is_classified() -> None:
    clock = FakeClock()
    factory = sync_factory([], Attempt(close_failure=CloseFailed()))
    assert list(with_retry_sync(factory, options(clock))) == []
    assert clock.sleeps == [0.2]


def test_closing_the_stream_early_closes_the_source() -> None:
    factory = sync_factory(ITEMS, Attempt(close_failure=CloseFailed()))
    with closing(with_retry_sync(factory, options(FakeClock()))) as stream:
        assert next(stream) == 10
    assert factory.closes == [1]


def test_an_exception_thrown_in_by_the_consumer_is_not_classified() -> None:
    factory = sync_factory(ITEMS)
    stream = with_retry_sync(
        factory, options(FakeClock(), partial_stream_policy=RESTART)
    )
    assert next(stream) == 10
    with pytest.raises(LookupError):
        stream.throw(LookupError("consumer gave up"))
    assert len(factory.contexts) == 1
    assert factory.closes == [1]


@pytest.mark.parametrize("stop", [KeyboardInterrupt, SystemExit, GeneratorExit])
def test_a_stop_from_the_source_is_never_retried(stop: type[BaseException]) -> None:
    clock = FakeClock()
    factory = sync_factory(
        ITEMS, breaks(1, failure=stop(), close_failure=CloseFailed())
    )
    with pytest.raises(stop) as raised:
        list(with_retry_sync(factory, options(clock, partial_stream_policy=RESTART)))
    assert len(factory.contexts) == 1
    assert factory.closes == [1]
    assert clock.sleeps == []
    assert isinstance(suppressed_failure(raised.value), CloseFailed)


def test_a_stop_while_closing_the_broken_source_keeps_the_break() -> None:
    broke = Broken()
    factory = sync_factory(
        ITEMS, breaks(0, failure=broke, close_failure=KeyboardInterrupt())
    )
    with pytest.raises(KeyboardInterrupt) as raised:
        list(with_retry_sync(factory, options(FakeClock())))
    assert suppressed_failure(raised.value) is broke


def test_a_stop_while_closing_on_an_early_stop_replaces_it() -> None:
    factory = sync_factory(ITEMS, Attempt(close_failure=KeyboardInterrupt()))
    stream = with_retry_sync(factory, options(FakeClock()))
    assert next(stream) == 10
    with pytest.raises(KeyboardInterrupt) as raised:
        stream.close()
    assert isinstance(suppressed_failure(raised.value), GeneratorExit)


def test_a_stop_while_closing_a_finished_source_propagates() -> None:
    factory = sync_factory(ITEMS, Attempt(close_failure=KeyboardInterrupt()))
    with pytest.raises(KeyboardInterrupt) as raised:
        list(with_retry_sync(factory, options(FakeClock())))
    assert suppressed_failure(raised.value) is None


@pytest.mark.parametrize("policy", list(PartialStreamPolicy))
def test_a_source_with_nothing_to_close(policy: PartialStreamPolicy) -> None:
    clock = FakeClock()
    chosen = options(clock, partial_stream_policy=policy)
    assert list(with_retry_sync(bare_sync_factory(ITEMS, breaks(0)), chosen)) == ITEMS
    stream = with_retry_sync(bare_sync_factory(ITEMS), chosen)
    assert next(stream) == 10
    stream.close()
    assert list(with_retry_sync(lambda _: iter(ITEMS), chosen)) == ITEMS
    assert clock.sleeps == [0.2]


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


def test_a_failing_factory_is_a_failed_attempt() -> None:
    clock = FakeClock()
    calls: list[int] = []

    def factory(context: StreamRetryContext) -> Iterator[int]:
        calls.append(context.attempt_number)
        if context.attempt_number == 1:
            raise ConnectionError
        return iter(ITEMS)

    assert list(with_retry_sync(factory, options(clock))) == ITEMS
    assert calls == [1, 2]


def test_wrong_arguments_fail_on_the_call() -> None:
    with pytest.raises(
        TypeError, match=r"with_retry_sync\(\) needs a callable factory"
    ):
        with_retry_sync(42)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="got FakeClock"):
        with_retry_sync(sync_factory(ITEMS), FakeClock())  # type: ignore[arg-type]
