"""The timeouts: the total timeout and the attempt timeout, on one deadline.

Each timeout (`Deadline`) narrows ``call.deadline`` for what runs inside it to
the earlier of its own and the one around it. A timeout with another inside
it, and nothing between them that waits outside an attempt, does not cut
(`Narrowing`): the inner one cuts at the earlier deadline, and the retry never
waits past one (it ends the call instead), so time passes only in attempts,
and the one cut bounds them (the builder's rule, `Placement.cut`). The cuts of
all attempts share one event-loop timer per transport (`DeadlineTimer`, a
`Deadlines` queue): no ``asyncio.timeout`` stacked per strategy, nor a timer
armed per attempt.

The cut is on the event loop's time, for the time left on the pipeline's
clock. Any clock but the system clock (whose time the loop keeps) is read again
after each attempt, so an attempt that ran past its deadline on a `FakeClock`
times out just the same.

A sync attempt cannot be cut from outside, so it is held to its deadline from
inside: while it runs, the innermost timeout puts the deadline in a
thread-local that the network backend of an `httpx.HTTPTransport` reads at
every connect, read and write (`_sync_deadline`), and a timeout raised there
is this deadline passing. It is checked against the clock afterwards as well.

A wait for a connection from the client's own pool is no time of the host's,
so the attempt's clock starts when the attempt leaves the pool's queue (the
rule Envoy's per-try timeout keeps, started once the pool hands over a
connection): the attempt timeout bounds the host's time, and the wait for a
slot is bounded apart, by the deadline around the attempt's (the total timeout,
a deadline scope) or, with none, by the attempt timeout once more. A wait cut
at that bound never reached the host: a local refusal, `RateLimitedError` with
reason ``"concurrency_limit"`` and a `RejectionEvent`, which the breaker never
counts and the retry never sends into the same full pool; with the pipeline
owning time, an `httpx.PoolTimeout` (the pool's own bound, set `POOL_LEAD`
sooner) is that refusal too. httpcore restarts its pool timeout each time a
queued request is woken and finds the connection taken, so the bound is the
cut's, not httpcore's.

An async attempt learns when it left the queue from httpcore's first trace
event for it (`PoolWait`); a sync one at its first socket operation
(`AttemptDeadline.due`). Either only sees httpx's own transports' pools
(`pool_sweeper`); through any other transport the attempt's clock starts with
the attempt.

On trio (any library but asyncio: `asyncio_loop`), there is no loop timer to
share: each cut is an anyio cancel scope on anyio's clock, its deadline moved
as the `Cut` moves its timer (`_ScopeWait`), and a cancellation from outside
passes through it untouched.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import deque
from collections.abc import MutableMapping
from datetime import timedelta
from typing import TYPE_CHECKING, Any, ClassVar, Final, NoReturn, cast

import anyio
import httpx
from pydantic import (
    BaseModel,
    Field,
)

from http_resilience._core.backend import asyncio_loop
from http_resilience._core.builder import BuildContext, Placement
from http_resilience._core.classify import mark_final
from http_resilience._core.clock import (
    ATTEMPT_DEADLINE,
    AttemptDeadline,
    Clock,
    SystemClock,
    reader,
    real_time,
)
from http_resilience._core.errors import (
    AttemptTimeoutError,
    RateLimitedError,
    ResilienceError,
    TotalTimeoutError,
)
from http_resilience._core.fields import FROZEN
from http_resilience._core.pipeline import (
    AsyncHandler,
    Call,
    DeadlineKind,
    SyncHandler,
    close_quietly,
    close_quietly_sync,
)
from http_resilience._core.pool import PoolWait
from http_resilience._core.telemetry import Telemetry
from http_resilience._primitives.durations import Duration, DurationInput

__all__ = [
    "DEFAULT_ATTEMPT_TIMEOUT",
    "DEFAULT_OWN_TRANSPORT_TIMEOUT",
    "DEFAULT_TOTAL_REQUEST_TIMEOUT",
    "AsyncTimeout",
    "Cut",
    "Deadline",
    "DeadlineTimer",
    "Deadlines",
    "Narrowing",
    "SyncTimeout",
    "TimeoutOptions",
]


class Deadline:
    """What a timeout decides, for both chains: the deadline, its kind, its end.

    Narrows ``call.deadline`` to the earlier of its own and the one around it
    (`narrow`), restores the outer one afterwards (`restore`), and words the
    error when it passes (`expired`). The drivers (`AsyncTimeout`,
    `SyncTimeout`, `Narrowing`) only arm the cut their chain can make.

    Args:
        seconds: The timeout.
        kind: ``"attempt"`` or ``"total"``: which error it raises.
        clock: The pipeline's clock.
        telemetry: Where the `TimeoutEvent` goes.
        own_time: Set the attempt's httpx phase timeouts to the time left;
            an `httpx.PoolTimeout` is then the pool's refusal
            (`pool_refused`). Any other httpx timeout is this deadline passing
            only once the attempt has run its time (`timed_out`).
    """

    __slots__ = (
        "check_after",
        "kind",
        "now",
        "own_time",
        "real_time",
        "seconds",
        "telemetry",
    )

    def __init__(
        self,
        *,
        seconds: float,
        kind: DeadlineKind,
        clock: Clock,
        telemetry: Telemetry,
        own_time: bool,
    ) -> None:
        self.seconds = seconds
        self.kind: DeadlineKind = kind
        self.now = reader(clock)
        # On the system clock the loop's timer keeps the same time, so the cut
        # fires at the deadline itself; any other clock is read afterwards.
        self.check_after = not isinstance(clock, SystemClock)
        self.real_time = self.now is real_time
        self.telemetry = telemetry
        self.own_time = own_time

    def narrow(self, call: Call) -> float:
        """Narrow the call's deadline to this timeout's; the seconds left.

        With `own_time`, ``call.pool_timeout`` is the bound of a wait for a
        slot of the client's own pool: for an attempt timeout, the time the
        deadline around it leaves (its own, when none is around it); for a
        total timeout, its own, since it bounds the whole call.
        """
        now = self.now()
        seconds = self.seconds
        around = call.deadline
        if now + seconds < around:
            call.deadline = now + seconds
            call.deadline_kind = self.kind
            call.deadline_span = seconds
            # Exact, so that equal attempts carry equal httpx timeouts.
            left = seconds
        else:
            left = call.deadline - now
        if self.own_time:
            call.phase_timeout = max(left, 0.0)
            wait = around - now if self.moves(around) else left
            call.pool_timeout = max(wait, 0.0)
        return left

    def late(self, call: Call) -> bool:
        """Whether the clock has passed the call's deadline (read afterwards)."""
        return self.now() > call.deadline

    def timed_out(
        self,
        exc: BaseException,
        passed: bool,
        call: Call | None = None,
        spent: float = 0.0,
        left: float = math.inf,
    ) -> bool:
        """Whether `exc`, raised inside, is this deadline passing at the transport.

        An httpx timeout is once the deadline has `passed` (on the sockets'
        clock), once the attempt has run (`spent` seconds, on the clock of
        the loop or the sockets) the `left` seconds it had, or once the
        pipeline's clock has passed `call`'s deadline. One raised sooner is
        the transport's own (a timeout of its own, shorter than ours; a
        mock's): it is left as httpx raised it, with a note naming the
        attempt and its time (`kept`). Never `httpx.PoolTimeout` (the
        client's own pool, self-caused), nor a timeout of ours from inside.

        Args:
            exc: What the inside raised.
            passed: Whether the deadline has passed on the sockets' clock.
            call: The call; None: only `passed` and `spent` are read.
            spent: Seconds since the attempt started.
            left: Seconds the attempt had.
        """
        if not isinstance(exc, httpx.TimeoutException) or isinstance(
            exc, httpx.PoolTimeout | ResilienceError
        ):
            return False
        if passed or spent + _EARLY >= left:
            return True
        if call is not None:
            if self.check_after and self.late(call):
                return True
            self.kept(exc, call, spent)
        return False

    def kept(self, exc: BaseException, call: Call, spent: float) -> None:
        """Note on an httpx timeout left as it is which attempt raised it, and when.

        The attempt's story, on the exception the caller sees: each attempt
        that raised it adds its line (a mock raises one exception again).
        """
        kind, span = call.deadline_kind, call.deadline_span
        exc.add_note(
            f"{call.where()}: attempt {call.attempt} raised it after "
            f"{_seconds(spent)} s, before its {kind} timeout of {span:g} s "
            "passed (the wrapped transport's own timeout)"
        )

    def moves(self, around: float) -> bool:
        """Whether this deadline starts once the attempt leaves the pool's queue.

        An attempt timeout's does, within a deadline `around` it; a total
        timeout's, the caller's whole time, never does.
        """
        return self.kind == "attempt" and around != math.inf

    def late_after(self, call: Call, queued: float, around: float) -> bool:
        """Whether the clock has passed the call's deadline, moved by a pool wait.

        Args:
            call: The call, its deadline the attempt's from its start.
            queued: Seconds the attempt waited for a slot of the own pool.
            around: The deadline around the attempt's, which bounds it still.
        """
        deadline = call.deadline + queued
        return self.now() > (deadline if deadline < around else around)

    def pool_refused(
        self, call: Call, kind: DeadlineKind, span: float
    ) -> RateLimitedError:
        """Report a wait for the client's own pool run out; the error to raise.

        The attempt never reached the host: the client's own overload, as a
        full concurrency limiter is. A `RejectionEvent` with reason
        ``"concurrency_limit"``; the error is no breaker evidence and is not
        retried into the same full pool.

        Args:
            call: The call whose attempt waited.
            kind: The timeout that bounded the wait.
            span: Its length, in seconds.
        """
        self.telemetry.rejection(call.method, call.host, "concurrency_limit")
        return RateLimitedError(
            f"{call.where()}: no connection of the client's own pool came free "
            f"within the {kind} timeout of {span:g} s; the request was not sent",
            reason="concurrency_limit",
        )

    def expired(self, call: Call, spent: float | None = None) -> ResilienceError:
        """Report the deadline passing; the error to raise.

        Its message and ``elapsed`` state the time the deadline's stretch
        (the attempt, or the whole call) really took, never the timeout in
        its place: on the pipeline's clock, or `spent` (measured by the
        driver on the loop's or the sockets' clock) when that is longer, as
        when a `FakeClock` stood still while the loop's timer cut. The
        request is set by the transport (or httpx's client).

        Args:
            call: The call; its deadline, kind and span are the one that passed.
            spent: Seconds the driver measured since the attempt started.
        """
        kind, span = call.deadline_kind, call.deadline_span
        self.telemetry.timeout(call.method, call.host, kind, span)
        took = self.now() - (call.deadline - span)
        if not took >= 0.0:  # no finite deadline to measure from
            took = 0.0
        if spent is not None and spent > took:
            took = spent
        if kind == "attempt":
            return AttemptTimeoutError(
                f"{call.where()}: attempt {call.attempt} timed out after "
                f"{_seconds(took)} s (attempt timeout {span:g} s)",
                elapsed=took,
                timeout=span,
            )
        error = TotalTimeoutError(
            f"{call.where()}: no response, timed out after {_seconds(took)} s "
            f"(total timeout {span:g} s)",
            elapsed=took,
            timeout=span,
        )
        mark_final(error)  # the call's whole time is spent: final outside it
        return error


