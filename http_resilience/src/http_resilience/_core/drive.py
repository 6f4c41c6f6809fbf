"""What every strategy's driver holds: the handler inside it and the strategy.

A strategy's decisions live in its strategy object; its async and sync
drivers only hand each call to it and to the handler inside. `Driver` is the
part every driver has, whatever its colour; `AsyncDriver` and `SyncDriver`
name the two colours, so a driver states only its ``handle`` (or
``handle_sync``).
"""

from __future__ import annotations

from typing import Generic, TypeVar

from http_resilience._core.call import AsyncHandler, SyncHandler

__all__ = ["AsyncDriver", "Driver", "SyncDriver"]

H = TypeVar("H")
S = TypeVar("S")


class Driver(Generic[H, S]):
    """A link of the chain: `strategy` decides, `_next` is sent to.

    Args:
        next: The handler inside this one.
        strategy: What decides for this step.
    """

    __slots__ = ("_next", "strategy")

    def __init__(self, next: H, strategy: S) -> None:
        self._next = next
        self.strategy = strategy


class AsyncDriver(Driver[AsyncHandler, S]):
    """A `Driver` of an async chain."""

    __slots__ = ()


class SyncDriver(Driver[SyncHandler, S]):
    """A `Driver` of a sync chain."""

    __slots__ = ()
