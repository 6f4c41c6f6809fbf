"""Which failures are worth another attempt."""

from __future__ import annotations

import asyncio

from mediator import DomainError

__all__ = ["CANCELLATION", "is_cancellation", "is_transient_failure"]

CANCELLATION: tuple[type[BaseException], ...] = (
    asyncio.CancelledError,
    KeyboardInterrupt,
    SystemExit,
    GeneratorExit,
)
"""Never retried, whatever a predicate says; no attempt starts after one."""


def is_cancellation(error: BaseException) -> bool:
    """Whether `error` asks the work to stop (cancellation, interrupt, exit)."""
    return isinstance(error, CANCELLATION)


def is_transient_failure(error: BaseException) -> bool:
    """The default retry predicate.

    False for the `DomainError` family (validation, business rule, not found,
    forbidden, conflict: a second attempt fails identically) and for
    cancellation; True for everything else.

    Example:
        >>> from mediator import ConflictError
        >>> is_transient_failure(ConnectionError())
        True
        >>> is_transient_failure(ConflictError())
        False
    """
    return not (isinstance(error, DomainError) or is_cancellation(error))
