"""`SharedState`: budgets, quota views and breakers shared by replicas, via Redis.

Imports ``redis`` only when one is made (the ``redis`` extra): importing
`http_resilience` never does.
"""

from __future__ import annotations

import logging
import math
import random
import re
import threading
from collections.abc import Callable
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Final, Literal, cast

from http_resilience._core.clock import wall_time
from http_resilience._core.host_registry import DEFAULT_MAXIMUM_HOSTS
from http_resilience._fleet.link import ClientShare

if TYPE_CHECKING:
    from http_resilience._fleet.redis_batch import RedisBatch

__all__ = [
    "DEFAULT_MAXIMUM_BATCH",
    "DEFAULT_NAMESPACE",
    "DEFAULT_SYNC_INTERVAL",
    "SharedState",
]

DEFAULT_NAMESPACE: Final = "http_resilience"
DEFAULT_SYNC_INTERVAL: Final = timedelta(milliseconds=100)
DEFAULT_MAXIMUM_BATCH: Final = 256
_MAXIMUM_BACKOFF: Final = 5.0

LOGGER: Final = logging.getLogger("http_resilience.shared")


_NAMESPACE = re.compile(r"[A-Za-z0-9_.\-]{1,64}")


class SharedState:
    """Retry budgets and circuit breakers shared by every replica, through Redis.

    Give it to a transport or a client (``shared=``). Each replica keeps its
    own state and decides every request alone, from memory; a background
    thread syncs with Redis in small batches (every `sync_interval`, or at
    once when a breaker opens or a budget runs dry), so no request waits on
    Redis. What is shared, per client name and host:

    - the retry budget: first attempts and retries are counted fleet-wide,
      and a retry needs a retry leased from the fleet's budget as well as
      its replica's, so the replicas together retry within one budget;
    - the published quota: once the fleet has seen a host's quota in its
      window, each request to it is leased from the allowance left, so the
      replicas spend it once, and all refuse the host when it is gone;
    - the circuit breakers: a host one replica sees fail is refused by all
      within one sync interval, and once its break is over exactly one
      replica (the one Redis grants the claim) sends the probe.

    The shared state is advisory and fails open: when Redis is away, slow
    (no answer within `sync_interval`) or answers nonsense, each replica
    falls back to its local state at once, logs it once, and tries Redis
    again with a growing backoff; a request never fails because of Redis.
    Every key has a TTL and the keys of a client are bounded.

    Args:
        redis: A ``redis://`` URL, or a sync ``redis.Redis`` client (set its
            ``socket_timeout``: a sync waits on it).
        namespace: The first part of every key.
        fallback: What to do without Redis: ``"local"`` (the only choice).
        sync_interval: How often the thread syncs; seconds or a `timedelta`.
            Default 100 ms. The fleet's view is at most about this old.
        maximum_batch: The most hosts and breaker changes sent per sync, and
            the most retries leased per host and sync. Default 256.
        maximum_hosts: The hosts a client's shared state holds. Default 1024.
        wall_clock: Unix seconds; the replicas' clocks must agree to well
            within a break duration (NTP does).
        background: Whether a thread syncs (default). ``False``: no thread;
            only `sync_now` syncs, for a worker that runs its own schedule
            and for tests that count what each sync does.

    Raises:
        ValueError: `fallback` is not ``"local"``, a bound is not positive, the
            interval is not finite, `namespace` is not 1 to 64 of
            ``[A-Za-z0-9_.-]`` (a key name must stay bounded and plain), or
            `redis` is a URL redis-py cannot read (the message names its
            scheme, host and port only, never its password or query).
        TypeError: `redis` is neither a URL nor a ``redis.Redis``.
        ImportError: The ``redis`` extra is not installed.

    Example:
        >>> shared = SharedState("redis://127.0.0.1:6379/0")  # doctest: +SKIP
        >>> client = create_async_client("inventory", shared=shared)  # doctest: +SKIP
    """

    def __init__(
        self,
        redis: Any,
        *,
        namespace: str = DEFAULT_NAMESPACE,
        fallback: Literal["local"] = "local",
        sync_interval: float | timedelta = DEFAULT_SYNC_INTERVAL,
        maximum_batch: int = DEFAULT_MAXIMUM_BATCH,
        maximum_hosts: int = DEFAULT_MAXIMUM_HOSTS,
        wall_clock: Callable[[], float] = wall_time,
        background: bool = True,
    ) -> None:
        if fallback != "local":
            raise ValueError(f"fallback must be 'local', got {fallback!r}")
        interval = (
            sync_interval.total_seconds()
            if isinstance(sync_interval, timedelta)
            else float(sync_interval)
        )
        if not 0 < interval < math.inf:
            raise ValueError(
                f"sync_interval must be above 0 and finite, got {sync_interval!r}"
            )
        # Typed str, but a config file may hand anything: checked as an object.
        given = cast(object, namespace)
        if not isinstance(given, str) or not _NAMESPACE.fullmatch(given):
            raise ValueError(
                "namespace must be 1 to 64 letters, digits, '_', '-' or '.', "
                f"got {namespace!r}"
            )
        if maximum_batch < 1:
            raise ValueError(f"maximum_batch must be at least 1, got {maximum_batch}")
        if maximum_hosts < 1:
            raise ValueError(f"maximum_hosts must be at least 1, got {maximum_hosts}")
        from http_resilience._fleet.redis_batch import RedisBatch
        from http_resilience._fleet.redis_client import connect

        client, self._owns_client = connect(redis, timeout=interval)
        self.sync_interval = interval
        self.namespace = namespace
        self._wall = wall_clock
        self._batch: RedisBatch = RedisBatch(
            client,
            namespace=namespace,
            maximum_batch=maximum_batch,
            maximum_hosts=maximum_hosts,
        )
        self._shares: list[ClientShare] = []
        self._leaving: list[ClientShare] = []
        self._lock = threading.Lock()
        self._syncing = threading.Lock()
        self._wake = threading.Event()
        self._halt = threading.Event()
        self._stop = False
        self._thread: threading.Thread | None = None
        self._background = background
        self._up = True  # until the first failure: a failure then is news
        self._backoff = 0.0

    @property
    def up(self) -> bool:
        """Whether the last sync reached Redis."""
        return self._up

    def attach(self, name: str) -> ClientShare:
        """A transport's link for client `name`; starts the sync thread, if any.

        Raises:
            RuntimeError: The shared state is closed.
        """
        with self._lock:
            if self._stop:
                raise RuntimeError("SharedState is closed")
            share = ClientShare(
                name,
                wall=self._wall,
                wake=self._wake.set,
                interval=self.sync_interval,
                detach=self._detach,
            )
            self._shares = [*self._shares, share]
            if self._background and self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="http_resilience-shared", daemon=True
                )
                self._thread.start()
        self._wake.set()
        return share

    def _detach(self, share: ClientShare) -> None:
        # Its news (a breaker that opened just before) goes out with the next
        # sync, then it is forgotten.
        with self._lock:
            self._shares = [found for found in self._shares if found is not share]
            self._leaving = [*self._leaving, share]
        self._wake.set()

    def sync_now(self) -> bool:
        """Sync every client once, on this thread; whether Redis answered.

        For tests, shutdown hooks and ``background=False``; the background
        thread does this anyway.
        """
        return self._sync_all()

    def close(self) -> None:
        """Stop the sync thread and close the client made from a URL."""
        with self._lock:
            self._stop = True
            thread = self._thread
        self._halt.set()
        self._wake.set()
        if thread is not None:
            thread.join()
        if self._owns_client:
            self._batch.client.close()

    def __enter__(self) -> SharedState:
        """The shared state itself."""
        return self

    def __exit__(self, *exc_info: object) -> None:
        """`close`."""
        self.close()

    def _run(self) -> None:
        wait = self.sync_interval
        while True:
            if self._up:
                self._wake.wait(wait)
                self._wake.clear()
            else:
                # Redis is away: wait out the backoff, whatever the requests ask.
                self._halt.wait(wait)
            if self._stop:
                return
            if self._sync_all():
                wait = self.sync_interval
            else:
                # Backoff, with jitter, so a fleet does not reconnect at once.
                self._backoff = min(
                    max(self._backoff * 2, self.sync_interval), _MAXIMUM_BACKOFF
                )
                wait = self._backoff * (0.5 + random.random() / 2)

    def _sync_all(self) -> bool:
        # One sync at a time: the shares' thread-side counters have one writer.
        with self._syncing:
            return self._sync_each()

    def _sync_each(self) -> bool:
        with self._lock:
            leaving, self._leaving = self._leaving, []
        shares = [*self._shares, *leaving]
        try:
            for share in shares:
                self._batch.sync(share, self._wall())
        except Exception as exc:  # fail open, whatever went wrong
            for share in shares:
                share.fall_back()
            if self._up:
                self._up = False
                LOGGER.warning(
                    "shared state unavailable (%s: %s); each replica decides "
                    "alone until Redis answers",
                    type(exc).__name__,
                    exc,
                )
            return False
        if not self._up:
            self._up = True
            self._backoff = 0.0
            LOGGER.info("shared state available again; sharing resumed")
        return True
