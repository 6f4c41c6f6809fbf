"""`TimeoutStrategy`: the total timeout and the attempt timeout, on one deadline.

Each timeout narrows ``call.deadline`` for what runs inside it to the earlier
of its own and the one around it. Only the innermost timeout of a pipeline
cuts (`cut`), at that single deadline: waits inside the pipeline never pass a
deadline (the retry ends the call instead), so time passes only in attempts,
and the one cut bounds them. The cuts of all attempts share one event-loop
timer (`Deadlines`): no ``asyncio.timeout`` stacked per strategy, nor a timer
armed per attempt.

The cut is on the event loop's time, for the time left on the pipeline's
clock. Any clock but the system clock (whose time the loop keeps) is read again
after each attempt, so an attempt that ran past its deadline on a `FakeClock`
times out just the same. Sync attempts cannot be cut from outside: they are
bounded by the httpx phase timeouts the pipeline sets (`own_transport_timeout`)
and checked against the clock afterwards.
"""

from __future__ import annotations

import asyncio

import httpx

from http_resilience._clock import Clock, SystemClock, reader
from http_resilience._deadlines import Cut, Deadlines
from http_resilience._errors import (
    AttemptTimeoutError,
    ResilienceError,
    TotalTimeoutError,
)
from http_resilience._pipeline import (
    Call,
    DeadlineKind,
    Handler,
    close_quietly,
    close_quietly_sync,
)
from http_resilience._telemetry import Telemetry

__all__ = ["TimeoutStrategy"]


class TimeoutStrategy:
    """Bounds what runs inside it by `seconds` (and by any outer deadline).

    Args:
        next: The handler inside.
        seconds: The timeout.
        kind: ``"attempt"`` or ``"total"``: which error it raises.
        clock: The pipeline's clock.
        telemetry: Where the `TimeoutEvent` goes.
        cut: Arm the timer and check the clock afterwards: True for the
            innermost timeout of a pipeline.
        own_time: With `cut`, set the attempt's httpx phase timeouts to the
            time left, and read an httpx timeout as this deadline passing.
    """

    __slots__ = (
        "_check_after",
        "_cut",
        "_deadlines",
        "_kind",
        "_next",
        "_now",
        "_own_time",
        "_seconds",
        "_telemetry",
    )

    def __init__(
        self,
        next: Handler,
        *,
        seconds: float,
        kind: DeadlineKind,
        clock: Clock,
        telemetry: Telemetry,
        cut: bool,
        own_time: bool,
    ) -> None:
        self._next = next
        self._seconds = seconds
        self._kind: DeadlineKind = kind
        self._now = reader(clock)
        # On the system clock the loop's timer keeps the same time, so the cut
        # fires at the deadline itself; any other clock is read afterwards.
        self._check_after = not isinstance(clock, SystemClock)
        self._telemetry = telemetry
        self._cut = cut
        self._own_time = own_time and cut
        self._deadlines: Deadlines | None = None

    async def handle(self, request: httpx.Request, call: Call) -> httpx.Response:
        """Run the inner handler within the deadline."""
        now = self._now()
        # The outer deadline, restored on the way out: locals, not a tuple,
        # because this runs on every attempt.
        deadline, kind, span = call.deadline, call.deadline_kind, call.deadline_span
        phase_timeout = call.phase_timeout
        # `_narrow`, inline: this runs twice per attempt in the standard chain.
        seconds = self._seconds
        if now + seconds < deadline:
            call.deadline = now + seconds
            call.deadline_kind = self._kind
            call.deadline_span = seconds
            left = seconds
        else:
            left = deadline - now
        if self._own_time:
            call.phase_timeout = max(left, 0.0)
        try:
            if not self._cut:
                return await self._next.handle(request, call)
            if left <= 0:
                raise self._expired(call)
            loop = asyncio.get_running_loop()
            deadlines = self._deadlines
            if deadlines is None or deadlines.loop is not loop:
                deadlines = self._deadlines = Deadlines(loop)
            task = call.owner
            if task is None:
                task = call.owner = asyncio.current_task(loop)
                if task is None:  # pragma: no cover - a coroutine runs in a task
                    raise RuntimeError("the resilient transport must run in a task")
            cut = Cut(task, loop.time() + left)
            deadlines.add(cut)
            try:
                response = await self._next.handle(request, call)
            except BaseException as exc:
                cut.finish()
                cancelled = isinstance(exc, asyncio.CancelledError)
                if cut.fired:
                    if task.uncancel() and cancelled:
                        raise  # cancelled from outside as well: that wins
                    raise self._expired(call) from (None if cancelled else exc)
                if self._own_time and isinstance(exc, httpx.TimeoutException):
                    raise self._expired(call) from exc
                raise
            cut.finish()
            if cut.fired:
                # The inner code swallowed the cancellation and answered late.
                task.uncancel()
            if cut.fired or (self._check_after and self._now() > call.deadline):
                await close_quietly(response)
                raise self._expired(call)
            return response
        finally:
            call.deadline, call.deadline_kind, call.deadline_span = deadline, kind, span
            call.phase_timeout = phase_timeout

    def handle_sync(self, request: httpx.Request, call: Call) -> httpx.Response:
        """Run the inner handler, then check the deadline on the clock."""
        now = self._now()
        deadline, kind, span = call.deadline, call.deadline_kind, call.deadline_span
        phase_timeout = call.phase_timeout
        left = self._narrow(call, now)
        try:
            if not self._cut:
                return self._next.handle_sync(request, call)
            if left <= 0:
                raise self._expired(call)
            try:
                response = self._next.handle_sync(request, call)
            except httpx.TimeoutException as exc:
                if self._own_time:
                    raise self._expired(call) from exc
                raise
            if self._now() > call.deadline:
                close_quietly_sync(response)
                raise self._expired(call)
            return response
        finally:
            call.deadline, call.deadline_kind, call.deadline_span = deadline, kind, span
            call.phase_timeout = phase_timeout

    def _narrow(self, call: Call, now: float) -> float:
        """Narrow the call's deadline to this timeout's; the seconds left."""
        seconds = self._seconds
        if now + seconds < call.deadline:
            call.deadline = now + seconds
            call.deadline_kind = self._kind
            call.deadline_span = seconds
            # Exact, so that equal attempts carry equal httpx timeouts.
            left = seconds
        else:
            left = call.deadline - now
        if self._own_time:
            call.phase_timeout = max(left, 0.0)
        return left

    def _expired(self, call: Call) -> ResilienceError:
        kind, span = call.deadline_kind, call.deadline_span
        self._telemetry.timeout(call.method, call.host, kind, span)
        if kind == "attempt":
            return AttemptTimeoutError(
                f"{call.where()}: attempt {call.attempt} timed out after {span:g} s"
            )
        return TotalTimeoutError(
            f"{call.where()}: no response within the total timeout of {span:g} s"
        )
