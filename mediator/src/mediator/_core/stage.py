"""`Stage`: where a behavior sits in the chain under `use_defaults()`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar, cast

__all__ = ["Stage"]


@dataclass(frozen=True, order=True, slots=True)
class Stage:
    """An ordered position in the behavior chain; lower values run further out.

    The built-in stages leave room for custom ones between them:
    ``AUDIT (100) < VALIDATION (200) < AUTHORIZATION (300) < FALLBACK (330)
    < IDEMPOTENCY (350) < RETRY (400) < TRANSACTION (500)``. Stages compare by
    `value` only.

    Example:
        >>> TENANCY = Stage(320, "TENANCY")
        >>> Stage.AUTHORIZATION < TENANCY < Stage.FALLBACK
        True
    """

    value: int
    name: str = field(default="", compare=False)

    AUDIT: ClassVar[Stage]
    VALIDATION: ClassVar[Stage]
    AUTHORIZATION: ClassVar[Stage]
    FALLBACK: ClassVar[Stage]
    IDEMPOTENCY: ClassVar[Stage]
    RETRY: ClassVar[Stage]
    TRANSACTION: ClassVar[Stage]

    def __post_init__(self) -> None:
        value = cast(object, self.value)
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"Stage value must be an int, got {value!r}")

    def __repr__(self) -> str:
        label = self.name or "custom"
        return f"Stage({self.value}, {label!r})"


Stage.AUDIT = Stage(100, "AUDIT")
Stage.VALIDATION = Stage(200, "VALIDATION")
Stage.AUTHORIZATION = Stage(300, "AUTHORIZATION")
Stage.FALLBACK = Stage(330, "FALLBACK")
Stage.IDEMPOTENCY = Stage(350, "IDEMPOTENCY")
Stage.RETRY = Stage(400, "RETRY")
Stage.TRANSACTION = Stage(500, "TRANSACTION")
