"""What the async and sync paths say differently, each named once per colour.

The sync twins are generated from the async sources by renaming alone
(``tools/unasync.py``): where the two paths differ in a type or a call, the
async source names the async side from here, and the twin's rename table maps
it to the sync side beside it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeAlias

from mediator._core.handlers import CallStyle, HandlerInfo
from mediator._core.threads import build_and_handle, in_thread

__all__ = ["AsyncAny", "AsyncNone", "SyncAny", "SyncNone", "notify", "notify_sync"]

AsyncAny: TypeAlias = Awaitable[Any]
"""What an async callable returns: awaited for its result."""

SyncAny: TypeAlias = Any
"""What the same callable returns on the sync path: the result itself."""

AsyncNone: TypeAlias = Awaitable[None]
"""What an async callable with no result returns."""

SyncNone: TypeAlias = None
"""What the same callable returns on the sync path."""


async def notify(info: HandlerInfo, make: Callable[[], Any], notification: Any) -> None:
    """Deliver `notification` to the handler `make` builds, as its style asks.

    A plain def runs in a worker thread, not on the loop: the plain-def
    handlers of one scoped publish share its thread, so they run one at a
    time even when concurrent, never two at once on one request-scoped
    session. An ``async def`` is awaited.
    """
    if info.style is CallStyle.SYNC:
        await in_thread(build_and_handle, make, notification)
        return
    result = make().handle(notification)
    if info.style is CallStyle.ASYNC:
        await result


def notify_sync(info: HandlerInfo, make: Callable[[], Any], notification: Any) -> None:
    """Deliver `notification` on the sync path: the handler's plain-def ``handle``.

    `info` is the async side's: the sync route refused async handlers already.
    """
    make().handle(notification)
