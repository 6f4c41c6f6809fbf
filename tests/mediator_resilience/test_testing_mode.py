"""`mediator_resilience.testing`: testing mode, the recorder, log extras, the plugin."""

from __future__ import annotations

import logging
from typing import ClassVar

import pytest
from injector import Injector

from mediator import Mediator, MediatorModule, Query, QueryHandler, correlation_id
from mediator_resilience import (
    ResilienceMediatorModule,
    ResilienceMediatorOptions,
    RetryEvent,
    retryable,
)
from mediator_resilience.testing import (
    EventRecorder,
    FakeClock,
    is_testing,
    set_testing,
)

pytestmark = pytest.mark.anyio
pytest_plugins = ["pytester"]


@retryable
class GetRate(Query[str]):
    pass


class GetRateHandler(QueryHandler[GetRate, str]):
    answers: ClassVar[list[BaseException | str]] = []
    calls: ClassVar[int] = 0

    def handle(self, request: GetRate) -> str:
        return self.next_answer()

    @classmethod
    def next_answer(cls) -> str:
        cls.calls += 1
        answer = cls.answers[min(cls.calls, len(cls.answers)) - 1]
        if isinstance(answer, BaseException):
            raise answer
        return answer


@pytest.fixture(autouse=True)
def _reset() -> None:
    GetRateHandler.answers = []
    GetRateHandler.calls = 0


def build(
    clock: FakeClock,
    events: EventRecorder[RetryEvent],
    options: ResilienceMediatorOptions | None = None,
) -> Mediator:
    return Injector(
        [
            MediatorModule(lambda m: m.add_handler(GetRateHandler).use_defaults()),
            ResilienceMediatorModule(
                options or ResilienceMediatorOptions(use_jitter=False),
                clock=clock,
                listeners=[events],
            ),
        ]
    ).get(Mediator)


FAILING_THRICE: list[BaseException | str] = [
    ConnectionError("1"),
    ConnectionError("2"),
    ConnectionError("3"),
    "1.08",
]


async def test_testing_mode_makes_four_attempts_wait_nothing() -> None:
    clock, events = FakeClock(), EventRecorder[RetryEvent]()
    GetRateHandler.answers = FAILING_THRICE
    with set_testing(True):
        assert await build(clock, events).send(GetRate()) == "1.08"
    assert GetRateHandler.calls == 4
    assert clock.sleeps == [0.0, 0.0, 0.0]
    assert clock.now == 0.0
    assert [event.delay for event in events.events] == pytest.approx([0.2, 0.4, 0.8])


def test_the_sync_path_waits_nothing_either() -> None:
    clock, events = FakeClock(), EventRecorder[RetryEvent]()
    GetRateHandler.answers = FAILING_THRICE
    with set_testing(True):
        assert build(clock, events).send_sync(GetRate()) == "1.08"
    assert clock.sleeps == [0.0, 0.0, 0.0]


@pytest.mark.parametrize(("attempts", "calls"), [(1, 1), (2, 2), (9, 4)])
async def test_attempts_caps_the_attempts(attempts: int, calls: int) -> None:
    clock, events = FakeClock(), EventRecorder[RetryEvent]()
    GetRateHandler.answers = [ConnectionError("down")]
    with set_testing(True, attempts=attempts), pytest.raises(ConnectionError):
        await build(clock, events).send(GetRate())
    assert GetRateHandler.calls == calls
    assert len(events.events) == calls - 1


async def test_a_rejected_result_obeys_the_cap_and_zero_attempts() -> None:
    clock, events = FakeClock(), EventRecorder[RetryEvent]()
    GetRateHandler.answers = ["busy"]
    busy = ResilienceMediatorOptions(should_retry_result=lambda r: r == "busy")
    with set_testing(True, attempts=1):
        assert await build(clock, events, busy).send(GetRate()) == "busy"
    assert GetRateHandler.calls == 1

    GetRateHandler.calls = 0
    never = ResilienceMediatorOptions(
        max_retry_attempts=0, should_retry_result=lambda r: r == "busy"
    )
    assert await build(clock, events, never).send(GetRate()) == "busy"
    assert GetRateHandler.calls == 1
    assert events.events == []


async def test_a_retry_log_record_carries_the_structured_extras(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock, events = FakeClock(), EventRecorder[RetryEvent]()
    GetRateHandler.answers = [ConnectionError("acct-7 refused"), "1.08"]
    with (
        caplog.at_level(logging.WARNING, logger="mediator_resilience"),
        correlation_id("order-42"),
    ):
        await build(clock, events).send(GetRate())
    (record,) = caplog.records
    assert record.getMessage() == (
        "GetRate: attempt 1 failed with ConnectionError; retrying in 0.200 s"
    )
    extras = {
        key: value
        for key, value in vars(record).items()
        if key.startswith("resilience_") or key == "correlation_id"
    }
    assert extras == {
        "resilience_event": "retry",
        "resilience_request_type": "GetRate",
        "resilience_attempt": 1,
        "resilience_delay_s": 0.2,
        "resilience_reason": "ConnectionError",
        "correlation_id": "order-42",
    }
    assert "acct-7" not in caplog.text


USER_TESTS = """
from injector import Injector

from mediator import Mediator, MediatorModule, Query, QueryHandler
from mediator_resilience import ResilienceMediatorModule, SystemClock, retryable
from mediator_resilience.testing import is_testing

calls = []


@retryable
class GetRate(Query[str]):
    pass


class GetRateHandler(QueryHandler[GetRate, str]):
    def handle(self, request):
        calls.append(1)
        if len(calls) < 4:
            raise ConnectionError("down")
        return "1.08"


class CountingClock(SystemClock):
    def __init__(self):
        self.asked = []

    def sleep_sync(self, seconds):
        self.asked.append(seconds)
        super().sleep_sync(seconds)


def build(clock, events):
    return Injector([
        MediatorModule(lambda m: m.add_handler(GetRateHandler).use_defaults()),
        ResilienceMediatorModule(clock=clock, listeners=[events]),
    ]).get(Mediator)


def test_a_fake_clock_takes_the_backoff(retry_fake_clock, retry_events):
    calls.clear()
    assert build(retry_fake_clock, retry_events).send_sync(GetRate()) == "1.08"
    assert len(retry_fake_clock.sleeps) == 3
    assert [e.attempt for e in retry_events.events] == [1, 2, 3]


def test_testing_mode_makes_a_real_clock_wait_nothing(
    retry_testing_mode, retry_events
):
    calls.clear()
    clock = CountingClock()
    assert is_testing()
    assert build(clock, retry_events).send_sync(GetRate()) == "1.08"
    assert clock.asked == [0.0, 0.0, 0.0]


def test_the_mode_ends_with_the_test_that_asked_for_it():
    assert not is_testing()
"""


def test_the_plugin_fixtures_work_in_a_users_test_file(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(test_user=USER_TESTS)
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=3)
    assert not is_testing()
