"""Test helpers for code that uses `http_resilience`: a clock you control.

Example:
    >>> from http_resilience import StreamRetryOptions
    >>> clock = FakeClock()
    >>> options = StreamRetryOptions(clock=clock, use_jitter=False)
"""

from __future__ import annotations

from http_resilience._core.shared_clock import FakeClock

__all__ = ["FakeClock"]
