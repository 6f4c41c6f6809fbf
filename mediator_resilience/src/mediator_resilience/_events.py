"""What a retry reports, and where it goes."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeAlias

__all__ = ["RetryEvent", "RetryListener"]


@dataclass(frozen=True, slots=True)
class RetryEvent:
    """One retry about to happen. Never carries request field values.

    Attributes:
        request_type: The request class's qualified name.
        attempt: The attempt that failed (1 for the first).
        delay: Seconds the behavior waits before the next attempt.
        exception_type: The failure's qualified name, or None when the attempt
            returned a response that `should_retry_result` rejected.
    """

    request_type: str
    attempt: int
    delay: float
    exception_type: str | None


RetryListener: TypeAlias = Callable[[RetryEvent], None]
"""Called with every `RetryEvent`, before the wait."""
