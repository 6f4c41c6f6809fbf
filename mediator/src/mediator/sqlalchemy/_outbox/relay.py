"""`OutboxRelay`: delivers the outbox's committed messages, at least once.

Each round claims due messages with a lease (one short transaction), delivers
them outside any transaction (through the mediator, or a `Handoff` to a
queue), and records each outcome in a short transaction of its own. A lease
that runs out (the relay was killed) makes its messages due again; while a
delivery runs, its lease is renewed, so no other relay takes it then.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import threading
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from typing import Any, Final, Protocol, TypeVar, cast, runtime_checkable

from sqlalchemy import Connection, Engine, exc
from sqlalchemy.ext.asyncio import AsyncEngine

from mediator._core.clock import SystemClock, SystemWallClock, WallClock
from mediator._core.errors import SyncPathError
from mediator._dispatch.mediator import Mediator
from mediator._dispatch.outbox import delivered, delivered_sync, error_summary, is_final
from mediator._primitives.backoff import delays_problem, exponential, jitter_factor
from mediator._primitives.durations import MAX_DURATION, in_seconds
from mediator.sqlalchemy._errors import translate_error
from mediator.sqlalchemy._idempotency.sql import own_options
from mediator.sqlalchemy._outbox import sql
from mediator.sqlalchemy._outbox.recorder import doorbell
from mediator.sqlalchemy._outbox.sql import Claimed, OutboxMessage, OutboxStats
from mediator.sqlalchemy._outbox.table import (
    DEAD,
    DELIVERED,
    PENDING,
    ensure_outbox_table,
)
from mediator.sqlalchemy._postgres import prepare_postgres
from mediator.sqlalchemy._sqlite import prepare_sqlite

__all__ = ["AsyncHandoff", "Handoff", "OutboxRelay"]

T = TypeVar("T")
_log: Final = logging.getLogger("mediator.outbox")
_SLEEPER: Final = SystemClock()  # the lease keeper's real waits
_LONGEST_RETENTION: Final = timedelta(days=36_500)
_DELIVERED: Final[dict[str, Any]] = {"state": DELIVERED}


@runtime_checkable
class Handoff(Protocol):
    """Hands a message to a queue you already run, instead of delivering it.

    Return once the queue has it (durably): the message is then delivered,
    as far as the outbox is concerned. Raise to have it tried again later.
    `mediator.redis.StreamHandoff` is one.
    """

    def hand_off(self, message: OutboxMessage) -> None:
        """Put `message` on the queue."""
        ...


@runtime_checkable
class AsyncHandoff(Protocol):
    """`Handoff` for `OutboxRelay.run` and `run_once`: awaited."""

    async def ahand_off(self, message: OutboxMessage) -> None:
        """Put `message` on the queue."""
        ...


def _positive(name: str, value: object, longest: timedelta = MAX_DURATION) -> None:
    """Refuse a duration that is not a positive timedelta of at most `longest`.

    A longer one would overflow a datetime at the first round, not here.
    """
    if not isinstance(value, timedelta) or not timedelta(0) < value <= longest:
        raise ValueError(
            f"OutboxRelay({name}=...) must be a positive timedelta, got {value!r} "
            f"(at most {in_seconds(longest)})"
        )


def _dead_step(limit: int) -> Callable[[Connection], list[OutboxMessage]]:
    _count("limit", limit)
    return lambda c: sql.dead_messages(c, limit=limit)


def _count(name: str, value: object) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(
            f"OutboxRelay({name}=...) must be an int of at least 1, got {value!r}"
        )


class OutboxRelay:
    """Delivers the messages `mediator.Outbox` recorded, after their commit.

    A round (`run_once`) claims up to `batch` due messages with a lease of
    `lease`, delivers them, up to `concurrency` at once (messages with one
    ordering key one after another, in the order recorded), and records each
    outcome. Delivery sends the message through `mediator` under
    ``idempotency_key(message id)``, acting as the principal that recorded it,
    so an ``@idempotent`` command applies it once however often it comes;
    given a `handoff`, it puts the message on your queue instead.

    A delivery that fails is tried again after ``base_delay * 2**(n-1)``
    (jittered, at most `max_delay`), up to `max_attempts` deliveries; then the
    message is dead. A domain error (or a message no handler takes) makes it
    dead at once. A dead message stays until `redeliver`; nothing is dropped.

    On PostgreSQL, several relays (in several processes) share the table: the
    claim reads ``FOR UPDATE SKIP LOCKED``, so no two deliver one message at
    once. On SQLite, the embedded default, run one relay per database.

    Args:
        mediator: The mediator that delivers; it must have the handlers of
            the messages (register the modules that define them).
        engine: The database's `Engine` or `AsyncEngine`, the one the outbox
            writes to. With an `Engine`, `run` runs the database calls in a
            worker thread; `run_sync` needs an `Engine`.
        batch: Messages claimed per round.
        lease: How long a claim holds a message before another relay may take
            it; renewed every third of it while the delivery runs.
        max_attempts: Deliveries before a message is dead.
        base_delay: The wait before the second delivery.
        max_delay: The longest wait between deliveries.
        concurrency: Deliveries running at once.
        poll_interval: The wait between rounds that found nothing due; a
            commit in this process that records a message ends it early.
        handoff: A `Handoff` (and, for `run`, an `AsyncHandoff`) to a queue.
        clock: The wall clock (a fake one in tests).
        random: The jitter's random source, a float in [0, 1).

    Raises:
        TypeError: An argument of the wrong kind.
        ValueError: A bound that is not positive, or `base_delay` over
            `max_delay`; a database other than SQLite and PostgreSQL.

    Example:
        >>> relay = OutboxRelay(mediator, engine)  # doctest: +SKIP
        >>> task = asyncio.create_task(relay.run())  # doctest: +SKIP
    """

    def __init__(
        self,
        mediator: Mediator,
        engine: Engine | AsyncEngine,
        *,
        batch: int = 100,
        lease: timedelta = timedelta(seconds=30),
        max_attempts: int = 10,
        base_delay: timedelta = timedelta(seconds=1),
        max_delay: timedelta = timedelta(minutes=10),
        concurrency: int = 8,
        poll_interval: timedelta = timedelta(seconds=1),
        handoff: Handoff | AsyncHandoff | None = None,
        clock: WallClock | None = None,
        random: Callable[[], float] = random.random,
    ) -> None:
        if not isinstance(cast(object, mediator), Mediator):
            raise TypeError(
                "OutboxRelay(mediator=...) takes a Mediator, got "
                f"{type(mediator).__qualname__}"
            )
        if not isinstance(cast(object, engine), Engine | AsyncEngine):
            raise TypeError(
                "OutboxRelay(engine=...) takes an Engine or an AsyncEngine, got "
                f"{type(engine).__qualname__}"
            )
        for name, count in (
            ("batch", batch),
            ("max_attempts", max_attempts),
            ("concurrency", concurrency),
        ):
            _count(name, count)
        for name, duration in (
            ("lease", lease),
            ("base_delay", base_delay),
            ("max_delay", max_delay),
            ("poll_interval", poll_interval),
        ):
            _positive(name, duration)
        problem = delays_problem(base_delay, max_delay)
        if problem is not None:
            raise ValueError(f"OutboxRelay: {problem}")
        if handoff is not None and not isinstance(
            cast(object, handoff), Handoff | AsyncHandoff
        ):
            raise TypeError(
                "OutboxRelay(handoff=...) takes a Handoff (hand_off(message)) or an "
                f"AsyncHandoff (ahand_off(message)), got {type(handoff).__qualname__}"
            )
        if clock is not None and not isinstance(cast(object, clock), WallClock):
            raise TypeError(
                "OutboxRelay(clock=...) takes a WallClock (now()), got "
                f"{type(clock).__qualname__}"
            )
        if not callable(random):
            raise TypeError("OutboxRelay(random=...) takes a callable returning [0, 1)")
        sync_engine = engine.sync_engine if isinstance(engine, AsyncEngine) else engine
        self._options = own_options("OutboxRelay", sync_engine.dialect.name)
        prepare_sqlite(engine)
        prepare_postgres(engine)
        self._mediator = mediator
        self._engine = engine
        self._batch = batch
        self._lease = lease
        self._max_attempts = max_attempts
        self._base = base_delay.total_seconds()
        self._cap = max_delay.total_seconds()
        self._concurrency = concurrency
        self._poll = poll_interval.total_seconds()
        self._handoff = handoff
        self._clock: WallClock = clock or SystemWallClock()
        self._random = random
        self._database = sync_engine.url.render_as_string(hide_password=True)
        self._stopping = threading.Event()
        self._wake_sync: Callable[[], None] | None = None
        self._last_stats: OutboxStats | None = None

    # --- operating it ----------------------------------------------------------

    @property
    def engine(self) -> Engine | AsyncEngine:
        """The engine it was given: with an `AsyncEngine`, `run`; else `run_sync`."""
        return self._engine

    @property
    def last_stats(self) -> OutboxStats | None:
        """What the last `stats` call (or a round of `run`) read; None before."""
        return self._last_stats

    def stop(self) -> None:
        """Ask `run` or `run_sync` to return after the round in flight.

        Safe from any thread and from a signal handler; a wait between rounds
        ends at once.
        """
        self._stopping.set()
        wake = self._wake_sync
        if wake is not None:
            wake()
        doorbell.ring(self._database)

    async def stats(self) -> OutboxStats:
        """Pending, in-flight and dead messages, and the delivery lag, read now."""
        self._last_stats = await self._atransaction(self._stats_step())
        return self._last_stats

    def stats_sync(self) -> OutboxStats:
        """`stats` without an event loop."""
        self._last_stats = self._transaction(self._stats_step())
        return self._last_stats

    async def dead_messages(self, limit: int = 100) -> list[OutboxMessage]:
        """The dead messages, oldest first: what `redeliver` takes."""
        return await self._atransaction(_dead_step(limit))

    def dead_messages_sync(self, limit: int = 100) -> list[OutboxMessage]:
        """`dead_messages` without an event loop."""
        return self._transaction(_dead_step(limit))

    async def redeliver(self, message_id: str) -> bool:
        """Make a dead message due again, with a fresh count of `max_attempts`.

        Returns:
            True when it was dead; False for an id that is pending, delivered
            or unknown (a delivered message is never sent again by this).
        """
        found = await self._atransaction(self._redeliver_step(message_id))
        return self._redelivered(message_id, found)

    def redeliver_sync(self, message_id: str) -> bool:
        """`redeliver` without an event loop."""
        found = self._transaction(self._redeliver_step(message_id))
        return self._redelivered(message_id, found)

    async def purge_delivered(self, older_than: timedelta) -> int:
        """Delete messages delivered more than `older_than` ago; how many.

        Schedule it (hourly, say); dead and pending messages are never purged.
        """
        return await self._atransaction(self._purge_step(older_than))

    def purge_delivered_sync(self, older_than: timedelta) -> int:
        """`purge_delivered` without an event loop."""
        return self._transaction(self._purge_step(older_than))

    # Each operation is one step on a connection, built here (its arguments
    # checked and its time read), then run by `_transaction` or `_atransaction`.

    def _stats_step(self) -> Callable[[Connection], OutboxStats]:
        now = self._clock.now()
        return lambda c: sql.read_stats(c, now=now)

    def _redeliver_step(self, message_id: str) -> Callable[[Connection], bool]:
        now = self._clock.now()
        return lambda c: sql.redeliver(c, message_id=message_id, now=now)

    def _redelivered(self, message_id: str, found: bool) -> bool:
        if found:
            _log.info("outbox message %s is due again (redeliver)", message_id)
            doorbell.ring(self._database)
        return found

    def _purge_step(self, older_than: timedelta) -> Callable[[Connection], int]:
        _positive("older_than", older_than, _LONGEST_RETENTION)
        before = self._clock.now() - older_than
        return lambda c: sql.purge_delivered(c, before=before)

    # --- delivering ------------------------------------------------------------

    async def run(self) -> None:
        """Deliver until `stop` (or cancellation), waiting between empty rounds.

        A round that fails (the database refused, say) is logged and tried
        again after `poll_interval`; the relay keeps running. Cancelled, it
        stops at once: deliveries in flight are cancelled and their leases run
        out, so they are delivered again later. A `stop` called before `run`
        began makes it return at once; after it returned, it may run again.
        """
        loop = asyncio.get_running_loop()
        wake = asyncio.Event()

        def ring() -> None:
            loop.call_soon_threadsafe(wake.set)

        stop_listening = doorbell.listen(self._database, ring)
        try:
            while not self._stopping.is_set():
                wake.clear()
                claimed = 0
                try:
                    claimed = await self.run_once()
                    await self.stats()
                except Exception:
                    _log.exception("outbox relay: a round failed; trying again")
                if claimed < self._batch and not self._stopping.is_set():
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(wake.wait(), self._poll)
        finally:
            stop_listening()
            self._stopping.clear()

    def run_sync(self) -> None:
        """`run` without an event loop (a WSGI worker's thread, a worker process).

        Returns after `stop`, called from another thread or a signal handler.
        """
        self._need_sync("run_sync")
        wake = threading.Event()

        def ring() -> None:
            wake.set()

        self._wake_sync = ring
        stop_listening = doorbell.listen(self._database, ring)
        try:
            while not self._stopping.is_set():
                wake.clear()
                claimed = 0
                try:
                    claimed = self.run_once_sync()
                    self.stats_sync()
                except Exception:
                    _log.exception("outbox relay: a round failed; trying again")
                if claimed < self._batch and not self._stopping.is_set():
                    wake.wait(self._poll)
        finally:
            stop_listening()
            self._wake_sync = None
            self._stopping.clear()

    async def run_once(self) -> int:
        """One round: claim, deliver and record; the number of messages claimed."""
        token = uuid.uuid4().hex
        claimed = await self._atransaction(self._claim(token))
        if not claimed:
            return 0
        in_flight = {found.seq for found in claimed}
        keeper = asyncio.create_task(self._keep_leases(in_flight, token))
        limit = asyncio.Semaphore(self._concurrency)
        try:
            async with asyncio.TaskGroup() as group:
                for found in claimed:
                    group.create_task(self._adeliver(found, token, limit, in_flight))
        finally:
            keeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await keeper
        return len(claimed)

    def run_once_sync(self) -> int:
        """`run_once` without an event loop; deliveries run in worker threads."""
        self._need_sync("run_once_sync")
        token = uuid.uuid4().hex
        claimed = self._transaction(self._claim(token))
        if not claimed:
            return 0
        in_flight = {found.seq for found in claimed}
        done = threading.Event()
        keeper = threading.Thread(
            target=self._keep_leases_sync, args=(in_flight, token, done), daemon=True
        )
        keeper.start()
        try:
            if len(claimed) == 1 or self._concurrency == 1:
                for found in claimed:
                    self._deliver_sync(found, token, in_flight)
            else:
                workers = min(self._concurrency, len(claimed))
                with ThreadPoolExecutor(workers, "mediator-outbox") as pool:
                    for future in [
                        pool.submit(self._deliver_sync, found, token, in_flight)
                        for found in claimed
                    ]:
                        future.result()
        finally:
            done.set()
            keeper.join()
        return len(claimed)

    async def _adeliver(
        self, found: Claimed, token: str, limit: asyncio.Semaphore, in_flight: set[int]
    ) -> None:
        async with limit:
            try:
                await self._asend(found.message)
            except Exception as error:
                outcome = self._failed(found, error)
            else:
                outcome = _DELIVERED
            finally:
                in_flight.discard(found.seq)
            kept = await self._atransaction(self._finish_step(found, token, outcome))
            self._recorded(found, outcome, kept)

    def _deliver_sync(self, found: Claimed, token: str, in_flight: set[int]) -> None:
        try:
            self._send_sync(found.message)
        except Exception as error:
            outcome = self._failed(found, error)
        else:
            outcome = _DELIVERED
        finally:
            in_flight.discard(found.seq)
        kept = self._transaction(self._finish_step(found, token, outcome))
        self._recorded(found, outcome, kept)

    def _finish_step(
        self, found: Claimed, token: str, outcome: dict[str, Any]
    ) -> Callable[[Connection], bool]:
        now, seq = self._clock.now(), found.seq
        return lambda c: sql.finish(c, seq=seq, token=token, now=now, **outcome)

    async def _asend(self, message: OutboxMessage) -> None:
        handoff = self._handoff
        if handoff is None:
            await delivered(self._mediator, message.entry)
        elif isinstance(handoff, AsyncHandoff):
            await handoff.ahand_off(message)
        else:
            await asyncio.to_thread(handoff.hand_off, message)

    def _send_sync(self, message: OutboxMessage) -> None:
        handoff = self._handoff
        if handoff is None:
            delivered_sync(self._mediator, message.entry)
        elif isinstance(handoff, Handoff):
            handoff.hand_off(message)
        else:
            raise SyncPathError(
                "OutboxRelay's handoff is an AsyncHandoff only: use run() or "
                "run_once(), or give a Handoff with hand_off(message)"
            )

    def _failed(self, found: Claimed, error: BaseException) -> dict[str, Any]:
        summary = error_summary(error)
        attempts = found.message.attempts  # the claim counted this one
        if is_final(error) or attempts >= self._max_attempts:
            return {"state": DEAD, "error": summary}
        delay = exponential(self._base, attempts, cap=self._cap)
        delay *= jitter_factor(self._random(), source="OutboxRelay(random=...)")
        return {
            "state": PENDING,
            "error": summary,
            "next_attempt_at": self._clock.now() + timedelta(seconds=delay),
        }

    def _recorded(self, found: Claimed, outcome: dict[str, Any], kept: bool) -> None:
        message = found.message
        if not kept:
            _log.warning(
                "outbox message %s (%s): the lease ran out before the outcome was "
                "recorded; another relay delivers it again",
                message.id,
                message.message_type,
            )
        elif outcome["state"] == DEAD:
            _log.error(
                "outbox message %s (%s) is dead after %d attempts: %s",
                message.id,
                message.message_type,
                message.attempts,
                outcome["error"],
            )
        elif outcome["state"] == PENDING:
            _log.warning(
                "outbox message %s (%s) failed (attempt %d of %d), "
                "tried again at %s: %s",
                message.id,
                message.message_type,
                message.attempts,
                self._max_attempts,
                outcome["next_attempt_at"].isoformat(),
                outcome["error"],
            )

    async def _keep_leases(self, in_flight: set[int], token: str) -> None:
        period = self._lease.total_seconds() / 3
        while in_flight:
            await _SLEEPER.sleep(period)
            await self._atransaction(self._renewal(in_flight, token))

    def _keep_leases_sync(
        self, in_flight: set[int], token: str, done: threading.Event
    ) -> None:
        period = self._lease.total_seconds() / 3
        while not done.wait(period):
            try:
                self._transaction(self._renewal(in_flight, token))
            except Exception:
                _log.warning("outbox: renewing leases failed", exc_info=True)

    def _claim(self, token: str) -> Callable[[Connection], list[Claimed]]:
        now, batch, lease = self._clock.now(), self._batch, self._lease
        return lambda c: sql.claim(c, now=now, batch=batch, lease=lease, token=token)

    def _renewal(self, in_flight: set[int], token: str) -> Callable[[Connection], int]:
        now, seqs, lease = self._clock.now(), sorted(in_flight), self._lease
        return lambda c: sql.renew(c, seqs=seqs, token=token, now=now, lease=lease)

    # --- the database ------------------------------------------------------------

    def _need_sync(self, method: str) -> None:
        if isinstance(self._engine, AsyncEngine):
            raise SyncPathError(
                f"OutboxRelay.{method}() needs an Engine, and this relay has an "
                "AsyncEngine: await relay.run() / relay.run_once() instead"
            )

    def _transaction(self, step: Callable[[Connection], T]) -> T:
        """Run `step` in a short transaction of its own on the sync engine."""
        self._need_sync("the sync methods")
        engine = self._engine
        assert isinstance(engine, Engine)
        try:
            with engine.connect() as connection:
                ensure_outbox_table(connection)
                connection.execution_options(**self._options)
                with connection.begin():
                    return step(connection)
        except exc.DBAPIError as error:
            translated = translate_error(error)
            if translated is error:
                raise
            raise translated from error

    async def _atransaction(self, step: Callable[[Connection], T]) -> T:
        """`_transaction` for the async path: on the async engine, or in a thread."""
        engine = self._engine
        if isinstance(engine, Engine):
            return await asyncio.to_thread(self._transaction, step)
        try:
            async with engine.connect() as connection:
                await connection.run_sync(ensure_outbox_table)
                await connection.execution_options(**self._options)
                async with connection.begin():
                    return await connection.run_sync(step)
        except exc.DBAPIError as error:
            translated = translate_error(error)
            if translated is error:
                raise
            raise translated from error
