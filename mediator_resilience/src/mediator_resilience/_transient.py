"""Which failures are worth another attempt."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import cast

from mediator import DomainError
from mediator_resilience._primitives.cancellation import CANCELLATION, is_cancellation

__all__ = [
    "CANCELLATION",
    "FINAL_MARK",
    "asked_wait",
    "is_cancellation",
    "is_final",
    "is_transient_failure",
]

FINAL_MARK = "resilience_final"
"""The mark of a failure an inner layer already retried to exhaustion.

A convention, read by name, never by import: `http_resilience` sets it (True)
as an attribute of the exception it raises after its retries, and as a key of
the ``extensions`` of the last response of such a call, which
``raise_for_status()`` puts on its error as ``response``. Any other library may
set it the same way."""


def is_transient_failure(error: BaseException) -> bool:
    """The default retry predicate.

    False for the `DomainError` family (validation, business rule, not found,
    forbidden, conflict: a second attempt fails identically), for cancellation,
    and for a failure an inner layer already retried to exhaustion (`is_final`:
    retrying it here would multiply the attempts); True for everything else.

    Example:
        >>> from mediator import ConflictError
        >>> is_transient_failure(ConnectionError())
        True
        >>> is_transient_failure(ConflictError())
        False
        >>> spent = ConnectionError()
        >>> spent.resilience_final = True
        >>> is_transient_failure(spent)
        False
    """
    return not (
        isinstance(error, DomainError) or is_cancellation(error) or is_final(error)
    )


def is_final(error: BaseException) -> bool:
    """Whether `error` carries `FINAL_MARK`, itself or on its ``response``.

    Example:
        >>> class Answer:
        ...     extensions = {"resilience_final": True}
        >>> class StatusError(Exception):
        ...     response = Answer()
        >>> is_final(StatusError()), is_final(ValueError())
        (True, False)
    """
    if getattr(error, FINAL_MARK, False) is True:
        return True
    try:
        extensions = getattr(getattr(error, "response", None), "extensions", None)
        return isinstance(extensions, Mapping) and (
            cast("Mapping[str, object]", extensions).get(FINAL_MARK) is True
        )
    except Exception:  # a property of someone else's exception that raises
        return False


def asked_wait(error: BaseException | None) -> float | None:
    """The wait `error` asks for in a ``retry_after`` attribute (seconds), if any.

    An open breaker, a limiter or a spent quota says when to come back; a
    retry waits at least that long, or not at all when that is too long.
    Anything but a number >= 0 (NaN, a negative number, a string, a bool) is
    ignored; infinity is returned as asked: a wait no retry can make.

    Example:
        >>> class Refused(Exception):
        ...     retry_after = 1e10
        >>> asked_wait(Refused()), asked_wait(ValueError())
        (10000000000.0, None)
    """
    wait = getattr(error, "retry_after", None)
    if isinstance(wait, bool) or not isinstance(wait, int | float):
        return None
    # NaN fails both comparisons; an int too large for a float is infinite.
    if not wait >= 0:
        return None
    try:
        return float(wait)
    except OverflowError:
        return math.inf
