"""The backoff: the delay before retry n, its jitter, and the rule on its bounds.

Every retry of these packages waits ``base * 2**(n-1)`` seconds before retry n
(n = 1 for the first retry), at most a cap, and with jitter scaled by a factor
in [0.5, 1) drawn from a random source that returns a float in [0, 1). A
backoff's first delay may not exceed its cap. The packages may not import each
other, so each keeps a copy of this module, written by tools/copy_primitives.py
from tools/primitives/backoff.py: a retry waits the same in each.
"""

from __future__ import annotations

import math
from datetime import timedelta
from typing import Final

from .durations import in_seconds

__all__ = [
    "MAX_DOUBLINGS",
    "check_delays",
    "delays_problem",
    "exponential",
    "jitter_factor",
]

MAX_DOUBLINGS: Final = 1000
"""The most times the base is doubled: 2.0 ** 1024 overflows a float, and a
delay that long is past every cap anyway (a cap is at most 24 days)."""

# 0.5 + 0.5 * draw rounds to 1.0 for the largest draws below 1.
_BELOW_ONE: Final = math.nextafter(1.0, 0.0)


def exponential(base: float, retry: int, *, cap: float = math.inf) -> float:
    """Seconds before retry `retry` (1 for the first): ``base * 2**(retry-1)``, capped.

    A `retry` below 1 reads as 1; the base is doubled at most `MAX_DOUBLINGS`
    times, so that no attempt count overflows.

    Example:
        >>> [exponential(0.25, n, cap=1.5) for n in (1, 2, 3, 4, 10**6)]
        [0.25, 0.5, 1.0, 1.5, 1.5]
    """
    doublings = min(max(retry - 1, 0), MAX_DOUBLINGS)
    return min(base * 2.0**doublings, cap)


def jitter_factor(draw: float, *, source: str = "the jitter source") -> float:
    """The jitter factor, in [0.5, 1), for `draw` in [0, 1): half plus half the draw.

    Args:
        draw: What the random source returned.
        source: The random source's name, for the error.

    Raises:
        ValueError: `draw` is outside [0, 1); the message names `source`.

    Example:
        >>> [jitter_factor(draw) for draw in (0.0, 0.5, 0.75)]
        [0.5, 0.75, 0.875]
        >>> jitter_factor(1.0)
        Traceback (most recent call last):
        ...
        ValueError: the jitter source must return a float in [0, 1), got 1.0
    """
    if not 0.0 <= draw < 1.0:
        raise ValueError(f"{source} must return a float in [0, 1), got {draw!r}")
    return min(0.5 + 0.5 * draw, _BELOW_ONE)


def delays_problem(base_delay: timedelta, max_delay: timedelta) -> str | None:
    """What is wrong with a backoff from `base_delay` capped at `max_delay`, or None.

    Example:
        >>> delays_problem(timedelta(seconds=45), timedelta(seconds=30))
        'base_delay (45 s) must not exceed max_delay (30 s)'
        >>> delays_problem(timedelta(seconds=1), timedelta(seconds=1)) is None
        True
    """
    if base_delay > max_delay:
        return (
            f"base_delay ({in_seconds(base_delay)}) must not exceed "
            f"max_delay ({in_seconds(max_delay)})"
        )
    return None


def check_delays(base_delay: timedelta, max_delay: timedelta) -> None:
    """Raise `ValueError` naming both when `base_delay` exceeds `max_delay`.

    Raises:
        ValueError: `delays_problem`'s message.
    """
    problem = delays_problem(base_delay, max_delay)
    if problem is not None:
        raise ValueError(problem)
