"""Who is sending, and under which correlation id; set by the host per request."""

from __future__ import annotations

import re
from collections.abc import Generator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Final, Protocol, cast, runtime_checkable

from mediator._core.markers import is_idempotent

__all__ = [
    "MAX_CORRELATION_LENGTH",
    "ContextPrincipalProvider",
    "Principal",
    "PrincipalProvider",
    "acting_as",
    "correlation_id",
    "current_correlation_id",
    "current_principal",
    "is_correlation_id",
    "is_replay",
    "mark_replay",
    "replayed",
]

MAX_CORRELATION_LENGTH: Final = 200
"""The longest correlation id, in characters, set here or taken from a caller.

The same limit as `http_resilience`'s (each package keeps its own copy of the
rule): 200 is the longest request id common routers pass on (Heroku's), so an
id a caller's platform made is kept, and still short enough to go into every
audit record and log line.
"""

# Visible ASCII but the comma: what any server, proxy and log line takes as
# is. A comma is refused because HTTP lets any hop join two lines of a header
# into one with commas (RFC 9110, 5.3): a value with one may be two ids.
_VALUE: Final = re.compile(rf"[\x21-\x2b\x2d-\x7e]{{1,{MAX_CORRELATION_LENGTH}}}")
_REFUSED: Final = (
    f"a correlation id is 1 to {MAX_CORRELATION_LENGTH} visible ASCII characters "
    "without spaces or commas"
)


@dataclass(frozen=True, slots=True)
class Principal:
    """The authenticated caller.

    Args:
        id: A stable identifier (user id, client id); it reaches audit records.
        roles: Role names, checked by ``@authorize(roles=...)``.
        claims: Anything else a policy may look at (tenant, scopes, ...).
    """

    id: str
    roles: frozenset[str] = frozenset()
    claims: Mapping[str, Any] = field(default_factory=dict[str, Any])


@runtime_checkable
class PrincipalProvider(Protocol):
    """Answers who is sending; bind your own to read it from elsewhere."""

    def current(self) -> Principal | None:
        """The principal of the current request, or None when anonymous."""
        ...


_principal: ContextVar[Principal | None] = ContextVar(
    "mediator_principal", default=None
)
_correlation: ContextVar[str | None] = ContextVar("mediator_correlation", default=None)
_replayed: ContextVar[bool] = ContextVar("mediator_idempotent_replay", default=False)


def current_principal() -> Principal | None:
    """The principal set by `acting_as` in this context, if any."""
    return _principal.get()


@contextmanager
def acting_as(principal: Principal | None) -> Generator[Principal | None, None, None]:
    """Run the block as `principal` (the default `PrincipalProvider` reads it).

    A web host sets it once per inbound request, in middleware. Tasks started
    inside the block inherit it.

    Example:
        >>> with acting_as(Principal("u-1", roles=frozenset({"clerk"}))):
        ...     current_principal().id
        'u-1'
    """
    token = _principal.set(principal)
    try:
        yield principal
    finally:
        _principal.reset(token)


def current_correlation_id() -> str | None:
    """The correlation id set by `correlation_id` in this context, if any."""
    return _correlation.get()


def is_correlation_id(value: object) -> bool:
    """True when `value` is a string `correlation_id` takes.

    Example:
        >>> is_correlation_id("order-42"), is_correlation_id("a, b")
        (True, False)
    """
    return isinstance(value, str) and _VALUE.fullmatch(value) is not None


@contextmanager
def correlation_id(value: str) -> Generator[str, None, None]:
    """Tag everything sent in the block with `value` (audit records carry it).

    The rule is `http_resilience.correlation_id`'s, so an id either package
    takes goes into a header, a log line and the other package as it is.

    Args:
        value: The id: 1 to 200 visible ASCII characters, no spaces or
            commas (so no CR, LF or NUL either).

    Yields:
        `value`, in force inside the block.

    Raises:
        TypeError: `value` is not a string.
        ValueError: `value` is empty, too long, or has a character outside
            visible ASCII, or a comma. The message does not repeat the value.

    Example:
        >>> with correlation_id("order-42"):
        ...     current_correlation_id()
        'order-42'
    """
    if not isinstance(cast("object", value), str):
        raise TypeError(
            f"a correlation id must be a string, got {type(value).__name__}"
        )
    if _VALUE.fullmatch(value) is None:
        raise ValueError(_REFUSED)
    token = _correlation.set(value)
    try:
        yield value
    finally:
        _correlation.reset(token)


class ContextPrincipalProvider:
    """The default provider: the principal set with `acting_as`."""

    def current(self) -> Principal | None:
        """The principal of the current context."""
        return _principal.get()


def mark_replay(replay: bool) -> None:
    """Record whether the idempotent send ending now was a replay."""
    _replayed.set(replay)


def is_replay() -> bool:
    """Whether the last ``@idempotent`` send in this context was a replay.

    True when its outcome (response or domain error) came from the store
    without running the handler; False when the handler ran, and outside any
    idempotent send. Read it right after the send returns (or raises), in the
    same task: a web handler answers 200 instead of 201 for a replay, say.

    Example:
        >>> is_replay()
        False
    """
    return _replayed.get()


def replayed(request: object) -> bool:
    """Whether `request`, which just ended, was answered from the store."""
    return _replayed.get() and is_idempotent(request)
