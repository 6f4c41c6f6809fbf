"""Test helpers for code that uses `@retryable`.

Example:
    >>> from mediator_resilience import ResilienceMediatorModule
    >>> clock = FakeClock()
    >>> module = ResilienceMediatorModule(clock=clock)
"""

from mediator_resilience._clock import FakeClock

__all__ = ["FakeClock"]
