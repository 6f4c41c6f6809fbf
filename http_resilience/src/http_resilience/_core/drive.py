"""What every strategy's driver holds: the handler inside it and the strategy.

A strategy's decisions live in its strategy object; its async and sync
drivers only hand each call to it and to the handler inside. `AsyncDriver`
and `SyncDriver` are the part every driver has, so a driver states only its
``handle`` (or ``handle_sync``).
"""

from __future__ import annotations

from typing import Generic, TypeVar

from http_resilience._core.call import AsyncHandler, SyncHandler

__all__ = ["AsyncDriver", "SyncDriver"]

S = TypeVar("S")


class AsyncDriver(Generic[S]):
    """An async link of the chain: `strategy` decides, `_next` is sent to.

    Args:
        next: The handler inside this one.
        strategy: What decides for this step.
    """

    __slots__ = ("_next", "strategy")

    def __init__(self, next: AsyncHandler, strategy: S) -> None:
        self._next = next
        self.strategy = strategy


class SyncDriver(Generic[S]):
    """`AsyncDriver` for a sync chain.

    Args:
        next: The handler inside this one.
        strategy: What decides for this step.
    """

    __slots__ = ("_next", "strategy")

    def __init__(self, next: SyncHandler, strategy: S) -> None:
        self._next = next
        self.strategy = strategy
