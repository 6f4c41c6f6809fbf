"""Where the hedging race runs its attempts and its timer: asyncio, or an anyio group.

On asyncio the attempts and the timer are asyncio tasks; on trio (any library
but asyncio) they run in an anyio task group, each in a cancel scope of its
own (`GroupTasks`).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Coroutine, Iterable
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar, cast

import anyio
import anyio.lowlevel

from http_resilience._core.clock import checkpoint

if TYPE_CHECKING:
    from anyio.abc import TaskGroup

__all__ = ["AsyncioTasks", "GroupTasks", "Task", "Tasks"]


T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)


class Task(Protocol[T_co]):
    """What the race reads of an attempt or the timer: an `asyncio.Task`'s part."""

    def done(self) -> bool: ...
    def cancelled(self) -> bool: ...
    def result(self) -> T_co: ...
    def exception(self) -> BaseException | None: ...
    def cancel(self) -> object: ...


class Tasks(Protocol):
    """Where the race runs its attempts and its timer: asyncio, or an anyio group."""

    def spawn(self, run: Callable[..., Coroutine[Any, Any, T]], *args: Any) -> Task[T]:
        """Start `run(*args)` beside the caller."""
        ...

    async def first_turn(self) -> None:
        """Wait until the task spawned last has run once (up to its first wait)."""
        ...

    async def wait_any(self, tasks: Iterable[Task[Any]]) -> None:
        """Wait until one of `tasks` is done (at once if one is)."""
        ...

    async def wait_all(self, tasks: Iterable[Task[Any]]) -> None:
        """Wait until all of `tasks` are done."""
        ...

    def ending(self) -> contextlib.AbstractContextManager[object]:
        """Where the clean-up runs: shielded off asyncio, from a cancel again."""
        ...


class AsyncioTasks:
    """`Tasks` on asyncio: tasks of the running loop."""

    __slots__ = ("_loop",)

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop

    def spawn(self, run: Callable[..., Coroutine[Any, Any, T]], *args: Any) -> Task[T]:
        return self._loop.create_task(run(*args))

    async def first_turn(self) -> None:
        # The loop runs the new task before the caller comes back.
        await checkpoint()

    async def wait_any(self, tasks: Iterable[Task[Any]]) -> None:
        waiting = cast("list[asyncio.Task[Any]]", [*tasks])
        await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)

    async def wait_all(self, tasks: Iterable[Task[Any]]) -> None:
        waiting = cast("list[asyncio.Task[Any]]", [*tasks])
        await asyncio.wait(waiting)

    def ending(self) -> contextlib.AbstractContextManager[object]:
        # A cancel is delivered once on asyncio: the clean-up runs as it is.
        return contextlib.nullcontext()


class _GroupTask(Generic[T]):
    """One attempt (or the timer) in an anyio task group, in a scope of its own."""

    __slots__ = ("_done", "_error", "_result", "_scope", "_tasks", "began")

    def __init__(self, tasks: GroupTasks) -> None:
        self._tasks = tasks
        self._scope = anyio.CancelScope()
        self.began = False
        self._done = False
        self._result: T | None = None
        self._error: Exception | None = None

    async def run(self, run: Callable[..., Coroutine[Any, Any, T]], *args: Any) -> None:
        self.began = True
        try:
            with self._scope:
                try:
                    self._result = await run(*args)
                except Exception as exc:
                    self._error = exc
        finally:
            self._done = True
            self._tasks.wake()

    def done(self) -> bool:
        return self._done

    def cancelled(self) -> bool:
        return self._done and self._scope.cancelled_caught

    def result(self) -> T:
        if self._error is not None:
            raise self._error
        return self._result  # type: ignore[return-value]

    def exception(self) -> BaseException | None:
        return self._error

    def cancel(self) -> object:
        self._scope.cancel()
        return not self._done


class GroupTasks:
    """`Tasks` off asyncio (trio): an anyio task group the race runs inside."""

    __slots__ = ("_group", "_last", "_woken")

    def __init__(self, group: TaskGroup) -> None:
        self._group = group
        self._woken = anyio.Event()
        self._last: _GroupTask[Any] | None = None

    def spawn(self, run: Callable[..., Coroutine[Any, Any, T]], *args: Any) -> Task[T]:
        task: _GroupTask[T] = _GroupTask(self)
        self._group.start_soon(task.run, run, *args)
        self._last = task
        return task

    async def first_turn(self) -> None:
        # Trio runs the tasks ready at once in either order: the caller comes
        # back until the new task has begun, its first step then over.
        last = self._last
        await anyio.lowlevel.checkpoint()
        while last is not None and not last.began:
            await anyio.lowlevel.checkpoint()

    def wake(self) -> None:
        """A task ended: the race waiting in `wait_any` looks again."""
        self._woken.set()

    async def wait_any(self, tasks: Iterable[Task[Any]]) -> None:
        waiting = [*tasks]
        while not any(task.done() for task in waiting):
            self._woken = anyio.Event()
            await self._woken.wait()

    async def wait_all(self, tasks: Iterable[Task[Any]]) -> None:
        waiting = [*tasks]
        while not all(task.done() for task in waiting):
            self._woken = anyio.Event()
            await self._woken.wait()

    def ending(self) -> contextlib.AbstractContextManager[object]:
        # Trio delivers a cancel at every checkpoint: the losers are waited
        # for and their answers closed, shielded, once they were cancelled.
        return anyio.CancelScope(shield=True)
