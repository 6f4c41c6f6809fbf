"""`IdempotencyOptions`: whose a key's record is, how long it is kept and claimed."""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Annotated, Final, Self

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, model_validator

from mediator._behaviors.idempotency.marker import ScopeMode
from mediator._primitives.setting import default

if TYPE_CHECKING:
    from mediator._primitives.durations import DurationInput
    from mediator._primitives.setting import Setting

__all__ = [
    "DEFAULT_LEASE",
    "DEFAULT_RETENTION",
    "DEFAULT_SCOPE",
    "MAX_RETENTION",
    "IdempotencyOptions",
]

DEFAULT_RETENTION: Final = timedelta(hours=24)
DEFAULT_LEASE: Final = timedelta(seconds=60)
MAX_RETENTION: Final = timedelta(days=3650)
"""The longest retention (and so lease) taken: ten years. A longer one would
put a record's expiry past what a database's timestamps hold."""
DEFAULT_SCOPE: Final[ScopeMode] = "principal"
"""Whose record a key is by default: each principal's own."""


def _not_a_bool(value: object) -> object:
    if isinstance(value, bool):
        raise ValueError("give a duration (seconds, or ISO 8601), not true or false")
    return value


if TYPE_CHECKING:
    # Set in every form pydantic reads, read as a `timedelta`: see `Setting`.
    _Duration = Setting[timedelta, DurationInput]
else:
    _Duration = Annotated[timedelta, BeforeValidator(_not_a_bool)]


class IdempotencyOptions(BaseModel):
    """Whose a key's record is, how long it is kept, and how long a claim holds.

    Bind an instance to change them
    (``binder.bind(IdempotencyOptions, to=IdempotencyOptions(lease=120))``);
    without one, the defaults apply.

    Attributes:
        retention: How long a completed outcome is replayed; after it the
            record may be purged (`purge_expired`) and the key runs anew.
            Keep it longer than your callers retry. Default 24 h.
        lease: How long a claim holds its key while its handler runs: a
            duplicate meanwhile gets `ConflictError`, and after it (the
            process crashed, say) the next send takes the key over and runs
            the handler. Make it longer than the handler's longest run with
            all its retries. Default 60 s; at most `retention`, which is at
            most ten years (`MAX_RETENTION`).
        scope: Whose record a key is. ``"principal"`` (the default): each
            principal's own, within its tenant; the same key sent by two
            users is two operations. ``"tenant"``: shared by the users of one
            tenant (the principal's ``claims["tenant"]``), for services whose
            users act for their tenant; a principal without a tenant claim
            is still its own scope, apart from every tenant.
        allow_anonymous: Whether an ``@idempotent`` command may be sent with
            no principal. False (the default): such a send raises
            `ForbiddenError` (401 over HTTP) and nothing is stored, because
            every anonymous caller would share the records. True, for a
            worker or a script that sends without a principal: the
            anonymous sends are one scope of their own.

    Durations take a `timedelta`, a number of seconds or ISO 8601 (``"PT2M"``).

    Raises:
        pydantic.ValidationError: On construction: a duration that is not
            positive, a retention over ten years, `lease` longer than
            `retention` (both named), or a `scope` that is neither
            ``"principal"`` nor ``"tenant"``.

    Example:
        >>> IdempotencyOptions(scope="tenant", allow_anonymous=True).scope
        'tenant'
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    retention: _Duration = Field(
        default=default(DEFAULT_RETENTION), gt=timedelta(0), le=MAX_RETENTION
    )
    lease: _Duration = Field(default=default(DEFAULT_LEASE), gt=timedelta(0))
    scope: ScopeMode = DEFAULT_SCOPE
    allow_anonymous: bool = False

    @model_validator(mode="after")
    def _check_lease(self) -> Self:
        if self.lease > self.retention:
            raise ValueError(
                f"lease ({self.lease}) must not exceed retention ({self.retention}): "
                "a record must outlive its claim"
            )
        return self
