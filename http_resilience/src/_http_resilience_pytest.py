"""Fixtures for testing code that uses `http_resilience`; a pytest plugin.

Installed with the package (entry point ``pytest11``, name
``http_resilience``), it adds fixtures and nothing else: loading it imports
nothing of the package (each fixture imports what it needs when a test asks
for it), so it costs other test runs nothing, and coverage measures the
package from its first import.

- `http_fake_clock`: a fresh `http_resilience.testing.FakeClock` at 0 s.
- `http_events`: a fresh `EventRecorder` to give as a listener; it keeps
  every `HttpEvent`.
- `scripted_transport`: `ScriptedTransport`, to build a fake server that
  answers from a list: ``scripted_transport(503, 503, 200)``.
- `http_testing_mode`: `set_testing(True)` for the test (retries wait 0 s),
  restored after it.

To turn the plugin off: ``pytest -p no:http_resilience``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from http_resilience import HttpEvent
    from http_resilience.testing import EventRecorder, FakeClock, ScriptedTransport

__all__ = [
    "http_events",
    "http_fake_clock",
    "http_testing_mode",
    "scripted_transport",
]


@pytest.fixture
def http_fake_clock() -> FakeClock:
    """A `FakeClock` at 0 s: give it as ``clock=``; sleeping moves it on at once."""
    from http_resilience.testing import FakeClock

    return FakeClock()


@pytest.fixture
def http_events() -> EventRecorder[HttpEvent]:
    """A listener keeping every event: give it in ``listeners=[...]``."""
    from http_resilience.testing import EventRecorder

    return EventRecorder()


@pytest.fixture
def scripted_transport() -> type[ScriptedTransport]:
    """`ScriptedTransport`: call it with the answers, in order."""
    from http_resilience.testing import ScriptedTransport

    return ScriptedTransport


@pytest.fixture
def http_testing_mode() -> Iterator[None]:
    """`set_testing(True)` for the test: every retry waits 0 s."""
    from http_resilience.testing import set_testing

    with set_testing(True):
        yield
