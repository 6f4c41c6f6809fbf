"""Fixtures for testing code that uses `@retryable`; a pytest plugin.

Installed with the package (entry point ``pytest11``, name
``mediator_resilience``), it adds fixtures and nothing else: loading it
imports nothing of the package (each fixture imports what it needs when a test
asks for it), so it costs other test runs nothing, and coverage measures the
package from its first import.

- `retry_fake_clock`: a fresh `mediator_resilience.testing.FakeClock` at 0 s,
  to give `ResilienceMediatorModule` as ``clock=``.
- `retry_events`: a fresh `EventRecorder` to give as a listener; it keeps
  every `RetryEvent`.
- `retry_testing_mode`: `set_testing(True)` for the test (`RetryBehavior`
  waits 0 s), restored after it.

To turn the plugin off: ``pytest -p no:mediator_resilience``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from mediator_resilience import RetryEvent
    from mediator_resilience.testing import EventRecorder, FakeClock

__all__ = ["retry_events", "retry_fake_clock", "retry_testing_mode"]


@pytest.fixture
def retry_fake_clock() -> FakeClock:
    """A `FakeClock` at 0 s: give it as ``clock=``; sleeping moves it on at once."""
    from mediator_resilience.testing import FakeClock

    return FakeClock()


@pytest.fixture
def retry_events() -> EventRecorder[RetryEvent]:
    """A listener keeping every `RetryEvent`: give it in ``listeners=[...]``."""
    from mediator_resilience.testing import EventRecorder

    return EventRecorder()


@pytest.fixture
def retry_testing_mode() -> Iterator[None]:
    """`set_testing(True)` for the test: `RetryBehavior` waits 0 s."""
    from mediator_resilience.testing import set_testing

    with set_testing(True):
        yield
