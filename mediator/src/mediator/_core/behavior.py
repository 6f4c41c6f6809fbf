"""The `Behavior` seam: code that wraps every request it applies to."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, ClassVar, Protocol, TypeAlias, TypeVar, runtime_checkable

from mediator._core.stage import Stage

__all__ = ["Behavior", "Next", "StreamNext", "SyncNext"]

R = TypeVar("R")

Next: TypeAlias = Callable[[], Awaitable[R]]
"""Runs the rest of the chain (inner behaviors, then the handler) on the async path."""

SyncNext: TypeAlias = Callable[[], R]
"""Runs the rest of the chain on the sync path (`send_sync`, `publish_sync`)."""

StreamNext: TypeAlias = Callable[[], AsyncIterator[R]]
"""Opens the rest of the chain of a stream and returns its items."""


@runtime_checkable
class Behavior(Protocol):
    """Wraps the handling of every request it applies to.

    A behavior declares its `stage` and implements ``async def handle(request,
    next)``, where ``await next()`` runs the rest of the chain and returns the
    response. It is built once, when the mediator is built, by the injector.

    Three optional methods widen or narrow what it does; each is looked up once,
    when the chain of a request type is prepared, never per send:

    - ``applies_to(request_type) -> bool``: return False for types the behavior
      leaves alone; a behavior that does not apply is not in that type's chain
      and costs nothing.
    - ``handle_sync(request, next)``: the same for `send_sync` and
      `publish_sync`, where `next()` returns the response directly. Without it,
      the sync path raises `SyncPathError` naming the behavior.
    - ``handle_stream(request, next)``: an async generator wrapping a stream;
      `next()` returns the inner stream. A behavior without it does not take
      part in streams.

    On `publish`, a behavior wraps the delivery of one notification to all of
    its handlers.

    Example:
        >>> class Timing:
        ...     stage = Stage(150, "TIMING")
        ...
        ...     async def handle(self, request, next):
        ...         return await next()
    """

    stage: ClassVar[Stage]

    async def handle(self, request: Any, next: Next[Any]) -> Any:
        """Handle `request`, calling `next()` to run the rest of the chain."""
        ...
