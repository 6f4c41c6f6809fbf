"""`@retryable`: the opt-in marker, and nothing else."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final, TypeVar, cast

from mediator import Request, Stage

__all__ = ["is_retryable", "retryable"]

C = TypeVar("C", bound=type[Any])

_MARK = "__mediator_retryable__"
# The mediator's convention for a marker's needs: building a mediator whose
# chain has no RETRY behavior for a marked request fails, naming this module.
_REQUIRES = "__mediator_requires__"


@dataclass(frozen=True, slots=True)
class _Need:
    """What ``@retryable`` needs from the mediator's chain (read by convention)."""

    marker: str
    stage: Stage
    install: str


_RETRY_NEED: Final = _Need(
    "@retryable",
    Stage.RETRY,
    "add ResilienceMediatorModule() (from mediator_resilience) to the Injector's "
    "modules, beside MediatorModule",
)
_USAGE = (
    "@retryable is a bare class decorator: write @retryable (no parentheses) above "
    "an idempotent Command or Query class; retry options belong to "
    "ResilienceMediatorOptions"
)


def retryable(cls: C | None = None, /, *args: object, **kwargs: object) -> C:
    """Let `RetryBehavior` retry this request's transient failures. Inherited.

    Mark only idempotent requests: the framework cannot tell a price lookup
    from a card charge, and a retried charge is a second charge.

    The marker needs `RetryBehavior` in the mediator's chain: building a
    mediator that sends a ``@retryable`` request without
    `ResilienceMediatorModule` (or another behavior of stage RETRY that
    applies to it) raises `mediator.ConfigurationError`, naming the module.

    Raises:
        TypeError: Used with arguments (``@retryable(...)``), or on something
            that is not a request class; the message says how to use it.

    Example:
        >>> from decimal import Decimal
        >>> from mediator import Query
        >>> @retryable
        ... class GetPrice(Query[Decimal]):
        ...     sku: str
        >>> is_retryable(GetPrice)
        True
    """
    target = cast(object, cls)
    if args or kwargs or target is None:
        given = [repr(a) for a in (target, *args) if a is not None]
        given += [f"{k}={v!r}" for k, v in kwargs.items()]
        raise TypeError(f"{_USAGE}; it was called with arguments ({', '.join(given)})")
    if not isinstance(target, type):
        raise TypeError(f"{_USAGE}; got {target!r}")
    if Request not in target.__mro__:
        raise TypeError(f"{_USAGE}; {target.__qualname__} is not a request class")
    setattr(target, _MARK, True)
    needs = cast("tuple[object, ...]", getattr(target, _REQUIRES, ()))
    if _RETRY_NEED not in needs:
        setattr(target, _REQUIRES, (*needs, _RETRY_NEED))
    return cast(C, target)


def is_retryable(request_or_type: object) -> bool:
    """Whether a request, or a request class, is marked `@retryable`."""
    cls = (
        request_or_type if isinstance(request_or_type, type) else type(request_or_type)
    )
    return bool(getattr(cls, _MARK, False))
