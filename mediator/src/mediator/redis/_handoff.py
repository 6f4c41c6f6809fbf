"""`StreamHandoff`: an outbox relay puts its messages on a Redis stream."""

from __future__ import annotations

import asyncio
from typing import Any, cast

import redis
import redis.asyncio

from mediator._core.errors import SyncPathError
from mediator.redis._entry import OutboxRecord, entry_fields

__all__ = ["StreamHandoff"]


def check_stream(owner: str, name: str, value: object) -> str:
    """`value` as a stream's key, or a TypeError naming `owner` and `name`."""
    if not isinstance(value, str) or not value:
        raise TypeError(
            f"{owner}({name}=...) must be a non-empty string, got {value!r}"
        )
    return value


def check_client(owner: str, value: object) -> redis.Redis | redis.asyncio.Redis:
    """`value` as a Redis client, or a TypeError naming `owner`."""
    if not isinstance(value, redis.Redis | redis.asyncio.Redis):
        raise TypeError(
            f"{owner}(redis=...) takes a redis.Redis or a redis.asyncio.Redis "
            f"client, got {type(value).__qualname__}"
        )
    return value


class StreamHandoff:
    """Hands each outbox message to a Redis stream (``XADD``), one entry each.

    Give it to `mediator.sqlalchemy.OutboxRelay` as ``handoff=``: the relay
    then marks a message delivered once the entry is written, and a
    `StreamConsumer` delivers it through the mediator from there. A failed
    ``XADD`` (Redis away) raises, so the relay tries the message again later,
    with its backoff; a message may so be written twice (the reply was lost),
    and is still applied once: the consumer delivers it under its message id.

    The entry's fields are ``id``, ``kind``, ``message_type``, ``payload``,
    ``created_at`` (ISO 8601) and, when set, ``ordering_key``, ``principal``
    and ``correlation_id``.

    Args:
        redis: A ``redis.Redis`` (for `hand_off`, and `ahand_off` in a worker
            thread) or a ``redis.asyncio.Redis`` (for `ahand_off` only, so
            for `OutboxRelay.run` and `run_once`).
        stream: The stream's key.
        maxlen: Trim the stream to about this many entries on each ``XADD``
            (``MAXLEN ~``); None keeps every entry. Trimming drops the oldest
            entries whether consumed or not: keep it well above the backlog.

    Raises:
        TypeError: Not a Redis client, an empty stream key, or a `maxlen`
            that is not a positive int.

    Example:
        >>> handoff = StreamHandoff(redis.Redis(), "orders:outbox")  # doctest: +SKIP
        >>> relay = OutboxRelay(mediator, engine, handoff=handoff)  # doctest: +SKIP
    """

    def __init__(
        self,
        redis: redis.Redis | redis.asyncio.Redis,
        stream: str,
        *,
        maxlen: int | None = None,
    ) -> None:
        self._redis = check_client("StreamHandoff", redis)
        self._stream = check_stream("StreamHandoff", "stream", stream)
        found = cast(object, maxlen)
        if found is not None and (
            not isinstance(found, int) or isinstance(found, bool) or found < 1
        ):
            raise TypeError(
                f"StreamHandoff(maxlen=...) must be an int of at least 1 or None, "
                f"got {maxlen!r}"
            )
        self._maxlen = maxlen

    @property
    def stream(self) -> str:
        """The stream's key."""
        return self._stream

    def hand_off(self, message: OutboxRecord) -> None:
        """Write `message` to the stream; raises what Redis raised.

        Raises:
            SyncPathError: The client is a ``redis.asyncio.Redis``.
        """
        client = self._redis
        if isinstance(client, redis.asyncio.Redis):
            raise SyncPathError(
                "StreamHandoff has a redis.asyncio.Redis client: use "
                "OutboxRelay.run() or run_once(), or give it a redis.Redis"
            )
        client.xadd(self._stream, self._fields(message), maxlen=self._maxlen)

    async def ahand_off(self, message: OutboxRecord) -> None:
        """`hand_off`, awaited; with a ``redis.Redis``, in a worker thread."""
        client = self._redis
        if isinstance(client, redis.asyncio.Redis):
            await client.xadd(self._stream, self._fields(message), maxlen=self._maxlen)
        else:
            await asyncio.to_thread(self.hand_off, message)

    @staticmethod
    def _fields(message: OutboxRecord) -> dict[Any, Any]:
        return dict(entry_fields(message))
