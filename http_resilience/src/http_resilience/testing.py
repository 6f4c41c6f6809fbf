"""Test helpers for code that uses `http_resilience`.

`FakeClock` is a clock you move yourself, the same class, with the same
methods, as `mediator_resilience.testing.FakeClock`. `set_testing(True)` turns
this package's testing mode on for the whole process: every retry waits 0 s
(and, with `attempts`, calls stop sooner); as a context manager it restores
the mode it replaced. `EventRecorder` is a listener that keeps every event;
`ScriptedTransport` a `MockTransport` that answers from a list. The pytest
plugin `http_resilience.pytest_plugin`, installed with the package, gives
them as fixtures.

Example:
    >>> from http_resilience import AsyncResilientTransport
    >>> clock, events = FakeClock(), EventRecorder()
    >>> transport = AsyncResilientTransport(
    ...     ScriptedTransport(503, 200), clock=clock, listeners=[events]
    ... )
    >>> with set_testing(True, attempts=2):
    ...     is_testing()
    True
"""

from __future__ import annotations

from http_resilience._primitives.clock import FakeClock
from http_resilience._primitives.recorder import EventRecorder
from http_resilience._primitives.testing_mode import (
    TestingScope,
    is_testing,
    set_testing,
)
from http_resilience._testing.scripted import ScriptedAnswer, ScriptedTransport

__all__ = [
    "EventRecorder",
    "FakeClock",
    "ScriptedAnswer",
    "ScriptedTransport",
    "TestingScope",
    "is_testing",
    "set_testing",
]

from http_resilience._primitives.public_names import publish as _publish

_publish(__name__, __all__)
