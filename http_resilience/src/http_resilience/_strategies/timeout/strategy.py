"""The timeout's drivers: `AsyncTimeout`, `SyncTimeout`, and `Narrowing`.

`AsyncTimeout` cuts the attempt's task (or, off asyncio, its cancel scope);
`SyncTimeout` holds the attempt's sockets to the deadline; `Narrowing`, a
timeout with another inside it, only narrows the call's deadline.
"""

from __future__ import annotations

import asyncio
import math
from typing import Any, NoReturn, cast

import anyio
import httpx

from http_resilience._core.backend import asyncio_loop
from http_resilience._core.call import AsyncHandler, Call, DeadlineKind, SyncHandler
from http_resilience._core.clock import (
    AttemptDeadline,
    attempt_deadline,
    real_time,
)
from http_resilience._core.errors import RateLimitedError, ResilienceError
from http_resilience._core.send import close_quietly, close_quietly_sync
from http_resilience._strategies.timeout.deadline import Deadline
from http_resilience._strategies.timeout.timer import Cut, DeadlineTimer, ScopeWait

__all__ = ["AsyncTimeout", "Narrowing", "SyncTimeout"]


class Narrowing:
    """A timeout that does not cut: a deadline inside cuts for it.

    It narrows the call's deadline for what runs inside (so the retry never
    waits past it, and the inner timeout cuts at the earlier of both), and
    restores the outer one afterwards. Both chains' handler. A deadline with
    another inside it is never the innermost, so never the one that owns the
    transport's time: the attempt's phase timeouts are not its to set.
    """

    __slots__ = ("_deadline", "_next", "_next_sync")

    def __init__(self, next: AsyncHandler | SyncHandler, deadline: Deadline) -> None:
        if deadline.own_time:
            raise ValueError(
                "a narrowing deadline cannot own the transport's time: "
                "the innermost deadline does"
            )
        self._next = cast("AsyncHandler", next)
        self._next_sync = cast("SyncHandler", next)
        self._deadline = deadline

    async def handle(self, request: httpx.Request, call: Call) -> httpx.Response:
        """Run the inner handler under the narrowed deadline."""
        deadline, kind, span = call.deadline, call.deadline_kind, call.deadline_span
        self._deadline.narrow(call)
        try:
            return await self._next.handle(request, call)
        finally:
            call.deadline, call.deadline_kind, call.deadline_span = deadline, kind, span

    def handle_sync(self, request: httpx.Request, call: Call) -> httpx.Response:
        """Run the inner handler under the narrowed deadline."""
        deadline, kind, span = call.deadline, call.deadline_kind, call.deadline_span
        self._deadline.narrow(call)
        try:
            return self._next_sync.handle_sync(request, call)
        finally:
            call.deadline, call.deadline_kind, call.deadline_span = deadline, kind, span