_EARLY: Final = 0.001
"""How much sooner than its time an httpx timeout may come and still be the
deadline's: a timer fires up to its clock's resolution early; a millisecond
is far below any timeout worth setting."""


def _seconds(seconds: float) -> str:
    """``"0.25"``: a measured time in seconds, to the millisecond."""
    return f"{round(seconds, 3):g}"


class Narrowing:
    """A timeout that does not cut: a deadline inside cuts for it.

    It narrows the call's deadline for what runs inside (so the retry never
    waits past it, and the inner timeout cuts at the earlier of both), and
    restores the outer one afterwards. Both chains' handler.
    """

    __slots__ = ("_deadline", "_next", "_next_sync")

    def __init__(self, next: AsyncHandler | SyncHandler, deadline: Deadline) -> None:
        self._next = cast("AsyncHandler", next)
        self._next_sync = cast("SyncHandler", next)
        self._deadline = deadline

    async def handle(self, request: httpx.Request, call: Call) -> httpx.Response:
        """Run the inner handler under the narrowed deadline."""
        deadline, kind, span = call.deadline, call.deadline_kind, call.deadline_span
        phase_timeout, pool_timeout = call.phase_timeout, call.pool_timeout
        self._deadline.narrow(call)
        try:
            return await self._next.handle(request, call)
        finally:
            call.deadline, call.deadline_kind, call.deadline_span = deadline, kind, span
            call.phase_timeout, call.pool_timeout = phase_timeout, pool_timeout

    def handle_sync(self, request: httpx.Request, call: Call) -> httpx.Response:
        """Run the inner handler under the narrowed deadline."""
        deadline, kind, span = call.deadline, call.deadline_kind, call.deadline_span
        phase_timeout, pool_timeout = call.phase_timeout, call.pool_timeout
        self._deadline.narrow(call)
        try:
            return self._next_sync.handle_sync(request, call)
        finally:
            call.deadline, call.deadline_kind, call.deadline_span = deadline, kind, span
            call.phase_timeout, call.pool_timeout = phase_timeout, pool_timeout


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
            start = loop.time()
            wait = call.pool_wait = PoolWait(loop.time)
            # The deadline around this one, on the loop's time; a total timeout
            # or an attempt timeout with nothing around it ends where it is.
            around = start + left
            if rule.kind == "attempt":
                around += deadline - call.deadline
            cut = Cut(task, start + left, wait=wait, around=around, span=left)
            self._timer.on(loop).add(cut)
            try:
                response = await self._next.handle(request, call)
            except BaseException as exc:
                cut.finish()
                cancelled = isinstance(exc, asyncio.CancelledError)
                if cut.fired:
                    if task.uncancel() and cancelled:
                        raise  # cancelled from outside as well: that wins
                    if cut.queued:
                        raise self._refused(call, deadline, kind, span) from None
                    if cut.by_around and rule.moves(deadline):
                        call.deadline, call.deadline_kind = deadline, kind
                        call.deadline_span = span
                    raise rule.expired(call, loop.time() - start) from (
                        None if cancelled else exc
                    )
                if rule.own_time and isinstance(exc, httpx.PoolTimeout):
                    raise self._refused(call, deadline, kind, span) from exc
                spent = loop.time() - start
                if rule.timed_out(exc, False, call, spent, left):
                    raise rule.expired(call, spent) from exc
                raise
            cut.finish()
            if cut.fired:
                # The inner code swallowed the cancellation and answered late.
                task.uncancel()
            if cut.fired or (
                rule.check_after and rule.late_after(call, wait.waited(start), deadline)
            ):
                await close_quietly(response)
                if cut.by_around and rule.moves(deadline):
                    call.deadline, call.deadline_kind = deadline, kind
                    call.deadline_span = span
                raise rule.expired(call, loop.time() - start)
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
        deadline, kind, span = outer
        start = anyio.current_time()
        around = start + left
        if rule.kind == "attempt":
            around += deadline - call.deadline
        scope = anyio.CancelScope(deadline=start + left)
        wait = call.pool_wait = _ScopeWait(scope, start + left, around, left)
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
            if rule.own_time and isinstance(exc, httpx.PoolTimeout):
                raise self._refused(call, deadline, kind, span) from exc
            spent = anyio.current_time() - start
            if rule.timed_out(exc, False, call, spent, left):
                raise rule.expired(call, spent) from exc
            raise
        if response is None:  # the cut: the scope caught its cancellation
            self._cut_anyio(call, wait, outer, None)
        if scope.cancel_called or (
            rule.check_after and rule.late_after(call, wait.waited(start), deadline)
        ):
            # Late: the inside swallowed the cut and answered, or the clock
            # (not the system's) passed the deadline.
            await close_quietly(response)
            if wait.by_around and rule.moves(deadline):
                call.deadline, call.deadline_kind = deadline, kind
                call.deadline_span = span
            raise rule.expired(call, anyio.current_time() - start)
        return response

    def _cut_anyio(
        self,
        call: Call,
        wait: _ScopeWait,
        outer: tuple[float, DeadlineKind, float],
        exc: BaseException | None,
    ) -> NoReturn:
        """Raise what the cut of `_handle_anyio`'s scope means: refusal or timeout."""
        rule = self._deadline
        deadline, kind, span = outer
        if wait.queued or wait.cut_queued:
            raise self._refused(call, deadline, kind, span) from None
        if wait.by_around and rule.moves(deadline):
            call.deadline, call.deadline_kind = deadline, kind
            call.deadline_span = span
        raise rule.expired(call) from exc

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
            held = ATTEMPT_DEADLINE
            outer = (
                held.when,
                held.span,
                held.bound,
                held.queue_end,
                held.left_at,
                held.queued_out,
            )
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
                    if _by_around(held, left):
                        call.deadline, call.deadline_kind = deadline, kind
                        call.deadline_span = span
                    raise rule.expired(call, ended - start) from exc
                raise
            finally:
                queued = _queued(held, start)
                by_around = _by_around(held, left)
                (
                    held.when,
                    held.span,
                    held.bound,
                    held.queue_end,
                    held.left_at,
                    held.queued_out,
                ) = outer
            if rule.late_after(call, queued, deadline):
                close_quietly_sync(response)
                if by_around:
                    call.deadline, call.deadline_kind = deadline, kind
                    call.deadline_span = span
                raise rule.expired(call)
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


