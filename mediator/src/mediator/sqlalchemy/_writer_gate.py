"""One writer at a time per SQLite database file in this process, handed on in order.

Why: SQLite has one write lock per database, and a connection that finds it
taken waits in SQLite's busy handler, which polls with growing sleeps (1, 2,
5, 10, 15, 20, 25 ... up to 100 ms between tries). Ten units of work that
reach their first write together then take 1, 3, 8, 18, 33, 53, 78, 103,
128, 178 ms to get a lock that is free most of that time (each holds it for
a millisecond or two): measured, the tenth order waits about 180 ms for a
lock its predecessors held for 15 ms in all. A gate in front of
``BEGIN IMMEDIATE`` queues this process's writers and hands the gate to the
next one the moment the last one's ``COMMIT`` or ``ROLLBACK`` returned, so
its ``BEGIN IMMEDIATE`` finds the lock free. Other processes still meet
SQLite's busy handler, as before.

The gate serves both colours: a thread waits on a `threading.Event`; an
asyncio task (aiosqlite's, in SQLAlchemy's greenlet on the event loop) on a
future of its loop, so a waiting task never blocks the loop. Whoever
releases wakes the next waiter, from any thread.
"""

from __future__ import annotations

import asyncio
import os
import threading
import weakref
from collections import deque
from typing import Final

__all__ = ["WriterGate", "gate_for"]


class _Waiter:
    """One writer queued at the gate; `granted` once the gate is handed to it."""

    __slots__ = ("granted",)

    def __init__(self) -> None:
        self.granted = False

    def wake(self) -> bool:
        """Tell the waiter it holds the gate; False when nobody waits any more."""
        raise NotImplementedError


class _ThreadWaiter(_Waiter):
    __slots__ = ("event",)

    def __init__(self) -> None:
        super().__init__()
        self.event = threading.Event()

    def wake(self) -> bool:
        self.event.set()
        return True


class _TaskWaiter(_Waiter):
    __slots__ = ("future", "loop")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__()
        self.loop = loop
        self.future: asyncio.Future[None] = loop.create_future()

    def wake(self) -> bool:
        try:
            self.loop.call_soon_threadsafe(_resolve, self.future)
        except RuntimeError:  # the loop is closed: its task will never run again
            return False
        return True


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


class WriterGate:
    """A first-come, first-served lock for this process's writers to one file.

    `release` hands the gate straight to the longest waiter, so no writer
    that arrives later overtakes one that waits, and none polls.

    Example:
        >>> gate = WriterGate()
        >>> gate.acquire(timeout=None)
        True
        >>> gate.acquire(timeout=0)  # held: a second writer would wait
        False
        >>> gate.release()
        >>> asyncio.run(gate.aacquire())  # free: at once
        >>> gate.release()
        >>> gate.held
        False
    """

    def __init__(self) -> None:
        self._mutex = threading.Lock()
        self._held = False
        self._waiters: deque[_Waiter] = deque()

    @property
    def held(self) -> bool:
        """Whether a writer holds the gate."""
        return self._held

    @property
    def waiting(self) -> int:
        """How many writers wait for the gate."""
        return len(self._waiters)

    def acquire(self, *, timeout: float | None) -> bool:
        """Wait in this thread for the gate, at most `timeout` seconds (None: no limit).

        Returns:
            True once the caller holds the gate; False when `timeout` ran out.
        """
        with self._mutex:
            if not self._held:
                self._held = True
                return True
            waiter = _ThreadWaiter()
            self._waiters.append(waiter)
        if timeout is None or timeout > 0:
            waiter.event.wait(timeout)
        with self._mutex:
            if waiter.granted:
                return True
            self._waiters.remove(waiter)
            return False

    async def aacquire(self) -> None:
        """Wait in this task for the gate; bound the wait with `asyncio.timeout`.

        A task cancelled while it waits (its timeout, say) leaves the queue,
        and hands on the gate if it was handed the gate meanwhile.
        """
        loop = asyncio.get_running_loop()
        with self._mutex:
            if not self._held:
                self._held = True
                return
            waiter = _TaskWaiter(loop)
            self._waiters.append(waiter)
        try:
            await waiter.future
        except BaseException:
            with self._mutex:
                granted = waiter.granted
                if not granted:
                    self._waiters.remove(waiter)
            if granted:
                self.release()
            raise

    def release(self) -> None:
        """Hand the gate to the longest waiter, or leave it free."""
        with self._mutex:
            while self._waiters:
                waiter = self._waiters.popleft()
                waiter.granted = True
                if waiter.wake():
                    return
            self._held = False


_GATES: Final[weakref.WeakValueDictionary[str, WriterGate]] = (
    weakref.WeakValueDictionary()
)
_GATES_MUTEX: Final = threading.Lock()


def gate_for(path: str) -> WriterGate:
    """The gate of the database file at `path`, shared by every engine on it.

    It lives as long as something (a pooled connection's record) holds it.
    """
    key = os.path.normcase(os.path.realpath(path))
    with _GATES_MUTEX:
        gate = _GATES.get(key)
        if gate is None:
            gate = _GATES[key] = WriterGate()
        return gate
