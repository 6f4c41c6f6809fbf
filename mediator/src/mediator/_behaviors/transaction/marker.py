"""`@transactional`: the marker of a request run in a unit of work per attempt."""

from __future__ import annotations

from typing import Any, TypeVar, cast

from mediator._core.requests import is_request_type

__all__ = ["is_transactional", "transactional"]

C = TypeVar("C", bound=type[Any])

_MARK = "__mediator_transactional__"


def transactional(cls: C | None = None, /) -> C:
    """Run every attempt of this request in its own unit of work.

    A bare class decorator, inherited by subclasses. The handler's writes are
    committed when it returns and rolled back when anything raises; a request
    sent from inside a transactional handler joins the running unit of work,
    each of its attempts in a savepoint of its own.

    Raises:
        TypeError: Used with arguments, or on something that is not a request
            class.

    Example:
        >>> from mediator import Command
        >>> @transactional
        ... class PlaceOrder(Command[int]):
        ...     sku: str
    """
    if cls is None or not isinstance(cast(object, cls), type):
        raise TypeError(
            "@transactional is a bare class decorator: write @transactional above "
            f"a Command or Query class, not @transactional(...); got {cls!r}"
        )
    if not is_request_type(cls):
        raise TypeError(f"@transactional goes on Command or Query classes, not {cls!r}")
    setattr(cls, _MARK, True)
    return cls


def is_transactional(request_or_type: object) -> bool:
    """Whether a request (or request class) is marked `@transactional`."""
    cls = (
        request_or_type if isinstance(request_or_type, type) else type(request_or_type)
    )
    return bool(getattr(cls, _MARK, False))
