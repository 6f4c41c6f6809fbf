"""A deadline for everything a block of code does: `deadline_scope`, `remaining_time`.

The deadline of the work in hand (the request being served, a job's time
slot) is kept in a context variable, so every call made inside the block, in
this task or thread and in the tasks it starts, sees it. Each resilient call
made inside is cut to the time left (its total timeout becomes the earlier of
its own and the scope's), no attempt starts and no retry waits past it, and
each attempt tells the server how long it has (`DEADLINE_HEADER`). Scopes
nest, and the earliest deadline wins.

The deadline is kept as a moment on the scope's clock; what crosses to other
clocks (a pipeline's `FakeClock`, the mediator's retry) is the time left.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Generator
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import timedelta
from typing import Final

from http_resilience._core.clock import SYSTEM_CLOCK, Clock, reader

__all__ = [
    "DEADLINE_HEADER",
    "deadline_scope",
    "remaining_time",
    "scope_deadline",
]

DEADLINE_HEADER: Final = "X-Request-Timeout-Ms"
"""The header each attempt carries: the milliseconds it has left, an integer."""

_SCOPE: ContextVar[tuple[float, Callable[[], float]] | None] = ContextVar(
    "http_resilience.deadline", default=None
)


@contextmanager
def deadline_scope(
    seconds: float | timedelta, *, clock: Clock | None = None
) -> Generator[None]:
    """Give everything done inside the block at most `seconds` more.

    Inside an earlier deadline, the earlier one is kept.

    Args:
        seconds: The time the block has, as seconds or a `timedelta`; 0 or
            more.
        clock: The clock the deadline runs on; the system's by default, a
            `FakeClock` in tests.

    Raises:
        ValueError: `seconds` is negative, NaN or infinite.
        TypeError: `seconds` is not a number or a `timedelta`.

    Example:
        >>> with deadline_scope(2.0):
        ...     0 < remaining_time() <= 2.0
        True
        >>> remaining_time() is None
        True
    """
    if isinstance(seconds, timedelta):
        seconds = seconds.total_seconds()
    if isinstance(seconds, bool) or not isinstance(seconds, int | float):  # pyright: ignore[reportUnnecessaryIsInstance]
        raise TypeError(
            f"deadline_scope takes seconds or a timedelta, got {type(seconds).__name__}"
        )
    if not math.isfinite(seconds) or seconds < 0:
        raise ValueError(
            f"deadline_scope needs a finite time of 0 or more, got {seconds}"
        )
    read = reader(clock or SYSTEM_CLOCK)
    outer = remaining_time()
    if outer is not None and outer < seconds:
        seconds = outer
    token = _SCOPE.set((read() + seconds, read))
    try:
        yield
    finally:
        _SCOPE.reset(token)


def remaining_time() -> float | None:
    """Seconds left before the innermost `deadline_scope`'s deadline; None outside one.

    Never negative: 0.0 once the deadline has passed. A callable of this shape
    is what `ResilienceMediatorModule(remaining_time=...)` takes.
    """
    scope = _SCOPE.get()
    if scope is None:
        return None
    deadline, read = scope
    left = deadline - read()
    return left if left > 0.0 else 0.0


def scope_deadline() -> tuple[float, Callable[[], float]] | None:
    """The innermost scope's deadline and the clock reader it runs on, if any."""
    return _SCOPE.get()