class AsyncTimeout:
    """Bounds what runs inside it by its `Deadline`: cuts the task when it passes.

    Args:
        next: The handler inside.
        deadline: The timeout's decisions.
        timer: The transport's one timer for every deadline.
    """

    __slots__ = ("_deadline", "_next", "_timer")

    def __init__(
        self, next: AsyncHandler, deadline: Deadline, timer: DeadlineTimer
    ) -> None:
        self._next = next
        self._deadline = deadline
        self._timer = timer

    async def handle(self, request: httpx.Request, call: Call) -> httpx.Response:
        """Run the inner handler within the deadline.

        The deadline runs from when the attempt leaves the queue for a slot of
        the client's own pool (`Cut`); a wait cut there is `pool_refused`.
        Off asyncio (trio) the cut is a cancel scope (`_handle_anyio`).
        """
        rule = self._deadline
        deadline, kind, span = call.deadline, call.deadline_kind, call.deadline_span
        phase_timeout, pool_timeout = call.phase_timeout, call.pool_timeout
        pool_wait = call.pool_wait
        left = rule.narrow(call)
        try:
            if left <= 0:
                raise rule.expired(call)
            loop = asyncio_loop()
            if loop is None:
                return await self._handle_anyio(
                    request, call, (deadline, kind, span), left
                )
            task = cast("asyncio.Task[Any] | None", call.owner)
            if task is None:
                task = asyncio.current_task(loop)
                if task is None:  # pragma: no cover - a coroutine runs in a task
                    raise RuntimeError("the resilient transport must run in a task")
                call.owner = task
            now = loop.time
            start = now()
            # The deadline around this one, on the loop's time; a total timeout
            # or an attempt timeout with nothing around it ends where it is.
            around = start + left
            if rule.kind == "attempt":
                around += deadline - call.deadline
            cut = Cut(task, start + left, now=now, around=around, span=left)
            call.pool_wait = cut  # the attempt's wait for a pool slot
            self._timer.on(loop).add(cut)
            try:
                response = await self._next.handle(request, call)
            except BaseException as exc:
                cut.finish()
                cancelled = isinstance(exc, asyncio.CancelledError)
                if cut.fired:
                    if task.uncancel() and cancelled:
                        raise  # cancelled from outside as well: that wins
                    if cut.cut_queued:
                        raise self._refused(call, deadline, kind, span) from None
                    around_cut = cut.by_around and rule.moves(deadline)
                    raise rule.expired_within(
                        call, (deadline, kind, span), around_cut, loop.time() - start
                    ) from (None if cancelled else exc)
                outer = (deadline, kind, span)
                error = self._error_for(exc, call, outer, loop.time() - start, left)
                if error is None:
                    raise
                raise error from exc
            cut.finish()
            if cut.fired:
                # The inner code swallowed the cancellation and answered late.
                task.uncancel()
            if cut.fired or (
                rule.check_after and rule.late_after(call, cut.waited(start), deadline)
            ):
                await close_quietly(response)
                around_cut = cut.by_around and rule.moves(deadline)
                raise rule.expired_within(
                    call, (deadline, kind, span), around_cut, loop.time() - start
                )
            return response
        finally:
            call.deadline, call.deadline_kind, call.deadline_span = deadline, kind, span
            call.phase_timeout, call.pool_timeout = phase_timeout, pool_timeout
            call.pool_wait = pool_wait

    async def _handle_anyio(
        self,
        request: httpx.Request,
        call: Call,
        outer: tuple[float, DeadlineKind, float],
        left: float,
    ) -> httpx.Response:
        """`handle` off asyncio: the cut is an anyio cancel scope.

        Args:
            request: The request.
            call: The call, its deadline narrowed to this timeout's.
            outer: The call's deadline around this timeout, its kind, its span.
            left: The seconds this timeout leaves the inside.
        """
        rule = self._deadline
        deadline = outer[0]
        start = anyio.current_time()
        around = start + left
        if rule.kind == "attempt":
            around += deadline - call.deadline
        scope = anyio.CancelScope(deadline=start + left)
        wait = call.pool_wait = ScopeWait(scope, start + left, around, left)
        response: httpx.Response | None = None
        try:
            with scope:
                response = await self._next.handle(request, call)
        except anyio.get_cancelled_exc_class():
            raise  # a cancellation from outside (this scope's never leaves it)
        except BaseException as exc:
            if scope.cancel_called:
                # The cut came, and the inside raised something else for it.
                self._cut_anyio(call, wait, outer, exc)
            error = self._error_for(
                exc, call, outer, anyio.current_time() - start, left
            )
            if error is None:
                raise
            raise error from exc
        if response is None:  # the cut: the scope caught its cancellation
            self._cut_anyio(call, wait, outer, None)
        if scope.cancel_called or (
            rule.check_after and rule.late_after(call, wait.waited(start), deadline)
        ):
            # Late: the inside swallowed the cut and answered, or the clock
            # (not the system's) passed the deadline.
            await close_quietly(response)
            around_cut = wait.by_around and rule.moves(deadline)
            raise rule.expired_within(
                call, outer, around_cut, anyio.current_time() - start
            )
        return response

    def _cut_anyio(
        self,
        call: Call,
        wait: ScopeWait,
        outer: tuple[float, DeadlineKind, float],
        exc: BaseException | None,
    ) -> NoReturn:
        """Raise what the cut of `_handle_anyio`'s scope means: refusal or timeout."""
        rule = self._deadline
        deadline, kind, span = outer
        if wait.queued or wait.cut_queued:
            raise self._refused(call, deadline, kind, span) from None
        around_cut = wait.by_around and rule.moves(deadline)
        raise rule.expired_within(call, outer, around_cut) from exc

    def _error_for(
        self,
        exc: BaseException,
        call: Call,
        outer: tuple[float, DeadlineKind, float],
        spent: float,
        left: float,
    ) -> ResilienceError | None:
        """What the inside raising `exc` (not for the cut) means; None: `exc`.

        The pool's refusal, when this timeout bounds the wait for a slot of the
        client's own pool; a timeout, when `Deadline.timed_out` says so.
        """
        rule = self._deadline
        if rule.own_time and isinstance(exc, httpx.PoolTimeout):
            return self._refused(call, *outer)
        if rule.timed_out(exc, False, call, spent, left):
            return rule.expired(call, spent)
        return None

    def _refused(
        self, call: Call, around: float, kind: DeadlineKind, span: float
    ) -> RateLimitedError:
        """The pool's refusal, naming the timeout that bounded the wait."""
        rule = self._deadline
        if not rule.moves(around):  # this timeout bounded the wait itself
            kind, span = call.deadline_kind, call.deadline_span
        return rule.pool_refused(call, kind, span)


