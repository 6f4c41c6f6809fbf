"""Worker threads for plain-def handlers and sync units of work under `send`.

A `Lane` is the worker thread of one request scope (or of one call outside a
scope). It runs calls one after another, each in a copy of the caller's
context (correlation id, principal, request scope, deadline: every context
variable). A request scope that runs sync work takes one lane for its whole
life, so the handler, the sync unit of work's begin, commit and rollback, and
the scope's cleanups (closing a sync `Session`) all run on the same thread, in
order: a connection that must stay on the thread that opened it (SQLite's
``check_same_thread``) is fine, and a rollback after a cancelled send never
runs while the abandoned handler still uses the session.

At most `THREAD_LIMIT` lanes are busy at once in a process. A lane takes its
slot at its first call and gives it back when it is released and its thread
has finished the calls queued before; a send that needs a lane while all are
busy waits on its event loop, cancellably, for the first one given back, in
the order they asked. A lane already held is never waited for again: the
nested sends of a scope that holds one use it, and a call made from a
coroutine that a lane's thread is blocked on (through
``anyio.from_thread.run``, say) takes its slot at once, over the limit, since
the slot it would wait for may be the very one blocking.

Threads are pooled: an idle one is reused (up to `MAX_IDLE_LANES` are kept),
so a send pays for a thread hop (tens of microseconds), not a thread start.

Under asyncio the result comes back through a future of the running loop.
Under any other event loop (trio, through anyio) an anyio worker thread waits
for the lane's call; anyio is imported only then.

One concept: slots, lanes and pooled workers share one lock and one set of
invariants (who holds a slot, who may wait for one), kept in one module.
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections import deque
from collections.abc import Callable
from contextlib import suppress
from contextvars import Context, ContextVar, copy_context
from queue import SimpleQueue
from typing import Any, Final, TypeVar

from mediator._core.errors import SyncPathError
from mediator._core.scope import ScopeState, active_scope

__all__ = [
    "MAX_IDLE_LANES",
    "THREAD_LIMIT",
    "Lane",
    "Slots",
    "acquire_lane",
    "build_and_handle",
    "in_thread",
    "scope_lane",
]

T = TypeVar("T")

THREAD_LIMIT: Final = 40
"""Lanes (worker threads) busy at once per process: anyio's default thread
limit, and so Starlette's. Fixed: the threads are the process's, shared by
every mediator in it."""

MAX_IDLE_LANES: Final = 16
"""Idle worker threads kept for reuse; one more that becomes idle ends."""

_Settle = Callable[[bool, Any], None]
_Wake = Callable[[], bool]

# The lane whose thread runs the current call: set inside each call's context.
_running_in: ContextVar[Lane | None] = ContextVar("mediator_lane", default=None)

_PENDING = object()  # key of a scope's lane while it waits for its first slot


class Slots:
    """The busy lanes of the process, and the lanes waiting for a slot.

    Shared by every thread and event loop: a slot is given back by the worker
    thread that finished with it, and handed to the lane that asked first.
    """

    __slots__ = ("busy", "limit", "lock", "queue")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.busy = 0
        self.lock = threading.Lock()
        self.queue: deque[_Ticket] = deque()

    def give(self) -> None:
        """Give a slot back; the first lane waiting that can still use it gets it."""
        with self.lock:
            self.busy -= 1
            while self.queue and self.busy < self.limit:
                if self.queue.popleft().grant():
                    self.busy += 1


class _Ticket:
    """A lane's place in the queue for a slot, and the calls waiting on it."""

    __slots__ = ("granted", "wakes")

    def __init__(self) -> None:
        self.granted = False
        self.wakes: list[_Wake] = []

    def grant(self) -> bool:
        """Hand the slot over (under the lock); False if no caller can take it."""
        # A wake fails when its loop has closed: nobody is left to use the slot.
        self.wakes = [wake for wake in self.wakes if wake()]
        self.granted = bool(self.wakes)
        return self.granted


_slots = Slots(THREAD_LIMIT)


