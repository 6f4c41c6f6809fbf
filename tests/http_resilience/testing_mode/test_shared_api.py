"""Both resilience packages offer one testing API: same names, same behaviour."""

from __future__ import annotations

import asyncio

import pytest

import http_resilience.testing
import mediator_resilience.testing
from tests.support.written_in import class_source


def public(cls: type) -> set[str]:
    return {name for name in dir(cls) if not name.startswith("_")}


def test_the_testing_modules_share_every_name_but_the_http_only_ones() -> None:
    http_only = {"ScriptedAnswer", "ScriptedTransport"}
    assert set(http_resilience.testing.__all__) - http_only == set(
        mediator_resilience.testing.__all__
    )


@pytest.mark.parametrize("name", ["FakeClock", "EventRecorder", "TestingScope"])
def test_each_shared_class_has_the_same_public_members(name: str) -> None:
    http_class = getattr(http_resilience.testing, name)
    mediator_class = getattr(mediator_resilience.testing, name)
    assert public(http_class) == public(mediator_class)
    assert class_source(http_class) == class_source(mediator_class)


def test_the_fake_clock_has_the_promised_methods() -> None:
    assert public(http_resilience.testing.FakeClock) == {
        "advance",
        "clear_sleeps",
        "monotonic",
        "now",
        "sleep",
        "sleep_sync",
        "sleeps",
    }


def test_both_fake_clocks_behave_alike() -> None:
    def drive(clock: http_resilience.testing.FakeClock) -> tuple[object, ...]:
        clock.sleep_sync(0.25)
        asyncio.run(clock.sleep(0.5))
        clock.advance(2)
        return clock.now, clock.monotonic(), tuple(clock.sleeps), repr(clock)

    assert drive(http_resilience.testing.FakeClock(1)) == drive(
        mediator_resilience.testing.FakeClock(1)  # type: ignore[arg-type]
    )


def test_each_package_has_a_switch_of_its_own() -> None:
    with http_resilience.testing.set_testing(True):
        assert http_resilience.testing.is_testing()
        assert not mediator_resilience.testing.is_testing()
    with mediator_resilience.testing.set_testing(True, attempts=1):
        assert mediator_resilience.testing.is_testing()
        assert not http_resilience.testing.is_testing()