class SyncTimeout:
    """`AsyncTimeout` for a sync chain: the attempt's sockets hold the deadline.

    The deadline is checked on the clock afterwards as well: for a clock
    other than the system's, and for a transport that cannot hold it.

    Args:
        next: The handler inside.
        deadline: The timeout's decisions.
    """

    __slots__ = ("_deadline", "_next")

    def __init__(self, next: SyncHandler, deadline: Deadline) -> None:
        self._next = next
        self._deadline = deadline

    def handle_sync(self, request: httpx.Request, call: Call) -> httpx.Response:
        """Run the inner handler, its socket operations held to the deadline.

        The deadline runs from the attempt's first socket operation, once it
        has left the queue for a slot of the client's own pool
        (`AttemptDeadline.due`); a wait that outlasts its bound is
        `Deadline.pool_refused`.
        """
        rule = self._deadline
        deadline, kind, span = call.deadline, call.deadline_kind, call.deadline_span
        phase_timeout, pool_timeout = call.phase_timeout, call.pool_timeout
        left = rule.narrow(call)
        try:
            if left <= 0:
                raise rule.expired(call)
            # The deadline on the sockets' clock, which the pipeline's keeps too
            # unless it is another clock (then: the time left, from now on).
            start = real_time()
            when = call.deadline if rule.real_time else start + left
            # An attempt timeout starts at the first socket operation, within
            # the deadline around it; a total timeout ends where it is.
            moves = rule.kind == "attempt"
            around = when + (deadline - call.deadline) if moves else math.inf
            queue_end = around if around != math.inf else when
            held = attempt_deadline()
            # What an attempt around this one holds, put back once it ends.
            outer = held.when, held.span, held.bound
            outer_queue = held.queue_end, held.left_at, held.queued_out
            if outer[0] is not None:
                # An attempt of another client around this one bounds it.
                when, around = min(when, outer[0]), min(around, outer[0])
                queue_end = min(queue_end, outer[0])
            held.when, held.span, held.bound = when, left if moves else None, around
            held.queue_end, held.left_at, held.queued_out = queue_end, None, False
            try:
                response = self._next.handle_sync(request, call)
            except Exception as exc:
                if held.queued_out or (
                    rule.own_time and isinstance(exc, httpx.PoolTimeout)
                ):
                    if not rule.moves(deadline):  # it bounded the wait itself
                        kind, span = call.deadline_kind, call.deadline_span
                    raise rule.pool_refused(call, kind, span) from exc
                ended = real_time()
                if rule.timed_out(exc, ended >= held.when, call, ended - start, left):
                    raise rule.expired_within(
                        call,
                        (deadline, kind, span),
                        _by_around(held, left),
                        ended - start,
                    ) from exc
                raise
            finally:
                queued = _queued(held, start)
                by_around = _by_around(held, left)
                held.when, held.span, held.bound = outer
                held.queue_end, held.left_at, held.queued_out = outer_queue
            if rule.late_after(call, queued, deadline):
                close_quietly_sync(response)
                raise rule.expired_within(call, (deadline, kind, span), by_around)
            return response
        finally:
            call.deadline, call.deadline_kind, call.deadline_span = deadline, kind, span
            call.phase_timeout, call.pool_timeout = phase_timeout, pool_timeout


def _queued(held: AttemptDeadline, start: float) -> float:
    """Seconds from `start` to the attempt's first socket operation (0: none)."""
    left_at = held.left_at
    return 0.0 if left_at is None else left_at - start


def _by_around(held: AttemptDeadline, span: float) -> bool:
    """Whether the deadline around the attempt's cut its host's time short."""
    left_at = held.left_at
    return left_at is not None and left_at + span > held.bound