# The loop runs a timer up to its clock's resolution early; so does the queue.
_RESOLUTION: Final = time.get_clock_info("monotonic").resolution


class Cut:
    """One attempt's deadline: cancels the attempt's task when it passes.

    Given the attempt's `PoolWait`, the deadline runs from when the attempt
    leaves the queue for a slot of the client's own pool, never past
    `around`: a cut due while the attempt still waits moves to the end of
    the wait (`around`, or with nothing around, the deadline itself), and
    one due after it left moves to `span` seconds from then.

    Args:
        task: The attempt's task.
        when: The deadline, in the loop's time.
        wait: The attempt's wait for a pool slot; None: the deadline is fixed.
        around: The deadline around this one, in the loop's time.
        span: The attempt's seconds.

    Attributes:
        when: The deadline, in the loop's time.
        done: Whether the attempt ended, or was cut.
        fired: Whether the deadline passed while the attempt ran.
        queued: Whether the cut came while the attempt waited for a slot.
        by_around: Whether the deadline around this one made the cut.
    """

    __slots__ = (
        "_timer",
        "around",
        "by_around",
        "done",
        "fired",
        "queued",
        "span",
        "task",
        "wait",
        "when",
    )

    def __init__(
        self,
        task: asyncio.Task[Any],
        when: float,
        *,
        wait: PoolWait | None = None,
        around: float = math.inf,
        span: float = 0.0,
    ) -> None:
        self.task = task
        self.when = when
        self.wait = wait
        self.around = around
        self.span = span
        self.fired = False
        self.done = False
        self.queued = False
        self.by_around = False
        self._timer: asyncio.TimerHandle | None = None

    def fire(self) -> None:
        """The deadline passed: cancel the attempt, unless it ended or waits.

        An attempt still queued for a slot, or one that left the queue less
        than its span ago, is cut later instead (`_later`).
        """
        if self.done:
            return
        wait = self.wait
        if wait is not None and wait.watched and self._later(wait):
            return
        self.done = True
        self.fired = True
        self.task.cancel()

    def _later(self, wait: PoolWait) -> bool:
        """Move the cut to the end of the pool wait or of the host's time.

        Returns:
            Whether it moved: False, it is due now.
        """
        loop = self.task.get_loop()
        left_at = wait.left_at
        around = self.around
        if left_at is None:
            end = around if around != math.inf else self.when
            self.queued = True
            wait.then = self._left
        else:
            end = left_at + self.span
            if end >= around:
                end, self.by_around = around, True
        if end <= loop.time() + _RESOLUTION:
            return False
        self.when = end
        self.queued = self.by_around = False
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


