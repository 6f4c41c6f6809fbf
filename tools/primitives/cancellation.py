"""What asks the work to stop: a cancellation, an interrupt, an exit.

Never classified and never retried, whatever a predicate says; no attempt
starts after one. The packages may not import each other, so each keeps a copy
of this module, written by tools/copy_primitives.py from
tools/primitives/cancellation.py: each stops on the same exceptions.
"""

from __future__ import annotations

import asyncio
from typing import Final

__all__ = ["CANCELLATION", "is_cancellation"]

CANCELLATION: Final[tuple[type[BaseException], ...]] = (
    asyncio.CancelledError,
    KeyboardInterrupt,
    SystemExit,
    GeneratorExit,
)
"""Exceptions that mean "stop": never classified, never retried."""


def is_cancellation(error: BaseException) -> bool:
    """Whether `error` asks the work to stop (cancellation, interrupt, exit).

    Example:
        >>> is_cancellation(KeyboardInterrupt()), is_cancellation(ValueError())
        (True, False)
    """
    return isinstance(error, CANCELLATION)
