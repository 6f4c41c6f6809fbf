"""Where the fleet meets Redis: the client, and a client's keys.

`connect` makes (or takes) the sync ``redis.Redis`` a `SharedState` syncs
through; `client_keys` names the four hashes of one client (see
`http_resilience._fleet.redis_batch`). Imported only when a `SharedState` is
made, so ``redis`` stays an optional dependency.
"""

from __future__ import annotations

import hashlib
from typing import Final

import redis

from http_resilience._core.hosts import safe_target

__all__ = ["client_keys", "connect"]

_NAME_LIMIT: Final = 64


def connect(target: object, *, timeout: float) -> tuple[redis.Redis, bool]:
    """A sync client for `target` (a URL or a client); whether it was made here.

    A client made from a URL waits at most `timeout` for any answer: a slow
    Redis fails the sync, and the replica falls back, within one interval.

    Raises:
        TypeError: `target` is neither a URL nor a ``redis.Redis``.
        ValueError: `target` is no URL redis-py reads; the message names its
            scheme, host and port only.
    """
    if isinstance(target, str):
        try:
            client = redis.Redis.from_url(  # pyright: ignore[reportUnknownMemberType]
                target, socket_timeout=timeout, socket_connect_timeout=timeout
            )
        except ValueError:
            # redis-py's message may quote a part of the URL, which can hold
            # the password: neither it nor the URL is passed on.
            raise ValueError(
                f"SharedState: {safe_target(target)} is no Redis URL redis-py can "
                "read: give redis://host[:port][/db], rediss://... or unix://..., "
                "with a port, a database number and query options it knows"
            ) from None
        return client, True
    if isinstance(target, redis.Redis):
        return target, False
    raise TypeError(
        "SharedState needs a redis:// URL or a redis.Redis (sync) client, got "
        f"{type(target).__qualname__}"
    )


def client_keys(namespace: str, name: str) -> tuple[str, str, str, str]:
    """The budget, breaker, quota and replica keys of `name`: bounded names."""
    if len(name) > _NAME_LIMIT or any(char in name for char in "{}:\n\r "):
        name = "h" + _digest(name)
    prefix = f"{namespace}:{{{name}}}"
    return (
        f"{prefix}:budget",
        f"{prefix}:breakers",
        f"{prefix}:quota",
        f"{prefix}:replicas",
    )


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:32]