class _ScopeWait(PoolWait):
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

    __slots__ = ("_around", "_scope", "_span", "_when", "by_around", "cut_queued")

    def __init__(
        self, scope: anyio.CancelScope, when: float, around: float, span: float
    ) -> None:
        super().__init__(anyio.current_time)
        self._scope = scope
        self._when = when
        self._around = around
        self._span = span
        self.by_around = False
        self.cut_queued = False

    def watch(self, extensions: MutableMapping[str, Any]) -> None:
        """`PoolWait.watch`; the scope now ends with the wait's bound."""
        super().watch(extensions)
        around = self._around
        self._scope.deadline = around if around != math.inf else self._when
        self.then = self._left

    def _left(self) -> None:
        """The attempt left the queue: the host's time starts now."""
        scope = self._scope
        left_at = self.left_at
        if left_at is None or left_at >= scope.deadline:
            self.cut_queued = True  # its bound passed while it waited
            return
        end = left_at + self._span
        if end >= self._around:
            end, self.by_around = self._around, True
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


DEFAULT_ATTEMPT_TIMEOUT: Final = timedelta(seconds=10)
DEFAULT_TOTAL_REQUEST_TIMEOUT: Final = timedelta(seconds=30)
DEFAULT_OWN_TRANSPORT_TIMEOUT: Final = True


