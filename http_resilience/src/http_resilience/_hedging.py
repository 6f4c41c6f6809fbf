"""`HedgingStrategy`: a second attempt beside a slow first, the first good answer wins.

Hedging is the alternative to retry for tail latency: where the retry waits for
an attempt to fail, hedging sends another copy while the first is still in
flight, and takes whichever answers well first. Each attempt runs in a task of
its own, with its own copy of the `Call`, so the strategies inside (a timeout,
a breaker) see one attempt each; the losers' tasks are cancelled and their
responses closed before the winner is returned.

The delay is spent on the pipeline's clock. Before arming it the strategy
gives a fresh attempt one turn of the event loop, so an attempt that answers
at once (a cache, a `MockTransport`) never starts a timer.
"""

from __future__ import annotations

import asyncio
from typing import Any, Final

import httpx

from http_resilience._classify import (
    FAILURE_EXCEPTIONS,
    is_failure_status,
    is_replayable,
)
from http_resilience._clock import Clock, checkpoint
from http_resilience._errors import BrokenCircuitError, RateLimitedError
from http_resilience._pipeline import Call, Handler, close_quietly
from http_resilience._telemetry import Telemetry

__all__ = ["HEDGED_METHODS", "REFUSALS", "HedgingStrategy", "is_hedged"]

HEDGED_METHODS: Final = frozenset({"GET", "HEAD", "OPTIONS", "TRACE"})
"""The safe methods: two copies in flight change nothing on the server. PUT and
DELETE are idempotent in sequence, not in parallel, and are not hedged."""

REFUSALS: Final = (BrokenCircuitError, RateLimitedError)
"""What a copy raises when a strategy inside the hedging refused to send it. A
half-open breaker refuses every copy but its probe, so a hedge of the probe's
own call is refused while the probe is in flight."""

_DELAY: Final = "delay"


def is_hedged(request: httpx.Request) -> bool:
    """Whether hedging may send `request` more than once.

    Its method must be safe (`HEDGED_METHODS`) and its body replayable.
    """
    return request.method in HEDGED_METHODS and is_replayable(request.stream)


class HedgingStrategy:
    """Sends up to `max_hedged_attempts` more copies of a slow safe request.

    After `delay` seconds without an answer, the next attempt is sent beside
    the ones in flight; an attempt that fails (a failure status, or an
    exception in `FAILURE_EXCEPTIONS`) has the next one sent at once. The first
    attempt that answers without failing wins: the others are cancelled and
    their responses closed. When every attempt fails, the last to end decides,
    as in the retry: its response is returned, its exception raised. A copy
    refused before it was sent (`REFUSALS`: a breaker or a limiter inside the
    hedging) is no answer: while another copy is in flight the call waits for
    that one, and the refusal ends the call only when no copy is left. Any
    other exception (a timeout around the hedging, a bug) ends the call at
    once.

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
        next: Handler,
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

    def handle_sync(self, request: httpx.Request, call: Call) -> httpx.Response:
        """Refused: a blocking attempt cannot be cancelled, so no hedge could lose.

        Raises:
            TypeError: Always; the sync transports refuse hedging when built.
        """
        raise TypeError(
            f"{call.where()}: hedging needs the async transport; a sync attempt "
            "cannot be cancelled"
        )

    async def _hedge(self, request: httpx.Request, call: Call) -> httpx.Response:
        loop = asyncio.get_running_loop()
        clock = self._clock
        started = clock.monotonic()
        running: dict[asyncio.Task[httpx.Response], int] = {}
        timer: asyncio.Task[None] | None = None
        last: httpx.Response | Exception | None = None
        sent = 0
        fresh = False

        def send(reason: str | None) -> None:
            nonlocal sent, fresh
            sent += 1
            if reason is not None:
                after = clock.monotonic() - started
                self._telemetry.hedge(call.method, call.host, sent, after, reason)
            task = loop.create_task(self._attempt(request, call.fork(sent)))
            running[task] = sent
            fresh = True

        try:
            send(None)
            while True:
                if fresh:
                    fresh = False
                    # The new attempt's first turn: one that answers at once
                    # is seen before any timer is armed.
                    await checkpoint()
                finished = sorted(
                    (task for task in running if task.done()), key=running.__getitem__
                )
                for task in finished:
                    del running[task]
                    try:
                        outcome: httpx.Response | Exception = task.result()
                    except Exception as exc:
                        outcome = exc
                    if isinstance(outcome, httpx.Response):
                        if not is_failure_status(outcome.status_code):
                            return outcome
                        reason = str(outcome.status_code)
                    elif isinstance(outcome, FAILURE_EXCEPTIONS):
                        reason = type(outcome).__name__
                    elif running and isinstance(outcome, REFUSALS):
                        # Never sent, so no answer: the copies in flight go
                        # on. Ending the call here would cancel them, the
                        # probe of a half-open breaker among them.
                        continue
                    else:
                        raise outcome
                    if isinstance(last, httpx.Response):
                        await close_quietly(last)
                    last = outcome
                    if sent < self._limit:
                        # A failure is an answer: the next copy goes at once.
                        if timer is not None:
                            timer.cancel()
                            timer = None
                        send(reason)
                    elif not running:
                        # Every attempt failed: the last to end decides.
                        last = None
                        if isinstance(outcome, httpx.Response):
                            return outcome
                        raise outcome
                if timer is not None and timer.done():
                    timer = None
                    send(_DELAY)
                if fresh:
                    continue
                if timer is None and sent < self._limit:
                    timer = loop.create_task(clock.sleep(self._delay))
                waiting: list[asyncio.Future[Any]] = [*running]
                if timer is not None:
                    waiting.append(timer)
                await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
        finally:
            await _end(running, timer, last)

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
    running: dict[asyncio.Task[httpx.Response], int],
    timer: asyncio.Task[None] | None,
    last: httpx.Response | Exception | None,
) -> None:
    """Cancel the losers and the timer, wait for them, close what they answered."""
    tasks: list[asyncio.Task[Any]] = [*running]
    if timer is not None:
        tasks.append(timer)
    for task in tasks:
        task.cancel()
    if tasks:
        # The losers' clean-up (a connection closed, an inner timeout's
        # bookkeeping) is done before the call returns.
        await asyncio.wait(tasks)
    for task in running:
        if task.cancelled():
            continue
        if task.exception() is None:  # answered before it could be cancelled
            await close_quietly(task.result())
    if isinstance(last, httpx.Response):
        await close_quietly(last)
