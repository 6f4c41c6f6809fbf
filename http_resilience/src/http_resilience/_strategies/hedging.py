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

On asyncio the attempts and the timer are asyncio tasks; on trio (any library
but asyncio: `asyncio_loop`) they run in an anyio task group, each in a cancel
scope of its own (`_GroupTasks`), which the call leaves only once they ended.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Coroutine, Iterable
from datetime import timedelta
from typing import TYPE_CHECKING, Any, ClassVar, Final, Generic, Protocol, TypeVar, cast

import anyio
import anyio.lowlevel
import httpx
from pydantic import BaseModel, Field

from http_resilience._core.backend import asyncio_loop
from http_resilience._core.builder import BuildContext, Placement
from http_resilience._core.classify import (
    FAILURE_EXCEPTIONS,
    LOCAL_REFUSALS,
    SELF_CAUSED_EXCEPTIONS,
    is_failure_status,
    is_invalid_status,
    is_replayable,
    mark_final,
)
from http_resilience._core.clock import Clock, checkpoint
from http_resilience._core.errors import TotalTimeoutError
from http_resilience._core.fields import FROZEN, Count
from http_resilience._core.nested import RETRY_EXHAUSTED_HEADER
from http_resilience._core.pipeline import AsyncHandler, Call, charged, close_quietly
from http_resilience._core.telemetry import Telemetry
from http_resilience._primitives.durations import Duration, DurationInput

if TYPE_CHECKING:
    from anyio.abc import TaskGroup

__all__ = [
    "DEFAULT_HEDGING_DELAY",
    "DEFAULT_MAX_HEDGED_ATTEMPTS",
    "HEDGED_METHODS",
    "REFUSALS",
    "HedgingOptions",
    "HedgingStrategy",
    "is_hedged",
]

HEDGED_METHODS: Final = frozenset({"GET", "HEAD", "OPTIONS", "TRACE"})
"""The safe methods: two copies in flight change nothing on the server. PUT and
DELETE are idempotent in sequence, not in parallel, and are not hedged."""

REFUSALS: Final = LOCAL_REFUSALS
"""What a copy raises when a strategy inside the hedging refused to send it. A
half-open breaker refuses every copy but its probe, so a hedge of the probe's
own call is refused while the probe is in flight."""

_DELAY: Final = "delay"
_EXHAUSTED: Final = RETRY_EXHAUSTED_HEADER.lower()


def is_hedged(request: httpx.Request) -> bool:
    """Whether hedging may send `request` more than once.

    Its method must be safe (`HEDGED_METHODS`) and its body replayable.
    """
    return request.method in HEDGED_METHODS and is_replayable(request.stream)


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
            return await self._race(request, call, _AsyncioTasks(loop))
        outcome: httpx.Response | Exception | None = None
        async with anyio.create_task_group() as group:
            try:
                outcome = await self._race(request, call, _GroupTasks(group))
            except Exception as exc:
                # Raised outside the group: inside, it would come out of the
                # group wrapped in an exception group.
                outcome = exc
        if isinstance(outcome, Exception):
            raise outcome
        assert outcome is not None  # the group raises, or the race ended
        return outcome

    async def _race(
        self, request: httpx.Request, call: Call, tasks: _Tasks
    ) -> httpx.Response:
        clock = self._clock
        started = clock.monotonic()
        running: dict[_Task[httpx.Response], int] = {}
        timer: _Task[None] | None = None
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
                waiting: list[_Task[Any]] = [*running]
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
    tasks: _Tasks,
    running: dict[_Task[httpx.Response], int],
    timer: _Task[None] | None,
    last: httpx.Response | Exception | None,
) -> None:
    """Cancel the losers and the timer, wait for them, close what they answered."""
    ending: list[_Task[Any]] = [*running]
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


T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)


class _Task(Protocol[T_co]):
    """What the race reads of an attempt or the timer: an `asyncio.Task`'s part."""

    def done(self) -> bool: ...
    def cancelled(self) -> bool: ...
    def result(self) -> T_co: ...
    def exception(self) -> BaseException | None: ...
    def cancel(self) -> object: ...


class _Tasks(Protocol):
    """Where the race runs its attempts and its timer: asyncio, or an anyio group."""

    def spawn(self, run: Callable[..., Coroutine[Any, Any, T]], *args: Any) -> _Task[T]:
        """Start `run(*args)` beside the caller."""
        ...

    async def first_turn(self) -> None:
        """Wait until the task spawned last has run once (up to its first wait)."""
        ...

    async def wait_any(self, tasks: Iterable[_Task[Any]]) -> None:
        """Wait until one of `tasks` is done (at once if one is)."""
        ...

    async def wait_all(self, tasks: Iterable[_Task[Any]]) -> None:
        """Wait until all of `tasks` are done."""
        ...

    def ending(self) -> contextlib.AbstractContextManager[object]:
        """Where the clean-up runs: shielded off asyncio, from a cancel again."""
        ...