class Lane:
    """The worker thread of a request scope, or of one call: taken when first used.

    Made by `scope_lane` or `acquire_lane`; given back with `release`, which
    takes effect once the calls queued before it have run.
    """

    __slots__ = ("_closed", "_owner", "_slots", "_ticket", "_worker")

    def __init__(self, owner: ScopeState | None = None) -> None:
        self._owner = owner
        self._worker: _Worker | None = None
        self._ticket: _Ticket | None = None
        self._slots = _slots
        self._closed = False

    async def run(self, function: Callable[..., T], *args: Any) -> T:
        """Run ``function(*args)`` on the lane's thread and return its result.

        The first call takes a slot, waiting (cancellably, without blocking
        the event loop) while `THREAD_LIMIT` lanes are busy. If the awaiting
        task is cancelled once the call has started, the call still runs to
        its end on the thread (a thread cannot be stopped) and its result or
        failure is dropped; a later call on the lane waits for it.

        Raises:
            SyncPathError: Called from a coroutine that the lane's own running
                call is waiting for, which would wait for itself.
        """
        if _running_in.get() is self:
            raise SyncPathError(
                "a plain-def handler (or sync unit of work) waits for an async "
                "send of its own request, which needs the thread it is blocking: "
                "call mediator.send_sync(...) from the handler instead"
            )
        worker = self._worker
        if worker is None:
            worker = None if self._closed else await self._start()
            if worker is None:  # released meanwhile: a call left over from its scope
                return await _once(function, args)
        return await worker.run(self, function, args)

    def release(self) -> None:
        """Give the lane back once the calls queued so far have run."""
        self._closed = True
        worker, self._worker = self._worker, None
        if worker is not None:
            worker.release(self._slots)

    async def _start(self) -> _Worker | None:
        """A worker for the lane, once it holds a slot; None if it was released."""
        slots = self._slots = _slots
        nested = _running_in.get() is not None
        with slots.lock:
            ticket = self._ticket
            if ticket is not None and ticket.granted:
                # The slot was handed to the lane, its waiting call not yet
                # back: this call uses it, and that one finds the worker.
                self._ticket = None
                waiting = None
            elif nested or (
                ticket is None and slots.busy < slots.limit and not slots.queue
            ):
                slots.busy += 1
                if ticket is not None:
                    # A call from a blocked thread took a slot at once: the calls
                    # of the lane waiting in the queue no longer need one.
                    self._ticket = None
                    slots.queue.remove(ticket)
                    ticket.grant()
                waiting = None
            else:
                if ticket is None:
                    ticket = self._ticket = _Ticket()
                    slots.queue.append(ticket)
                wake, wait = _waiter()
                ticket.wakes.append(wake)
                waiting = ticket, wake, wait
        if waiting is None:
            return self._begin(slots)
        ticket, wake, wait = waiting
        try:
            await wait()
        except BaseException:
            self._leave(slots, ticket, wake)
            raise
        with slots.lock:
            ticket.wakes.remove(wake)
            mine = self._ticket is ticket  # no other call of the lane used the slot
            if mine:
                self._ticket = None
        return self._begin(slots) if mine else self._worker

    def _begin(self, slots: Slots) -> _Worker | None:
        """Start the lane on a worker with the slot it now holds."""
        if self._closed:
            slots.give()
            return None
        worker = self._worker = _take_worker()
        owner = self._owner
        if owner is not None:
            owner.lane = self
            owner.pop(_PENDING, None)
        return worker

    def _leave(self, slots: Slots, ticket: _Ticket, wake: _Wake) -> None:
        """A waiting call was cancelled: drop its wait, and a slot no call uses."""
        with slots.lock:
            ticket.wakes.remove(wake)
            if ticket.wakes or self._ticket is not ticket:
                return  # other calls still wait, or one of them took the slot
            self._ticket = None
            if not ticket.granted:
                slots.queue.remove(ticket)
                return
        slots.give()


def _waiter() -> tuple[_Wake, Callable[[], Any]]:
    """A wake callable (from any thread, under the lock) and the wait it ends."""
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        loop = None
    if loop is not None:
        future: asyncio.Future[None] = loop.create_future()

        def wake() -> bool:
            try:
                loop.call_soon_threadsafe(_resolve, future)
            except RuntimeError:  # the loop closed
                return False
            return True

        return wake, lambda: future

    event = threading.Event()

    def wake_thread() -> bool:
        event.set()
        return True

    async def wait() -> None:
        to_thread = _anyio_to_thread()
        try:
            await to_thread.run_sync(event.wait, abandon_on_cancel=True)
        finally:
            event.set()  # an abandoned wait must not keep its thread

    return wake_thread, wait


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


async def _once(function: Callable[..., T], args: tuple[Any, ...]) -> T:
    lane = Lane()
    try:
        return await lane.run(function, *args)
    finally:
        lane.release()


_Job = tuple[Context, Lane, Callable[..., Any], tuple[Any, ...], _Settle] | Slots


