"""Nested retries between services: who is retrying above this request.

A service whose caller is already retrying should not retry too: the attempts
of each hop multiply. The caller says it is retrying in `RETRY_ATTEMPT_HEADER`
on its attempts after the first; `ResilienceContextMiddleware` reads it from
each inbound request and keeps it in a context variable for everything that
request's handler does, where every resilient client's retry reads it back
(`caller_attempt`).

The other way, a service that retried its own dependency as far as its policy
goes says so on its answer, in `RETRY_EXHAUSTED_HEADER`: its caller takes that
answer as final instead of retrying it, so each failure is retried at one hop
only. The middleware keeps a `DownstreamRecord` per inbound request, every
retry that gives up notes it there (`note_exhausted`), and the middleware
writes the header on the request's failed answer.
"""

from __future__ import annotations

from collections.abc import Generator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Final, Literal, TypeAlias

__all__ = [
    "RETRY_ATTEMPT_HEADER",
    "RETRY_EXHAUSTED_HEADER",
    "DownstreamRecord",
    "NestedRetries",
    "caller_attempt",
    "caller_attempt_scope",
    "downstream_scope",
    "note_exhausted",
]

RETRY_ATTEMPT_HEADER: Final = "X-Retry-Attempt"
"""The header a retried attempt carries: its number, 2 for the first retry."""

RETRY_EXHAUSTED_HEADER: Final = "X-Retry-Exhausted"
"""The header of a failed answer whose service already retried its own
dependencies as far as they go: ``1``. Its caller does not retry it."""

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


class DownstreamRecord:
    """What the resilient calls made for one inbound request ended in.

    Attributes:
        exhausted: A call gave up on a failure after retrying it as far as its
            policy goes (or after one attempt, its caller retrying).
    """

    __slots__ = ("exhausted",)

    def __init__(self) -> None:
        self.exhausted = False


_DOWNSTREAM: ContextVar[DownstreamRecord | None] = ContextVar(
    "http_resilience.downstream", default=None
)


def note_exhausted() -> None:
    """A call gave up after its retries: note it for the request it serves, if any."""
    record = _DOWNSTREAM.get()
    if record is not None:
        record.exhausted = True


@contextmanager
def downstream_scope() -> Generator[DownstreamRecord]:
    """Within the block, calls that give up note it in the record yielded.

    The record is shared, not copied, with the tasks and threads the block
    starts with its context, so what they note is seen here.
    """
    record = DownstreamRecord()
    token = _DOWNSTREAM.set(record)
    try:
        yield record
    finally:
        _DOWNSTREAM.reset(token)