class _AsyncioTasks:
    """`_Tasks` on asyncio: tasks of the running loop."""

    __slots__ = ("_loop",)

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop

    def spawn(self, run: Callable[..., Coroutine[Any, Any, T]], *args: Any) -> _Task[T]:
        return self._loop.create_task(run(*args))

    async def first_turn(self) -> None:
        # The loop runs the new task before the caller comes back.
        await checkpoint()

    async def wait_any(self, tasks: Iterable[_Task[Any]]) -> None:
        waiting = cast("list[asyncio.Task[Any]]", [*tasks])
        await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)

    async def wait_all(self, tasks: Iterable[_Task[Any]]) -> None:
        waiting = cast("list[asyncio.Task[Any]]", [*tasks])
        await asyncio.wait(waiting)

    def ending(self) -> contextlib.AbstractContextManager[object]:
        # A cancel is delivered once on asyncio: the clean-up runs as it is.
        return contextlib.nullcontext()


class _GroupTask(Generic[T]):
    """One attempt (or the timer) in an anyio task group, in a scope of its own."""

    __slots__ = ("_done", "_error", "_result", "_scope", "_tasks", "began")

    def __init__(self, tasks: _GroupTasks) -> None:
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


class _GroupTasks:
    """`_Tasks` off asyncio (trio): an anyio task group the race runs inside."""

    __slots__ = ("_group", "_last", "_woken")

    def __init__(self, group: TaskGroup) -> None:
        self._group = group
        self._woken = anyio.Event()
        self._last: _GroupTask[Any] | None = None

    def spawn(self, run: Callable[..., Coroutine[Any, Any, T]], *args: Any) -> _Task[T]:
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

    async def wait_any(self, tasks: Iterable[_Task[Any]]) -> None:
        waiting = [*tasks]
        while not any(task.done() for task in waiting):
            self._woken = anyio.Event()
            await self._woken.wait()

    async def wait_all(self, tasks: Iterable[_Task[Any]]) -> None:
        waiting = [*tasks]
        while not all(task.done() for task in waiting):
            self._woken = anyio.Event()
            await self._woken.wait()

    def ending(self) -> contextlib.AbstractContextManager[object]:
        # Trio delivers a cancel at every checkpoint: the losers are waited
        # for and their answers closed, shielded, once they were cancelled.
        return anyio.CancelScope(shield=True)


DEFAULT_HEDGING_DELAY: Final = timedelta(seconds=2)
DEFAULT_MAX_HEDGED_ATTEMPTS: Final = 1


class HedgingOptions(BaseModel):
    """Hedging: a second attempt when the first is slow, the first good answer wins.

    Only safe methods are hedged: GET, HEAD, OPTIONS and TRACE. PUT and DELETE
    are idempotent but not safe: two copies in flight at once may interleave
    with other writers, and a cancelled copy may still reach the server after
    the call has returned. They, and every other method, are sent once, as is
    a request whose body cannot be replayed.

    Attributes:
        delay: How long an attempt may go without an answer before the next
            hedged attempt is sent beside it. Default 2 s.
        max_hedged_attempts: Attempts sent beyond the first, at most; at most
            ``max_hedged_attempts + 1`` are in flight. Default 1.

    Durations accept a `timedelta`, a number of seconds, ``"200ms"``, ``"2s"``,
    ``"5m"``, ``"1h"`` or ISO 8601 (``"PT0.2S"``), up to 24 days.

    Raises:
        pydantic.ValidationError: On construction, naming every invalid field.

    Example:
        >>> HedgingOptions(delay="200ms").max_hedged_attempts
        1
    """

    model_config = FROZEN

    delay: Duration = Field(default=DEFAULT_HEDGING_DELAY, gt=timedelta(0))
    max_hedged_attempts: Count = Field(default=DEFAULT_MAX_HEDGED_ATTEMPTS, ge=1)

    if TYPE_CHECKING:
        # Durations in every form pydantic reads; see `HttpResilienceOptions`.
        def __init__(
            self,
            *,
            delay: DurationInput = DEFAULT_HEDGING_DELAY,
            max_hedged_attempts: int = DEFAULT_MAX_HEDGED_ATTEMPTS,
        ) -> None: ...

    is_deadline: ClassVar[bool] = False
    repeats: ClassVar[bool] = True

    @property
    def label(self) -> str:
        """``"hedging"``."""
        return "hedging"

    @property
    def waits_outside_attempts(self) -> bool:
        """Yes: its attempts run in tasks of its own, and it waits for them.

        So a deadline around it cuts its own task.
        """
        return True

    def will_repeat(self, request: httpx.Request) -> bool:
        """Whether hedging may send `request` more than once (`is_hedged`)."""
        return is_hedged(request)

    def build_async(
        self, next: AsyncHandler, context: BuildContext, place: Placement
    ) -> HedgingStrategy:
        """Hedging around `next`.

        There is no sync hedging: a blocking attempt cannot be cancelled, so a
        hedge's loser would run on to its end.
        """
        return HedgingStrategy(
            next,
            delay=self.delay.total_seconds(),
            max_hedged_attempts=self.max_hedged_attempts,
            clock=context.clock,
            telemetry=context.telemetry,
        )
