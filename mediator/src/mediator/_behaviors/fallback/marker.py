"""`@fallback`: the marker of a query that may answer degraded, and with what."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from mediator._behaviors.fallback.handler import FallbackHandler, check_fallback_class
from mediator._core.markers import FALLBACK_MARK, FallbackMarker
from mediator._core.requests import Command, Query, is_request_type

__all__ = ["fallback"]

C = TypeVar("C", bound=type[Query[Any]])


def fallback(handler: type[FallbackHandler[Any, Any]], /) -> Callable[[C], C]:
    """Answer this query with `handler` when its chain gives up.

    `FallbackBehavior` (stage FALLBACK, outside retry) runs `handler` once,
    after the retries, the breaker or the deadline inside it gave up on an
    outage; never on a domain error, a cancellation or a configuration error.
    The answer says it was degraded (`degradation`, the audit record). Only
    a read degrades: a `Command` is refused, as the write it makes cannot be
    answered from elsewhere. Inherited by subclasses; a subclass may name
    another handler.

    Raises:
        TypeError: `handler` is not a concrete `FallbackHandler` class
            (``@fallback`` written bare, say), or the decorated class is not a
            `Query` class (a `Command` is refused: a write cannot degrade).

    Example:
        >>> from mediator import FallbackHandler, Query
        >>> class PriceFromList(FallbackHandler["GetPrice", int]):
        ...     def handle(self, request: "GetPrice", failure: Exception) -> int:
        ...         return 100
        >>> @fallback(PriceFromList)
        ... class GetPrice(Query[int]):
        ...     sku: str
    """
    checked = check_fallback_class(handler)

    def mark(target: C) -> C:
        _check_target(target, checked)
        setattr(target, FALLBACK_MARK, FallbackMarker(checked))
        return target

    return mark


def _check_target(target: object, handler: type[Any]) -> None:
    if not isinstance(target, type) or not is_request_type(target):
        raise TypeError(
            f"@fallback({handler.__qualname__}) goes on Query classes, not on "
            f"{target!r}"
        )
    if issubclass(target, Command):
        raise TypeError(
            f"@fallback goes on Query classes, not on the Command "
            f"{target.__qualname__}: a write cannot answer from elsewhere, its "
            "failure must reach the caller"
        )
    if not issubclass(target, Query):
        raise TypeError(
            f"@fallback({handler.__qualname__}) goes on Query classes, not on "
            f"{target!r}"
        )
