"""`HedgingStrategy`: the race of copies, the first good answer wins.

The delay is spent on the pipeline's clock; the attempts and the timer run
where `tasks.py` puts them.
"""

from __future__ import annotations

from typing import Any, Final

import anyio
import httpx

from http_resilience._core.backend import asyncio_loop
from http_resilience._core.call import AsyncHandler, Call, charged
from http_resilience._core.classify import (
    FAILURE_EXCEPTIONS,
    SELF_CAUSED_EXCEPTIONS,
    is_failure_status,
    is_invalid_status,
    mark_final,
)
from http_resilience._core.clock import Clock
from http_resilience._core.errors import TotalTimeoutError
from http_resilience._core.nested import RETRY_EXHAUSTED_HEADER
from http_resilience._core.send import close_quietly
from http_resilience._core.telemetry import Telemetry
from http_resilience._strategies.hedging.decision import REFUSALS, is_hedged
from http_resilience._strategies.hedging.tasks import (
    AsyncioTasks,
    GroupTasks,
    Task,
    Tasks,
)

__all__ = ["HedgingStrategy"]

_DELAY: Final = "delay"
_EXHAUSTED: Final = RETRY_EXHAUSTED_HEADER.lower()


class HedgingStrategy:
    """Sends up to `max_hedged_attempts` more copies of a slow safe request.

    After `delay` seconds without an answer, the next attempt is sent beside
    the ones in flight; an attempt that fails (a failure status, or an
    exception in `FAILURE_EXCEPTIONS`) has the next one sent at once. An error
    the client caused itself (`SELF_CAUSED_EXCEPTIONS`) ends the call at once:
    a copy would fail the same. The first
    attempt that answers without failing wins: the others are cancelled and
    their responses closed. When every attempt fails, the last to end decides,
    as in the retry: its response is returned, its exception raised, marked
    final (``resilience_final``, as the retry marks what it gives up on). A copy
    refused before it was sent (`REFUSALS`: a breaker or a limiter inside the
    hedging) is no answer: while another copy is in flight the call waits for
    that one, and the refusal ends the call only when no copy is left. Any
    other exception (a timeout around the hedging, a bug) ends the call at
    once.

    Under a retry budget (`RetryBudgetOptions`, outside the hedging) each
    copy after the first is charged as a retry; a copy the budget refuses is
    not sent, the call sends no more and goes on with the copies in flight,
    and a copy refused in this process is given back.

    Requests whose method is not in `HEDGED_METHODS`, or whose body cannot be
    replayed, go through once, unhedged.

    Args:
        next: The handler inside: one attempt.
        delay: Seconds an attempt may go without an answer.
        max_hedged_attempts: Attempts beyond the first.
        clock: Where the delay is spent.
        telemetry: Where attempts and hedges are reported.
    """

    __slots__ = ("_clock", "_delay", "_limit", "_next", "_telemetry")

    def __init__(
        self,
        next: AsyncHandler,
        *,
        delay: float,
        max_hedged_attempts: int,
        clock: Clock,
        telemetry: Telemetry,
    ) -> None:
        self._next = next
        self._delay = delay
        self._limit = 1 + max_hedged_attempts
        self._clock = clock
        self._telemetry = telemetry

    async def handle(self, request: httpx.Request, call: Call) -> httpx.Response:
        """Send `request`, hedged when its method is safe and its body replayable."""
        if not is_hedged(request):
            return await self._next.handle(request, call)
        return await self._hedge(request, call)

    async def _hedge(self, request: httpx.Request, call: Call) -> httpx.Response:
        loop = asyncio_loop()
        if loop is not None:
            return await self._race(request, call, AsyncioTasks(loop))
        outcome: httpx.Response | Exception | None = None
        async with anyio.create_task_group() as group:
            try:
                outcome = await self._race(request, call, GroupTasks(group))
            except Exception as exc:
                # Raised outside the group: inside, it would come out of the
                # group wrapped in an exception group.
                outcome = exc
        if isinstance(outcome, Exception):
            raise outcome
        assert outcome is not None  # the group raises, or the race ended
        return outcome

    async def _race(
        self, request: httpx.Request, call: Call, tasks: Tasks
    ) -> httpx.Response:
        clock = self._clock
        started = clock.monotonic()
        running: dict[Task[httpx.Response], int] = {}
        timer: Task[None] | None = None
        last: httpx.Response | Exception | None = None
        sent = 0
        fresh = False
        limit = self._limit

        def may_copy() -> bool:
            # A hedged copy is a retry to the retry budget, if there is one.
            nonlocal limit
            if charged(call, clock.monotonic(), self._telemetry):
                return True
            limit = sent  # no more copies for this call
            return False

        def send(reason: str | None) -> None:
            nonlocal sent, fresh
            sent += 1
            if reason is not None:
                after = clock.monotonic() - started
                self._telemetry.hedge(call.method, call.host, sent, after, reason)
            task = tasks.spawn(self._attempt, request, call.fork(sent))
            running[task] = sent
            fresh = True

        try:
            send(None)
            while True:
                if fresh:
                    fresh = False
                    # The new attempt's first turn: one that answers at once
                    # is seen before any timer is armed.
                    await tasks.first_turn()
                finished = sorted(
                    (task for task in running if task.done()), key=running.__getitem__
                )
                for task in finished:
                    number = running.pop(task)
                    try:
                        outcome: httpx.Response | Exception = task.result()
                    except Exception as exc:
                        outcome = exc
                    if isinstance(outcome, httpx.Response):
                        if not is_failure_status(outcome.status_code):
                            return outcome
                        reason = str(outcome.status_code)
                        if _EXHAUSTED in outcome.headers:
                            # Its service retried a hop further in: no copy
                            # of ours can do better.
                            limit = sent
                    elif isinstance(
                        outcome, SELF_CAUSED_EXCEPTIONS
                    ) or is_invalid_status(outcome):
                        # The client's own fault, or a status no HTTP server
                        # sends: a copy would fail the same.
                        raise outcome
                    elif isinstance(outcome, FAILURE_EXCEPTIONS) and not isinstance(
                        outcome, TotalTimeoutError
                    ):
                        reason = type(outcome).__name__
                    elif isinstance(outcome, REFUSALS):
                        if number > 1 and call.budget is not None:
                            # Never sent: the budget gets its retry back.
                            call.budget.refund(clock.monotonic())
                        if not running:
                            raise outcome
                        # No answer: the copies in flight go on. Ending the
                        # call here would cancel them, the probe of a
                        # half-open breaker among them.
                        continue
                    else:
                        raise outcome
                    if isinstance(last, httpx.Response):
                        await close_quietly(last)
                    last = outcome
                    if sent < limit and may_copy():
                        # A failure is an answer: the next copy goes at once.
                        if timer is not None:
                            timer.cancel()
                            timer = None
                        send(reason)
                    elif not running:
                        # Every attempt failed: the last to end decides, and
                        # is final for the layers outside.
                        last = None
                        mark_final(outcome)
                        if isinstance(outcome, httpx.Response):
                            return outcome
                        raise outcome
                if timer is not None and timer.done():
                    timer = None
                    if sent < limit and may_copy():
                        send(_DELAY)
                if fresh:
                    continue
                if timer is None and sent < limit:
                    timer = tasks.spawn(clock.sleep, self._delay)
                waiting: list[Task[Any]] = [*running]
                if timer is not None:
                    waiting.append(timer)
                await tasks.wait_any(waiting)
        finally:
            await _end(tasks, running, timer, last)

    async def _attempt(self, request: httpx.Request, call: Call) -> httpx.Response:
        telemetry = self._telemetry
        report = telemetry.wants_attempts
        started = self._clock.monotonic() if report else 0.0
        try:
            response = await self._next.handle(request, call)
        except FAILURE_EXCEPTIONS as exc:
            if report:
                ended = self._clock.monotonic()
                telemetry.attempt(
                    call.method,
                    call.host,
                    call.attempt,
                    type(exc).__name__,
                    ended - started,
                )
            raise
        if report:
            telemetry.attempt(
                call.method,
                call.host,
                call.attempt,
                str(response.status_code),
                self._clock.monotonic() - started,
            )
        return response


async def _end(
    tasks: Tasks,
    running: dict[Task[httpx.Response], int],
    timer: Task[None] | None,
    last: httpx.Response | Exception | None,
) -> None:
    """Cancel the losers and the timer, wait for them, close what they answered."""
    ending: list[Task[Any]] = [*running]
    if timer is not None:
        ending.append(timer)
    for task in ending:
        task.cancel()
    with tasks.ending():
        if ending:
            # The losers' clean-up (a connection closed, an inner timeout's
            # bookkeeping) is done before the call returns.
            await tasks.wait_all(ending)
        for task in running:
            if task.cancelled():
                continue
            if task.exception() is None:  # answered before it could be cancelled
                await close_quietly(task.result())
        if isinstance(last, httpx.Response):
            await close_quietly(last)
