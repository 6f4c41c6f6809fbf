"""Which async library runs the current task: asyncio, or another through anyio.

The async chain runs on asyncio and on trio (directly, or as anyio's trio
backend), as httpx does. On asyncio the strategies keep their own fast paths
(the one loop timer of `DeadlineTimer`, futures, tasks); on any other library
they go through anyio, which httpx already depends on: a cancel scope for a
deadline, an event for a queued caller, a task group for hedged attempts.
The package never imports trio itself.

The library is told by `sniffio` when it is importable (trio depends on it,
so it is whenever trio runs), else asyncio is recognised by its running loop,
and anything else is taken for trio, run through anyio.
"""

from __future__ import annotations

import asyncio
from typing import Any, Final

import anyio

__all__ = ["asyncio_loop", "current_library", "current_task"]

_sniffio: Any
try:
    import sniffio as _sniffio
except ImportError:  # pragma: no cover - sniffio comes with trio and httpcore
    _sniffio = None

# What trio sets while one of its tasks runs, also as a guest on an asyncio
# loop: read directly, it costs less than `sniffio.current_async_library`.
_RUNNING: Final[Any] = None if _sniffio is None else _sniffio.thread_local


def current_library() -> str:
    """The async library that runs the current task: ``"asyncio"``, ``"trio"``.

    Raises:
        RuntimeError: No async library runs in this thread (sniffio says so).
    """
    if _sniffio is not None:
        try:
            name: str = _sniffio.current_async_library()
        except _sniffio.AsyncLibraryNotFoundError:
            raise RuntimeError(
                "http_resilience: no async library runs in this thread; "
                "await the call inside asyncio or trio"
            ) from None
        return name
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return "trio"
    return "asyncio"


def asyncio_loop() -> asyncio.AbstractEventLoop | None:
    """The running asyncio loop, or None when another library runs the task.

    The fast form of ``current_library() == "asyncio"``, for the hot paths: a
    trio task running as a guest on an asyncio loop is trio's.
    """
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        return None
    if _RUNNING is not None and _RUNNING.name not in (None, "asyncio"):
        return None
    return loop


def current_task() -> object:
    """What identifies the running task: its `asyncio.Task`, or anyio's `TaskInfo`.

    Two lookups in the same task compare equal; lookups in different live
    tasks never do.
    """
    try:
        task = asyncio.current_task()
    except RuntimeError:  # no asyncio loop in this thread
        task = None
    if task is not None:
        return task
    return anyio.get_current_task()
