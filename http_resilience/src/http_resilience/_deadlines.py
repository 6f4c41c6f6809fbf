"""`Deadlines`: cut attempts at their deadlines with one event-loop timer.

An event-loop timer per attempt (what ``asyncio.timeout`` arms) costs a heap
push ordered by Python-level comparisons, and a cancelled timer stays in the
heap until the loop cleans it out: micro-seconds per request. Attempts of one
timeout strategy end up in deadline order anyway (each is "now plus the same
timeout"), so they wait in a queue, and a single timer is armed for the head.
An attempt that finishes only marks itself done; done entries leave the queue
as new attempts arrive, or when the timer fires. An attempt whose deadline is
earlier than the queue's last (one limited by the total deadline) gets a timer
of its own.

The queue holds at most the attempts begun within one timeout of the oldest
attempt still in flight.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import deque
from typing import Any, Final

__all__ = ["Cut", "Deadlines"]

# The loop runs a timer up to its clock's resolution early; so does the queue.
_RESOLUTION: Final = time.get_clock_info("monotonic").resolution


class Cut:
    """One attempt's deadline: cancels the attempt's task when it passes.

    Attributes:
        when: The deadline, in the loop's time.
        done: Whether the attempt ended, or was cut.
        fired: Whether the deadline passed while the attempt ran.
    """

    __slots__ = ("_timer", "done", "fired", "task", "when")

    def __init__(self, task: asyncio.Task[Any], when: float) -> None:
        self.task = task
        self.when = when
        self.fired = False
        self.done = False
        self._timer: asyncio.TimerHandle | None = None

    def fire(self) -> None:
        """The deadline passed: cancel the attempt, unless it already ended."""
        if not self.done:
            self.done = True
            self.fired = True
            self.task.cancel()

    def arm(self, loop: asyncio.AbstractEventLoop) -> None:
        """Give this cut a loop timer of its own."""
        self._timer = loop.call_at(self.when, self.fire)

    def finish(self) -> None:
        """The attempt ended: nothing is to be cut any more."""
        self.done = True
        if self._timer is not None:
            self._timer.cancel()


class Deadlines:
    """The attempts in flight on one event loop, cut in deadline order.

    Args:
        loop: The running loop; the queue is only valid on it.

    Example:
        >>> async def main() -> bool:
        ...     loop = asyncio.get_running_loop()
        ...     deadlines = Deadlines(loop)
        ...     cut = Cut(asyncio.current_task(), loop.time() + 0.001)
        ...     deadlines.add(cut)
        ...     try:
        ...         await asyncio.Event().wait()
        ...     except asyncio.CancelledError:
        ...         asyncio.current_task().uncancel()
        ...     return cut.fired
        >>> asyncio.run(main())
        True
    """

    __slots__ = ("_armed", "_queue", "_timer", "loop")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self._queue: deque[Cut] = deque()
        self._timer: asyncio.TimerHandle | None = None
        self._armed = math.inf

    def __len__(self) -> int:
        """Entries queued, done ones not yet dropped included."""
        return len(self._queue)

    def add(self, cut: Cut) -> None:
        """Cut `cut.task` at `cut.when` unless `cut.finish()` comes first."""
        queue = self._queue
        while queue and queue[0].done:
            queue.popleft()
        if queue and cut.when < queue[-1].when:
            cut.arm(self.loop)
            return
        queue.append(cut)
        # The timer may be set for a head long gone: re-arm when it is later
        # than the queue's first deadline (a drained queue, a shorter timeout).
        if self._timer is None or queue[0].when < self._armed:
            self._arm(queue[0].when)

    def _arm(self, when: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._armed = when
        self._timer = self.loop.call_at(when, self._expire)

    def _expire(self) -> None:
        self._timer = None
        queue = self._queue
        now = self.loop.time() + _RESOLUTION
        while queue:
            head = queue[0]
            if not head.done:
                if head.when > now:
                    self._arm(head.when)
                    return
                head.fire()
            queue.popleft()
