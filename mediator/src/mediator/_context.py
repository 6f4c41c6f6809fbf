"""Who is sending, and under which correlation id; set by the host per request."""

from __future__ import annotations

from collections.abc import Generator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

__all__ = [
    "ContextPrincipalProvider",
    "Principal",
    "PrincipalProvider",
    "acting_as",
    "correlation_id",
    "current_correlation_id",
    "current_principal",
]


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


@contextmanager
def correlation_id(value: str) -> Generator[str, None, None]:
    """Tag everything sent in the block with `value` (audit records carry it)."""
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
