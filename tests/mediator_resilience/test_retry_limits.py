"""The mediator retry across layers: final marks, asked waits, and time limits.

A failure an inner layer already retried to exhaustion (marked, by
convention, `resilience_final`) is final here. A failure that asks for a wait
(``retry_after``) is waited for at least that long. And no wait begins past
`max_retry_duration` or the time `remaining_time` leaves.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import pytest
from injector import Injector

from mediator import Mediator, MediatorModule, Query, QueryHandler
from mediator_resilience import (
    ResilienceMediatorModule,
    ResilienceMediatorOptions,
    RetryEvent,
    is_transient_failure,
    retryable,
)
from mediator_resilience._transient import FINAL_MARK
from mediator_resilience.testing import FakeClock
from tests.mediator_resilience.test_retry import Script

pytestmark = pytest.mark.anyio


@pytest.fixture(autouse=True)
def _reset() -> None:
    Script.steps = []
    Script.attempts = 0


@retryable
class Lookup(Query[str]):
    pass


class LookupHandler(QueryHandler[Lookup, str]):
    async def handle(self, request: Lookup) -> str:
        return Script.next_step()


@retryable
class SyncLookup(Query[str]):
    pass


class SyncLookupHandler(QueryHandler[SyncLookup, str]):
    def handle(self, request: SyncLookup) -> str:
        return Script.next_step()


def build(
    clock: FakeClock,
    events: list[RetryEvent] | None = None,
    remaining_time: Callable[[], float | None] | None = None,
    seed: int = 3,
    **values: Any,
) -> Mediator:
    options = ResilienceMediatorOptions.model_validate({"use_jitter": False, **values})
    return Injector(
        [
            MediatorModule(
                lambda m: m.add_handler(LookupHandler, SyncLookupHandler).use_defaults()
            ),
            ResilienceMediatorModule(
                options,
                clock=clock,
                random=random.Random(seed).random,
                listeners=[events.append] if events is not None else [],
                remaining_time=remaining_time,
            ),
        ]
    ).get(Mediator)


class Refused(Exception):
    def __init__(self, retry_after: object) -> None:
        super().__init__("refused")
        self.retry_after = retry_after


class Answer:
    def __init__(self, extensions: object) -> None:
        self.extensions = extensions


class StatusError(Exception):
    """Shaped like `httpx.HTTPStatusError`: the response rides on the error."""

    def __init__(self, response: object) -> None:
        super().__init__("503")
        self.response = response


def final(error: Exception) -> Exception:
    setattr(error, FINAL_MARK, True)
    return error


# --- the final mark ---------------------------------------------------------------


def test_a_marked_failure_is_not_transient_and_the_mark_is_read_by_name() -> None:
    assert FINAL_MARK == "resilience_final"
    assert not is_transient_failure(final(ConnectionError()))
    assert not is_transient_failure(StatusError(Answer({FINAL_MARK: True})))
    assert is_transient_failure(StatusError(Answer({FINAL_MARK: False})))
    assert is_transient_failure(StatusError(Answer(None)))
    assert is_transient_failure(StatusError(object()))

    class Exploding:
        @property
        def extensions(self) -> object:
            raise RuntimeError("a property that raises")

    assert is_transient_failure(StatusError(Exploding()))


async def test_a_failure_retried_to_exhaustion_inside_is_not_retried_again() -> None:
    clock = FakeClock()
    Script.steps = [final(ConnectionError("retried four times already")), "ok"]
    with pytest.raises(ConnectionError):
        await build(clock).send(Lookup())
    assert (Script.attempts, clock.sleeps) == (1, [])


# --- waits a failure asks for ---------------------------------------------------------


async def test_a_failure_asking_for_a_wait_is_waited_for_at_least_that() -> None:
    clock = FakeClock()
    Script.steps = [Refused(5.0), Refused(0.01), "ok"]
    assert await build(clock).send(Lookup()) == "ok"
    # 5 s as asked (above the 0.2 s backoff), then the 0.4 s backoff (above 0.01).
    assert clock.sleeps == pytest.approx([5.0, 0.4])


async def test_with_jitter_the_backoff_spreads_the_waits_past_what_was_asked() -> None:
    # Sends that waited out one open breaker come back spread over the
    # backoff, not in the same instant; none before the wait asked for.
    waits: list[float] = []
    for seed in range(20):
        clock = FakeClock()
        Script.steps, Script.attempts = [Refused(5.0), "ok"], 0
        mediator = build(clock, seed=seed, use_jitter=True)
        assert await mediator.send(Lookup()) == "ok"
        waits.extend(clock.sleeps)
    assert all(5.0 + 0.1 <= wait < 5.0 + 0.2 for wait in waits), waits
    assert len({round(wait, 6) for wait in waits}) > 10


@pytest.mark.parametrize("asked", [None, -1, float("nan"), float("-inf"), "5", True])
async def test_a_wait_that_is_no_number_is_ignored(asked: object) -> None:
    clock = FakeClock()
    Script.steps = [Refused(asked), "ok"]
    assert await build(clock).send(Lookup()) == "ok"
    assert clock.sleeps == pytest.approx([0.2])


def test_nan_asked_on_the_sync_path_is_ignored_too() -> None:
    clock = FakeClock()
    Script.steps = [Refused(float("nan")), "ok"]
    assert build(clock).send_sync(SyncLookup()) == "ok"
    assert clock.sleeps == pytest.approx([0.2])


TOO_LONG = [86_400.0, 30.001, 1e10, float("inf"), 10**400]


@pytest.mark.parametrize("asked", TOO_LONG)
async def test_a_wait_asked_past_max_delay_is_raised_at_once(asked: object) -> None:
    clock = FakeClock()
    events: list[RetryEvent] = []
    refused = Refused(asked)
    Script.steps = [refused, "ok"]
    with pytest.raises(Refused) as raised:
        await build(clock, events).send(Lookup())
    assert raised.value is refused
    assert (Script.attempts, clock.sleeps, events) == (1, [], [])


@pytest.mark.parametrize("asked", TOO_LONG)
def test_the_sync_path_raises_a_wait_past_max_delay_at_once(asked: object) -> None:
    # 1e10 s once reached `time.sleep`, which raised OverflowError.
    clock = FakeClock()
    refused = Refused(asked)
    Script.steps = [refused, "ok"]
    with pytest.raises(Refused) as raised:
        build(clock, use_jitter=True).send_sync(SyncLookup())
    assert raised.value is refused
    assert (Script.attempts, clock.sleeps) == (1, [])


async def test_a_wait_asked_past_max_delay_ends_a_retry_already_under_way() -> None:
    clock = FakeClock()
    events: list[RetryEvent] = []
    Script.steps = [ConnectionError("1"), Refused(86_400.0), "ok"]
    with pytest.raises(Refused):
        await build(clock, events).send(Lookup())
    assert Script.attempts == 2
    assert clock.sleeps == pytest.approx([0.2])
    assert [event.attempt for event in events] == [1]


def test_on_the_sync_path_too_a_retry_under_way_ends_on_a_long_ask() -> None:
    clock = FakeClock()
    Script.steps = [ConnectionError("1"), Refused(1e10), "ok"]
    with pytest.raises(Refused):
        build(clock).send_sync(SyncLookup())
    assert Script.attempts == 2
    assert clock.sleeps == pytest.approx([0.2])


async def test_a_wait_asked_up_to_max_delay_is_waited() -> None:
    clock = FakeClock()
    Script.steps = [Refused(30.0), "ok"]
    assert await build(clock).send(Lookup()) == "ok"
    assert clock.sleeps == [30.0]
    clock = FakeClock()
    Script.steps, Script.attempts = [Refused(3.0), "ok"], 0
    with pytest.raises(Refused):  # past a 2 s max_delay: raised, not waited
        await build(clock, max_delay="2s").send(Lookup())
    assert (Script.attempts, clock.sleeps) == (1, [])


async def test_an_ask_within_max_delay_past_the_time_left_is_raised_at_once() -> None:
    clock = FakeClock()
    Script.steps = [Refused(20.0), "ok"]
    with pytest.raises(Refused):
        await build(clock, remaining_time=lambda: 19.9).send(Lookup())
    assert (Script.attempts, clock.sleeps) == (1, [])


def test_with_jitter_an_ask_within_max_delay_gets_the_backoff_on_top() -> None:
    waits: list[float] = []
    for seed in range(10):
        clock = FakeClock()
        Script.steps, Script.attempts = [Refused(29.0), "ok"], 0
        mediator = build(clock, seed=seed, use_jitter=True)
        assert mediator.send_sync(SyncLookup()) == "ok"
        waits.extend(clock.sleeps)
    # Past max_delay in sum, still waited: the ask is what max_delay bounds.
    assert all(29.0 + 0.1 <= wait < 29.0 + 0.2 for wait in waits), waits


def test_the_longest_ask_with_the_backoff_on_top_stays_a_wait_to_sleep() -> None:
    clock = FakeClock()
    Script.steps = [Refused(24 * 86_400.0), "ok"]
    mediator = build(clock, use_jitter=True, max_delay="P24D")
    assert mediator.send_sync(SyncLookup()) == "ok"
    assert clock.sleeps == [24 * 86_400.0]


async def test_max_delay_bounds_the_ask_before_the_time_left_is_asked() -> None:
    clock = FakeClock()
    asked_left: list[int] = []

    def left() -> float | None:
        asked_left.append(1)
        return 1e12

    Script.steps = [Refused(60.0), "ok"]
    with pytest.raises(Refused):
        await build(clock, remaining_time=left).send(Lookup())
    assert (clock.sleeps, asked_left) == ([], [])


# --- time limits ------------------------------------------------------------------


async def test_no_wait_begins_past_the_retry_duration() -> None:
    clock = FakeClock()
    events: list[RetryEvent] = []
    Script.steps = [ConnectionError("1"), ConnectionError("2"), ConnectionError("3")]
    with pytest.raises(ConnectionError, match="2"):
        # Waits of 0.2 and 0.4 s fit in 0.5 s only one at a time: 0.2, then
        # 0.2 + 0.4 >= 0.5: the second failure is raised at once.
        await build(clock, events, max_retry_duration="500ms").send(Lookup())
    assert clock.sleeps == pytest.approx([0.2])
    assert [event.attempt for event in events] == [1]


async def test_an_asked_wait_past_the_retry_duration_is_final() -> None:
    clock = FakeClock()
    Script.steps = [Refused(30.0), "ok"]
    with pytest.raises(Refused):
        await build(clock, max_retry_duration="10s").send(Lookup())
    assert clock.sleeps == []


def test_the_sync_path_keeps_the_same_limits() -> None:
    clock = FakeClock()
    Script.steps = [Refused(3.0), ConnectionError("2"), "ok"]
    with pytest.raises(ConnectionError):
        build(clock, max_retry_duration="3.3s").send_sync(SyncLookup())
    assert clock.sleeps == pytest.approx([3.0])


async def test_no_wait_begins_past_the_time_remaining() -> None:
    clock = FakeClock()
    left: list[float | None] = [1.0]
    Script.steps = [ConnectionError("1"), ConnectionError("2"), "ok"]
    mediator = build(clock, remaining_time=lambda: left[0])
    # 0.3 s left, whatever the clock (a fixed answer, for the test): the 0.2 s
    # wait fits, the 0.4 s one does not, so the second failure is raised.
    left[0] = 0.3
    with pytest.raises(ConnectionError, match="2"):
        await mediator.send(Lookup())
    assert clock.sleeps == pytest.approx([0.2])
    Script.steps, Script.attempts = [ConnectionError("1"), "ok"], 0
    left[0] = None  # no deadline: the backoff alone
    assert await mediator.send(Lookup()) == "ok"


def test_remaining_time_must_be_callable() -> None:
    with pytest.raises(TypeError, match="remaining_time must be a callable"):
        ResilienceMediatorModule(remaining_time=3.0)  # type: ignore[arg-type]


def test_max_retry_duration_reads_as_a_duration() -> None:
    assert ResilienceMediatorOptions().max_retry_duration is None
    options = ResilienceMediatorOptions.from_config(
        environ={"RESILIENCE__MEDIATOR__MAX_RETRY_DURATION": "2s"}
    )
    assert options.max_retry_duration is not None
    assert options.max_retry_duration.total_seconds() == 2.0
