"""The messages the mediator carries: requests, notifications and stream queries."""

from __future__ import annotations

from typing import Any, Generic, TypeVar

from pydantic import BaseModel, ConfigDict

__all__ = [
    "Command",
    "Notification",
    "Query",
    "Request",
    "StreamQuery",
    "response_type",
]

R = TypeVar("R")
T = TypeVar("T")

_FROZEN = ConfigDict(frozen=True, extra="forbid")


class Request(BaseModel, Generic[R]):
    """Base of everything sent with `Mediator.send`, generic in its response type.

    A request is a frozen pydantic model: it validates on construction and
    serialises, which audit records and idempotency hashes rely on. Derive from
    `Command` or `Query` rather than from `Request` directly.

    Example:
        >>> from decimal import Decimal
        >>> class GetPrice(Query[Decimal]):
        ...     sku: str
        >>> GetPrice(sku="A")
        GetPrice(sku='A')
    """

    model_config = _FROZEN


def is_request_type(cls: object) -> bool:
    """Whether `cls` is a `Request` subclass (a command or a query class)."""
    return isinstance(cls, type) and Request in cls.__mro__


class Command(Request[R], Generic[R]):
    """A request that changes state; its handler returns `R`."""


class Query(Request[R], Generic[R]):
    """A request that reads state and changes nothing; its handler returns `R`."""


class Notification(BaseModel):
    """A message published to zero or more handlers with `Mediator.publish`."""

    model_config = _FROZEN


class StreamQuery(BaseModel, Generic[T]):
    """A query answered by a stream of `T`, consumed with `Mediator.stream`."""

    model_config = _FROZEN


_REQUEST_ROOTS: tuple[object, ...] = (Request, Command, Query)


def response_type(request_type: type[Any]) -> object:
    """The ``R`` of ``Command[R]`` or ``Query[R]`` the type derives from (Any if open).

    Read from pydantic's generic metadata, substituting type variables through
    intermediate generic request classes.
    """
    bound: dict[object, object] = {}
    for klass in request_type.__mro__:
        meta: dict[str, Any] | None = getattr(
            klass, "__pydantic_generic_metadata__", None
        )
        origin: object = meta["origin"] if meta else None
        if meta is None or origin is None:
            continue
        args = tuple(
            bound.get(a, a) if isinstance(a, TypeVar) else a for a in meta["args"]
        )
        if origin in _REQUEST_ROOTS:
            found = args[0] if args else Any
            return Any if isinstance(found, TypeVar) else found
        generic: dict[str, Any] = getattr(origin, "__pydantic_generic_metadata__", {})
        bound.update(zip(generic.get("parameters", ()), args, strict=False))
    return Any
