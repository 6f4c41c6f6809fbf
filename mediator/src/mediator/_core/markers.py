"""What the behaviors' class decorators leave on a request class, read anywhere.

``@idempotent`` (in the idempotency behavior) puts an `IdempotentMarker` on the
class; the audit, the requirements check and the behavior itself read it here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

__all__ = ["IDEMPOTENT_MARK", "IdempotentMarker", "is_idempotent", "key_field_of"]

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
