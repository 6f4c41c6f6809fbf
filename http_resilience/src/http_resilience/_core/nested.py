"""Nested retries between services: who is retrying above this request.

A service whose caller is already retrying should not retry too: the attempts
of each hop multiply. The caller says it is retrying in `RETRY_ATTEMPT_HEADER`
on its attempts after the first; `ResilienceContextMiddleware` reads it from
each inbound request and keeps it in a context variable for everything that
request's handler does, where every resilient client's retry reads it back
(`caller_attempt`).
"""

from __future__ import annotations

from collections.abc import Generator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Final, Literal, TypeAlias

__all__ = [
    "RETRY_ATTEMPT_HEADER",
    "NestedRetries",
    "caller_attempt",
    "caller_attempt_scope",
]

RETRY_ATTEMPT_HEADER: Final = "X-Retry-Attempt"
"""The header a retried attempt carries: its number, 2 for the first retry."""

NestedRetries: TypeAlias = Literal["suppress", "report"]
"""What a client does while its caller is retrying: make one attempt per call
(``"suppress"``), or retry as usual and only report it (``"report"``)."""

_CALLER_ATTEMPT: ContextVar[int | None] = ContextVar(
    "http_resilience.caller_attempt", default=None
)


def caller_attempt() -> int | None:
    """The attempt number of the caller's retry this work serves; None if none."""
    return _CALLER_ATTEMPT.get()


@contextmanager
def caller_attempt_scope(attempt: int | None) -> Generator[None]:
    """Within the block, the work serves attempt `attempt` of its caller's retry."""
    token = _CALLER_ATTEMPT.set(
        attempt if attempt is not None and attempt > 1 else None
    )
    try:
        yield
    finally:
        _CALLER_ATTEMPT.reset(token)
