"""The cuts of a transport's async attempts, on one event-loop timer.

`Cut` is one attempt's deadline, moved by its wait for a slot of the client's
own pool (`PoolWait`); `Deadlines` queues the cuts of one loop in deadline
order; `DeadlineTimer` is a transport's queue, for the loop it runs on. Off
asyncio (trio), `ScopeWait` moves an anyio cancel scope's deadline instead.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import deque
from collections.abc import Callable, MutableMapping
from typing import Any, Final

import anyio

from http_resilience._core.clock import real_time
from http_resilience._core.pool import PoolWait

__all__ = ["Cut", "DeadlineTimer", "Deadlines", "ScopeWait"]


# The loop runs a timer up to its clock's resolution early; so does the queue.
_RESOLUTION: Final = time.get_clock_info("monotonic").resolution


class _AttemptWait(PoolWait):
    """What both cuts of an attempt hold: its deadline, moved by its pool wait.

    Attributes:
        when: The deadline, on the clock of the cut.
        around: The deadline around this one, on the same clock.
        span: The attempt's seconds, counted once it leaves the queue.
        by_around: Whether the deadline around this one makes the cut.
        cut_queued: Whether the cut came while the attempt waited for a slot.
    """

    __slots__ = ("around", "by_around", "cut_queued", "span", "when")

    def __init__(
        self, now: Callable[[], float], when: float, around: float, span: float
    ) -> None:
        super().__init__(now)
        self.when = when
        self.around = around
        self.span = span
        self.by_around = False
        self.cut_queued = False


class Cut(_AttemptWait):
    """One attempt's deadline: cancels the attempt's task when it passes.

    The cut is the attempt's `PoolWait` too (`Call.pool_wait`): once the send
    watches it, the deadline runs from when the attempt leaves the queue for a
    slot of the client's own pool, never past `around`: a cut due while the
    attempt still waits moves to the end of the wait (`around`, or with
    nothing around, the deadline itself), and one due after it left moves to
    `span` seconds from then. A cut never watched keeps its deadline.

    Args:
        task: The attempt's task.
        when: The deadline, in the loop's time.
        now: The loop's time, read when the attempt leaves the queue.
        around: The deadline around this one, in the loop's time.
        span: The attempt's seconds.

    Attributes:
        done: Whether the attempt ended, or was cut.
        fired: Whether the deadline passed while the attempt ran.
        (`when`, `around`, `span`, `by_around` and `cut_queued` as for every
        attempt wait, in the loop's time.)
    """

    __slots__ = ("_timer", "done", "fired", "task")

    def __init__(
        self,
        task: asyncio.Task[Any],
        when: float,
        *,
        now: Callable[[], float] = real_time,
        around: float = math.inf,
        span: float = 0.0,
    ) -> None:
        # Every field set here, not through the bases' inits: one cut is made
        # per async attempt, and each init called costs a frame.
        self._now = now
        self.watched = False
        self.left_at = None
        self.then = None
        self.when = when
        self.around = around
        self.span = span
        self.by_around = False
        self.cut_queued = False
        self.task = task
        self.fired = False
        self.done = False
        self._timer: asyncio.TimerHandle | None = None

    def fire(self) -> None:
        """The deadline passed: cancel the attempt, unless it ended or waits.

        An attempt still queued for a slot, or one that left the queue less
        than its span ago, is cut later instead (`_later`).
        """
        if self.done:
            return
        if self.watched and self._later():
            return
        self.done = True
        self.fired = True
        self.task.cancel()

    def _later(self) -> bool:
        """Move the cut to the end of the pool wait or of the host's time.

        Returns:
            Whether it moved: False, it is due now.
        """
        loop = self.task.get_loop()
        left_at = self.left_at
        around = self.around
        if left_at is None:
            end = around if around != math.inf else self.when
            self.cut_queued = True
            self.then = self._left
        else:
            end = left_at + self.span
            if end >= around:
                end, self.by_around = around, True
        if end <= loop.time() + _RESOLUTION:
            return False
        self.when = end
        self.cut_queued = self.by_around = False
        if self._timer is not None:
            self._timer.cancel()
        self._timer = loop.call_at(end, self.fire)
        return True

    def _left(self) -> None:
        """The attempt left the queue after its cut was moved: move it again."""
        if not self.done and self._timer is not None:
            self._timer.cancel()
            self._timer = None
            self.fire()

    def arm(self, loop: asyncio.AbstractEventLoop) -> None:
        """Give this cut a loop timer of its own."""
        self._timer = loop.call_at(self.when, self.fire)

    def finish(self) -> None:
        """The attempt ended: nothing is to be cut any more."""
        self.done = True
        if self._timer is not None:
            self._timer.cancel()


class ScopeWait(_AttemptWait):
    """A `PoolWait` that moves a cancel scope's deadline as `Cut` moves its timer.

    The anyio path's cut (trio): while the attempt waits for a slot of the
    client's own pool, the scope ends with the wait's bound (`around`, or with
    nothing around, the deadline itself); once the attempt leaves the queue,
    `span` seconds from then, never past `around`.

    Args:
        scope: The attempt's cancel scope, its deadline the attempt's own.
        when: The deadline, on anyio's clock.
        around: The deadline around this one, on anyio's clock.
        span: The attempt's seconds.

    Attributes:
        by_around: Whether the deadline around this one now ends the scope.
        cut_queued: Whether the attempt left the queue only once its bound
            had passed: the cut is the pool's refusal.
    """

    __slots__ = ("_scope",)

    def __init__(
        self, scope: anyio.CancelScope, when: float, around: float, span: float
    ) -> None:
        super().__init__(anyio.current_time, when, around, span)
        self._scope = scope

    def watch(self, extensions: MutableMapping[str, Any]) -> None:
        """`PoolWait.watch`; the scope now ends with the wait's bound."""
        super().watch(extensions)
        around = self.around
        self._scope.deadline = around if around != math.inf else self.when
        self.then = self._left

    def _left(self) -> None:
        """The attempt left the queue: the host's time starts now."""
        scope = self._scope
        left_at = self.left_at
        if left_at is None or left_at >= scope.deadline:
            self.cut_queued = True  # its bound passed while it waited
            return
        end = left_at + self.span
        if end >= self.around:
            end, self.by_around = self.around, True
        scope.deadline = end


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


class DeadlineTimer:
    """The one timer all deadlines of a transport's async chain share.

    A `Deadlines` queue for the loop the chain runs on, made on first use and
    again when the chain moves to another loop.
    """

    __slots__ = ("_deadlines",)

    def __init__(self) -> None:
        self._deadlines: Deadlines | None = None

    def on(self, loop: asyncio.AbstractEventLoop) -> Deadlines:
        """The queue of `loop`."""
        deadlines = self._deadlines
        if deadlines is None or deadlines.loop is not loop:
            deadlines = self._deadlines = Deadlines(loop)
        return deadlines
