"""Test helpers for code that uses `@retryable`.

`FakeClock` is a clock you move yourself, the same class, with the same
methods, as `http_resilience.testing.FakeClock`. `set_testing(True)` turns
this package's testing mode on for the whole process: `RetryBehavior` waits
0 s between attempts (and, with `attempts`, stops sooner); as a context
manager it restores the mode it replaced. `EventRecorder` is a listener that
keeps every `RetryEvent`. The pytest plugin
`mediator_resilience.pytest_plugin`, installed with the package, gives them as
fixtures.

Example:
    >>> from mediator_resilience import ResilienceMediatorModule, RetryEvent
    >>> clock, events = FakeClock(), EventRecorder[RetryEvent]()
    >>> module = ResilienceMediatorModule(clock=clock, listeners=[events])
    >>> with set_testing(True, attempts=2):
    ...     is_testing()
    True
"""

from mediator_resilience._primitives.clock import FakeClock
from mediator_resilience._primitives.recorder import EventRecorder
from mediator_resilience._primitives.testing_mode import (
    TestingScope,
    is_testing,
    set_testing,
)

__all__ = ["EventRecorder", "FakeClock", "TestingScope", "is_testing", "set_testing"]

from mediator_resilience._primitives.public_names import publish as _publish

_publish(__name__, __all__)
