"""A timeout's decisions, for both chains: `Deadline`, told the clock's time.

It narrows ``call.deadline`` and words the error when the deadline passes;
the drivers in `strategy` only arm the cut their chain can make.
"""

from __future__ import annotations

import math
from typing import Final

import httpx

from http_resilience._core.call import Call, DeadlineKind
from http_resilience._core.classify import mark_final
from http_resilience._core.clock import (
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
from http_resilience._core.telemetry import Telemetry

__all__ = ["Deadline"]


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
        cap = call.attempt_cap
        if cap is not None and cap < seconds and self.kind == "attempt":
            seconds = cap  # the host's own normal bounds it (its breaker's baseline)
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
            # `moves`, and `max(..., 0.0)`, written out: this runs per attempt.
            call.phase_timeout = left if left > 0.0 else 0.0
            wait = (
                around - now if self.kind == "attempt" and around != math.inf else left
            )
            call.pool_timeout = wait if wait > 0.0 else 0.0
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

    def expired_within(
        self,
        call: Call,
        outer: tuple[float, DeadlineKind, float],
        by_around: bool,
        spent: float | None = None,
    ) -> ResilienceError:
        """`expired`, naming the deadline around this one if that one cut short.

        Args:
            call: The call, its deadline narrowed to this timeout's.
            outer: The call's deadline around this timeout, its kind, its span:
                the call's again when `by_around`, so the error names it.
            by_around: Whether the deadline around this one ended the stretch.
            spent: As for `expired`.
        """
        if by_around:
            call.deadline, call.deadline_kind, call.deadline_span = outer
        return self.expired(call, spent)

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
