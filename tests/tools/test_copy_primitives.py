"""tools/copy_primitives.py: the clock and durations of each package are one file."""

from __future__ import annotations

import asyncio
import inspect
from datetime import timedelta

import pytest

import http_resilience
import http_resilience.testing
import mediator_resilience
import mediator_resilience.testing
from tools.copy_primitives import COPIES, ROOT, expected, main

FAKE_CLOCKS = [
    pytest.param(http_resilience.testing.FakeClock, id="http_resilience"),
    pytest.param(mediator_resilience.testing.FakeClock, id="mediator_resilience"),
]


def test_every_copy_is_current() -> None:
    assert main(["--check"]) == 0
    for name, targets in COPIES.items():
        for target in targets:
            assert (ROOT / target).read_text(encoding="utf-8") == expected(name)


def test_both_packages_have_one_clock_api() -> None:
    http_api = inspect.getsource(http_resilience.testing.FakeClock)
    assert http_api == inspect.getsource(mediator_resilience.testing.FakeClock)
    for name in ("Clock", "SystemClock"):
        assert inspect.getsource(getattr(http_resilience, name)) == inspect.getsource(
            getattr(mediator_resilience, name)
        )


@pytest.mark.parametrize("fake_clock", FAKE_CLOCKS)
def test_the_fake_clock_api(
    fake_clock: type[http_resilience.testing.FakeClock],
) -> None:
    clock = fake_clock(5)
    clock.sleep_sync(0.5)
    asyncio.run(clock.sleep(0.25))
    clock.advance(timedelta(seconds=1))
    clock.advance(1)
    assert clock.now == clock.monotonic() == 7.75
    assert clock.sleeps == [0.5, 0.25]
    clock.sleeps.clear()  # a copy: the record stays
    assert clock.sleeps == [0.5, 0.25]
    clock.clear_sleeps()
    assert clock.sleeps == []
    with pytest.raises(ValueError, match="never goes back"):
        clock.advance(-1)
    assert isinstance(clock, http_resilience.Clock)
    assert isinstance(clock, mediator_resilience.Clock)