class _Worker:
    """One thread running calls in order, each in its caller's context."""

    __slots__ = ("_jobs", "_thread")

    def __init__(self) -> None:
        self._jobs: SimpleQueue[_Job] = SimpleQueue()
        self._thread = threading.Thread(
            target=self._work, name=f"mediator-worker-{next(_names)}", daemon=True
        )
        self._thread.start()

    async def run(
        self, lane: Lane, function: Callable[..., T], args: tuple[Any, ...]
    ) -> T:
        context = copy_context()
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return await self._run_elsewhere(context, lane, function, args)
        future: asyncio.Future[T] = loop.create_future()

        def settle(ok: bool, value: Any) -> None:
            # The loop may have closed meanwhile: then nobody is waiting.
            with suppress(RuntimeError):
                loop.call_soon_threadsafe(_settle, future, ok, value)

        self._jobs.put((context, lane, function, args, settle))
        return await future

    def release(self, slots: Slots) -> None:
        """Back to the pool once the calls queued so far have run; then the slot."""
        self._jobs.put(slots)

    async def _run_elsewhere(
        self,
        context: Context,
        lane: Lane,
        function: Callable[..., T],
        args: tuple[Any, ...],
    ) -> T:
        to_thread = _anyio_to_thread()
        done = threading.Event()
        outcome: list[Any] = []

        def settle(ok: bool, value: Any) -> None:
            outcome[:] = [ok, value]
            done.set()

        self._jobs.put((context, lane, function, args, settle))
        await to_thread.run_sync(done.wait, abandon_on_cancel=True)
        ok, value = outcome
        if ok:
            return value  # type: ignore[no-any-return]
        raise value

    def _work(self) -> None:
        while True:
            job = self._jobs.get()
            if isinstance(job, Slots):
                # Idle first, then the slot: the call it lets go finds this thread.
                parked = _park(self)
                job.give()
                if parked:
                    continue
                return
            context, lane, function, args, settle = job
            try:
                value = context.run(_call, lane, function, args)
            except BaseException as error:  # handed to the caller, whatever it is
                settle(False, _raisable(error))
            else:
                settle(True, value)
            del job, context, lane, function, args, settle  # nothing kept while idle


def _anyio_to_thread() -> Any:
    try:
        from anyio import to_thread
    except ImportError:  # pragma: no cover - anyio is a dev dependency here
        raise RuntimeError(
            "a plain-def handler under await mediator.send(...) needs asyncio, "
            "or anyio installed for another event loop (trio): install anyio, "
            "or make handle() async"
        ) from None
    return to_thread


def _call(lane: Lane, function: Callable[..., Any], args: tuple[Any, ...]) -> Any:
    _running_in.set(lane)  # in this call's own copy of the context
    return function(*args)


def _settle(future: asyncio.Future[Any], ok: bool, value: Any) -> None:
    if future.done():  # cancelled: the result is dropped
        return
    if ok:
        future.set_result(value)
    else:
        future.set_exception(value)


def _raisable(error: BaseException) -> BaseException:
    # A future refuses StopIteration; asyncio.to_thread turns it into this too.
    if isinstance(error, StopIteration):
        failure = RuntimeError("a plain-def handler raised StopIteration")
        failure.__cause__ = error
        return failure
    return error


_idle: list[_Worker] = []
_idle_lock = threading.Lock()
_names = iter(range(1, 1 << 62))


def _park(worker: _Worker) -> bool:
    """Keep a released worker for reuse; False when enough are idle (it ends)."""
    with _idle_lock:
        if len(_idle) < MAX_IDLE_LANES:
            _idle.append(worker)
            return True
    return False


def _take_worker() -> _Worker:
    with _idle_lock:
        if _idle:
            return _idle.pop()
    return _Worker()


def acquire_lane() -> Lane:
    """A lane for calls outside a request scope; `Lane.release` gives it back."""
    return Lane()


def scope_lane(state: ScopeState) -> Lane:
    """The lane of a request scope, made when first asked for; released at its end.

    The scope holds it (``state.lane``) from its first call on, once it has a
    slot; a scope whose lane never got one has nothing to release.
    """
    lane: Lane | None = state.lane
    if lane is None:
        lane = state.get(_PENDING)
        if lane is None:
            lane = state[_PENDING] = Lane(state)
    return lane


async def in_thread(function: Callable[..., T], *args: Any) -> T:
    """Run ``function(*args)`` in a worker thread, in a copy of this context.

    Inside a request scope, on the scope's lane; outside one, on a lane taken
    for this call only.
    """
    state = active_scope()
    if state is not None:
        return await scope_lane(state).run(function, *args)
    return await _once(function, args)


def build_and_handle(make: Callable[[], Any], message: Any) -> Any:
    """Build a handler with `make` and call its plain-def ``handle``: in a thread."""
    return make().handle(message)


def _forget_after_fork() -> None:
    # A child process has none of its parent's threads: idle workers would never
    # run a call there, the slots they held are not busy, and a lock may have
    # been held by one of them.
    global _idle_lock, _slots
    _idle_lock = threading.Lock()
    _idle.clear()
    _slots = Slots(_slots.limit)


os.register_at_fork(after_in_child=_forget_after_fork)