class TimeoutOptions(BaseModel):
    """A timeout of a pipeline (internal: `add_timeout` builds it).

    Attributes:
        timeout: The limit of what runs inside the timeout; more than zero.
        own_transport_timeout: When it is the pipeline's innermost timeout,
            set each attempt's httpx timeouts from the time it has left.
    """

    model_config = FROZEN

    timeout: Duration = Field(gt=timedelta(0))
    own_transport_timeout: bool = DEFAULT_OWN_TRANSPORT_TIMEOUT

    if TYPE_CHECKING:
        # Durations in every form pydantic reads; see `HttpResilienceOptions`.
        def __init__(
            self,
            *,
            timeout: DurationInput,
            own_transport_timeout: bool = DEFAULT_OWN_TRANSPORT_TIMEOUT,
        ) -> None: ...

    @property
    def label(self) -> str:
        """``"timeout 1 s"``."""
        return f"timeout {self.timeout.total_seconds():g} s"

    is_deadline: ClassVar[bool] = True
    repeats: ClassVar[bool] = False

    @property
    def waits_outside_attempts(self) -> bool:
        """A timeout never waits."""
        return False

    def will_repeat(self, request: httpx.Request) -> bool:
        """Never: a timeout sends nothing twice."""
        return False

    def _deadline(self, context: BuildContext, place: Placement) -> Deadline:
        return Deadline(
            seconds=self.timeout.total_seconds(),
            kind="total" if place.repeated else "attempt",
            clock=context.clock,
            telemetry=context.telemetry,
            own_time=place.owns_time and self.own_transport_timeout,
        )

    def build_async(
        self, next: AsyncHandler, context: BuildContext, place: Placement
    ) -> AsyncHandler:
        """A timeout that cuts the task where it must, or only narrows."""
        deadline = self._deadline(context, place)
        if not place.cut:
            return Narrowing(next, deadline)
        return AsyncTimeout(next, deadline, context.shared(DeadlineTimer))

    def build_sync(
        self, next: SyncHandler, context: BuildContext, place: Placement
    ) -> SyncHandler:
        """A timeout held at the attempt's sockets where it must, or only narrows."""
        deadline = self._deadline(context, place)
        if not place.cut:
            return Narrowing(next, deadline)
        return SyncTimeout(next, deadline)
