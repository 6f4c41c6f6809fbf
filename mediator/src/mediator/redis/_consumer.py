"""`StreamConsumer`: delivers what a `StreamHandoff` put on a Redis stream.

A round is a generator of steps (a Redis call, a delivery through the
mediator) driven by a sync and an async loop, so the two share every
decision: what to claim, when an entry is dead, when it is acknowledged.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import threading
import uuid
from collections.abc import Callable, Generator, Iterator, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Final, cast

import redis
import redis.asyncio

from mediator._core.errors import SyncPathError
from mediator._dispatch.mediator import Mediator
from mediator._dispatch.outbox import (
    OutboxEntry,
    delivered,
    delivered_sync,
    error_summary,
    is_final,
)
from mediator.redis._entry import GarbledEntryError, entry_of
from mediator.redis._handoff import check_client, check_stream

__all__ = ["StreamConsumer"]

_log: Final = logging.getLogger("mediator.outbox")


@dataclass(frozen=True, slots=True)
class _Call:
    """A Redis command: on a sync client it returns, on an async one it awaits."""

    run: Callable[[Any], Any]


@dataclass(frozen=True, slots=True)
class _Deliver:
    entry: OutboxEntry


_Step = _Call | _Deliver
_Round = Generator[_Step, Any, int]


@dataclass(frozen=True, slots=True)
class _Read:
    """One entry read: its stream id, its fields, and how often it was read."""

    id: Any
    fields: Mapping[Any, object] | None
    deliveries: int


def _entries(response: object) -> Iterator[tuple[Any, Any]]:
    """The ``(id, fields)`` pairs of an XREADGROUP or XAUTOCLAIM answer.

    redis-py shapes them by protocol and version (a list of ``[stream,
    entries]``, a dict of stream to entries, entries nested once more);
    an entry is a pair of an id and a mapping (or None: deleted).
    """
    if isinstance(response, Mapping):
        values: list[object] = list(response.values())  # pyright: ignore[reportUnknownArgumentType]
        for value in values:
            yield from _entries(value)
    elif isinstance(response, list | tuple):
        items: list[Any] = list(response)  # pyright: ignore[reportUnknownArgumentType]
        if (
            len(items) == 2
            and isinstance(items[0], str | bytes)
            and (items[1] is None or isinstance(items[1], Mapping))
        ):
            yield items[0], items[1]
        elif len(items) == 2 and isinstance(items[0], str | bytes):
            yield from _entries(items[1])  # [stream, entries]
        else:
            for item in items:
                yield from _entries(item)


def _duration(name: str, value: object, *, zero: bool) -> int:
    """`value` in whole milliseconds, checked."""
    if (
        not isinstance(value, timedelta)
        or value < timedelta(0)
        or (not zero and value <= timedelta(0))
    ):
        bound = "non-negative" if zero else "positive"
        raise ValueError(
            f"StreamConsumer({name}=...) must be a {bound} timedelta, got {value!r}"
        )
    milliseconds = int(value / timedelta(milliseconds=1))
    return max(milliseconds, 0 if zero else 1)


def _count(name: str, value: object) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(
            f"StreamConsumer({name}=...) must be an int of at least 1, got {value!r}"
        )
    return value


def _text(value: object) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


class StreamConsumer:
    """Delivers the outbox messages of a Redis stream through the mediator.

    It reads the stream as one consumer of a consumer group (made, with the
    stream, if missing: ``XGROUP CREATE ... 0 MKSTREAM``, so entries written
    before it are read too), rebuilds each entry's message and delivers it as
    `mediator.sqlalchemy.OutboxRelay` would: under ``idempotency_key(message
    id)``, acting as the principal that recorded it, with its correlation id.
    So an ``@idempotent`` command applies it once, however often it comes.

    - Delivered: the entry is acknowledged (``XACK``).
    - A final error (a domain error, no handler, a payload that no longer
      fits, a type not loaded here), or a garbled entry: the entry goes to
      the dead stream with the reason and is acknowledged.
    - Any other error: the entry stays pending, and is read again once it
      has been idle `min_idle` (``XAUTOCLAIM``), by this consumer or
      another; so are the entries of a consumer that crashed. After
      `max_deliveries` reads it goes to the dead stream instead.

    A dead entry holds the original fields and ``error`` (redacted as the
    relay's ``last_error``), ``entry_id`` (its id in the stream) and
    ``deliveries``. An entry's type is looked up among the modules already
    loaded; nothing is imported because of what a stream holds. Whoever can
    write to the stream can send commands as any principal: guard it (Redis
    ACLs) as you guard the outbox's database.

    Entries are delivered one after another in the order read; several
    consumers share the group's entries, and then ordering keys are not kept.

    Args:
        mediator: The mediator that delivers; register the modules that define
            the messages.
        redis: A ``redis.Redis`` (for the sync methods, and the async ones in
            a worker thread) or a ``redis.asyncio.Redis`` (async methods
            only). Its ``socket_timeout``, if any, must exceed `block`.
        stream: The stream's key, the one the `StreamHandoff` writes.
        group: The consumer group's name.
        consumer: This consumer's name in the group; by default the host
            name, the process id and a random part.
        batch: Entries read per round.
        block: How long a round waits for a new entry when none is there.
        min_idle: How long an entry read but not acknowledged stays with its
            consumer before another round takes it over: longer than a
            delivery takes.
        max_deliveries: Reads of one entry before it is dead.
        dead_stream: Where dead entries go; ``f"{stream}:dead"`` by default.

    Raises:
        TypeError: An argument of the wrong kind.
        ValueError: A bound out of range, or a dead stream that is the stream.

    Example:
        >>> consumer = StreamConsumer(mediator, redis.asyncio.Redis(),
        ...                           "orders:outbox", "orders")  # doctest: +SKIP
        >>> task = asyncio.create_task(consumer.run())  # doctest: +SKIP
    """

    def __init__(
        self,
        mediator: Mediator,
        redis: redis.Redis | redis.asyncio.Redis,
        stream: str,
        group: str,
        *,
        consumer: str | None = None,
        batch: int = 10,
        block: timedelta = timedelta(seconds=1),
        min_idle: timedelta = timedelta(minutes=1),
        max_deliveries: int = 10,
        dead_stream: str | None = None,
    ) -> None:
        if not isinstance(cast(object, mediator), Mediator):
            raise TypeError(
                "StreamConsumer(mediator=...) takes a Mediator, got "
                f"{type(mediator).__qualname__}"
            )
        self._mediator = mediator
        self._redis = check_client("StreamConsumer", redis)
        self._stream = check_stream("StreamConsumer", "stream", stream)
        self._group = check_stream("StreamConsumer", "group", group)
        self._consumer = (
            f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
            if consumer is None
            else check_stream("StreamConsumer", "consumer", consumer)
        )
        self._batch = _count("batch", batch)
        self._block = _duration("block", block, zero=False)
        self._min_idle = _duration("min_idle", min_idle, zero=True)
        self._max_deliveries = _count("max_deliveries", max_deliveries)
        self._dead_stream = (
            f"{stream}:dead"
            if dead_stream is None
            else check_stream("StreamConsumer", "dead_stream", dead_stream)
        )
        if self._dead_stream == self._stream:
            raise ValueError(
                f"StreamConsumer(dead_stream=...) must differ from the stream "
                f"{stream!r}"
            )
        self._group_ready = False
        self._cursor: Any = "0-0"
        self._stopping = threading.Event()

    @property
    def consumer(self) -> str:
        """This consumer's name in the group."""
        return self._consumer

    @property
    def dead_stream(self) -> str:
        """The stream dead entries go to."""
        return self._dead_stream

    def stop(self) -> None:
        """Ask `run` or `run_sync` to return after the round in flight."""
        self._stopping.set()

    async def run(self) -> None:
        """Deliver until `stop` (or cancellation); a round waits up to `block`.

        A Redis error ends it (raised): run it under a supervisor that
        restarts it. Cancelled, an entry being delivered stays pending and is
        delivered again after `min_idle`.
        """
        self._stopping.clear()
        while not self._stopping.is_set():
            await self.run_once()

    def run_sync(self) -> None:
        """`run` without an event loop; returns after `stop` from another thread."""
        self._need_sync("run_sync")
        self._stopping.clear()
        while not self._stopping.is_set():
            self.run_once_sync()

    async def run_once(self) -> int:
        """One round: take over idle entries, read new ones, deliver them.

        Returns:
            The number of entries handled (delivered, dead or left pending).
        """
        flow = self._round()
        client = self._redis
        try:
            step = next(flow)
            while True:
                try:
                    result: Any = None
                    if isinstance(step, _Deliver):
                        await delivered(self._mediator, step.entry)
                    elif isinstance(client, redis.asyncio.Redis):
                        result = await step.run(client)
                    else:
                        result = await asyncio.to_thread(step.run, client)
                except Exception as error:
                    step = flow.throw(error)
                else:
                    step = flow.send(result)
        except StopIteration as done:
            handled: int = done.value
            return handled
        finally:
            flow.close()

    def run_once_sync(self) -> int:
        """`run_once` without an event loop."""
        self._need_sync("run_once_sync")
        flow = self._round()
        try:
            step = next(flow)
            while True:
                try:
                    result: Any = None
                    if isinstance(step, _Deliver):
                        delivered_sync(self._mediator, step.entry)
                    else:
                        result = step.run(self._redis)
                except Exception as error:
                    step = flow.throw(error)
                else:
                    step = flow.send(result)
        except StopIteration as done:
            handled: int = done.value
            return handled
        finally:
            flow.close()

    def _need_sync(self, method: str) -> None:
        if isinstance(self._redis, redis.asyncio.Redis):
            raise SyncPathError(
                f"StreamConsumer.{method}() needs a redis.Redis, and this consumer "
                "has a redis.asyncio.Redis: await consumer.run() / run_once()"
            )

    # --- one round, told by both drivers -------------------------------------

    def _round(self) -> _Round:
        stream, group, consumer = self._stream, self._group, self._consumer
        if not self._group_ready:
            yield from self._create_group()
        try:
            claimed = yield _Call(
                lambda r: r.xautoclaim(
                    stream,
                    group,
                    consumer,
                    self._min_idle,
                    start_id=self._cursor,
                    count=self._batch,
                )
            )
        except redis.ResponseError as error:
            if "NOGROUP" not in str(error):
                raise
            yield from self._create_group()  # the stream was deleted meanwhile
            return 0
        self._cursor = claimed[0]
        found: list[_Read] = []
        for entry_id, fields in _entries(claimed[1]):
            deliveries = yield from self._deliveries(entry_id)
            if deliveries:
                found.append(_Read(entry_id, fields, deliveries))
        wanted = self._batch - len(found)
        if wanted:
            block = None if found else self._block
            fresh = yield _Call(
                lambda r: r.xreadgroup(
                    group, consumer, {stream: ">"}, count=wanted, block=block
                )
            )
            found += [_Read(i, fields, 1) for i, fields in _entries(fresh)]
        for read in found:
            yield from self._handle(read)
        return len(found)

    def _create_group(self) -> Generator[_Step, Any, None]:
        stream, group = self._stream, self._group
        try:
            yield _Call(lambda r: r.xgroup_create(stream, group, id="0", mkstream=True))
        except redis.ResponseError as error:
            if "BUSYGROUP" not in str(error):
                raise
        self._group_ready = True

    def _deliveries(self, entry_id: Any) -> Generator[_Step, Any, int]:
        """How often a claimed entry was read, this time included; 0 if gone."""
        stream, group = self._stream, self._group
        pending = yield _Call(
            lambda r: r.xpending_range(
                stream, group, min=entry_id, max=entry_id, count=1
            )
        )
        for row in pending or ():
            return int(row["times_delivered"])
        return 0

    def _handle(self, read: _Read) -> Generator[_Step, Any, None]:
        if read.fields is None:  # deleted from the stream (trimmed) meanwhile
            yield from self._ack(read)
            return
        if read.deliveries > self._max_deliveries:
            yield from self._dead(
                read,
                f"read {read.deliveries - 1} times and never acknowledged "
                f"(max_deliveries={self._max_deliveries})",
            )
            return
        try:
            entry = entry_of(read.fields)
        except GarbledEntryError as error:
            yield from self._dead(read, f"GarbledEntryError: {error}")
            return
        try:
            yield _Deliver(entry)
        except Exception as error:
            if is_final(error) or read.deliveries >= self._max_deliveries:
                yield from self._dead(read, error_summary(error))
            else:
                _log.warning(
                    "outbox stream entry %s (message %s, %s) failed (read %d of %d), "
                    "read again after %d ms idle: %s",
                    _text(read.id),
                    entry.id,
                    entry.message_type,
                    read.deliveries,
                    self._max_deliveries,
                    self._min_idle,
                    error_summary(error),
                )
            return
        yield from self._ack(read)

    def _ack(self, read: _Read) -> Generator[_Step, Any, None]:
        stream, group = self._stream, self._group
        yield _Call(lambda r: r.xack(stream, group, read.id))

    def _dead(self, read: _Read, reason: str) -> Generator[_Step, Any, None]:
        fields: dict[Any, Any] = {}
        for name, value in (read.fields or {}).items():
            fields[_text(name)] = value
        fields.update(
            error=reason, entry_id=_text(read.id), deliveries=str(read.deliveries)
        )
        stream, group, dead = self._stream, self._group, self._dead_stream
        _log.error(
            "outbox stream entry %s is dead after %d reads, moved to %s: %s",
            _text(read.id),
            read.deliveries,
            dead,
            reason,
        )
        # Acked only once the dead entry is written: a MULTI would ack it even
        # when its XADD failed (a key of another type at the dead stream's
        # name). A crash in between leaves it pending: written dead twice,
        # never lost.
        yield _Call(lambda r: r.xadd(dead, fields))
        yield _Call(lambda r: r.xack(stream, group, read.id))
