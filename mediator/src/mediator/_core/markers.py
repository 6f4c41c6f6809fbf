"""What the behaviors' class decorators leave on a request class, read anywhere.

``@idempotent`` (in the idempotency behavior) puts an `IdempotentMarker` on the
class; the audit, the requirements check and the behavior itself read it here.
``@fallback`` (in the fallback behavior) puts a `FallbackMarker`, read here by
the audit, the telemetry and the requirements check.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

__all__ = [
    "FALLBACK_MARK",
    "IDEMPOTENT_MARK",
    "FallbackMarker",
    "IdempotentMarker",
    "fallback_handler_of",
    "is_fallback",
    "is_idempotent",
    "key_field_of",
]

IDEMPOTENT_MARK: Final = "__mediator_idempotent__"
"""The class attribute ``@idempotent`` sets, inherited by subclasses."""


@dataclass(frozen=True, slots=True)
class IdempotentMarker:
    """What ``@idempotent`` put on a class: the field holding the key, if any."""

    field: str | None


def is_idempotent(request_or_type: object) -> bool:
    """Whether a request (or request class) is marked ``@idempotent``."""
    cls = (
        request_or_type if isinstance(request_or_type, type) else type(request_or_type)
    )
    return isinstance(getattr(cls, IDEMPOTENT_MARK, None), IdempotentMarker)


def key_field_of(request_type: type[object]) -> str | None:
    """The field ``@idempotent(key=...)`` named on the type (or a base), if any."""
    marker = getattr(request_type, IDEMPOTENT_MARK, None)
    return marker.field if isinstance(marker, IdempotentMarker) else None


FALLBACK_MARK: Final = "__mediator_fallback__"
"""The class attribute ``@fallback`` sets, inherited by subclasses."""


@dataclass(frozen=True, slots=True)
class FallbackMarker:
    """What ``@fallback`` put on a class: the fallback handler class."""

    handler: type[Any]


def is_fallback(request_or_type: object) -> bool:
    """Whether a request (or request class) is marked ``@fallback``."""
    cls = (
        request_or_type if isinstance(request_or_type, type) else type(request_or_type)
    )
    return isinstance(getattr(cls, FALLBACK_MARK, None), FallbackMarker)


def fallback_handler_of(request_type: type[object]) -> type[Any] | None:
    """The fallback handler class ``@fallback`` named on the type, if any."""
    marker = getattr(request_type, FALLBACK_MARK, None)
    return marker.handler if isinstance(marker, FallbackMarker) else None
