"""Admission control for a service's own handlers: the adaptive limit, inbound.

`AdmissionMiddleware` puts the `AdaptiveLimit` that guards outbound calls in
front of the app it wraps: one global limit (the ceiling) learned from the
handlers' own latency, an optional queue, and an optional partition of the
requests (a verified tenant, say) of which each may hold at most a share of
the ceiling. A request beyond the ceiling and its queue is answered 503, one
beyond its partition's share 429, both as problem details with
``Retry-After``, before the app sees it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from http import HTTPStatus
from random import Random
from typing import Final, cast

import anyio

from http_resilience._core.arguments import is_async_callable, of_type
from http_resilience._core.clock import SYSTEM_CLOCK, Clock, reader
from http_resilience._middleware.asgi import send_problem
from http_resilience._middleware.types import ASGIApp, Message, Receive, Scope, Send
from http_resilience._strategies.adaptive.limit import GRANTED, QUEUED, AdaptiveLimit
from http_resilience._strategies.adaptive.options import AdaptiveLimiterOptions
from http_resilience._strategies.adaptive.strategy import AsyncWaiters

__all__ = [
    "DEFAULT_PARTITION_SHARE",
    "READ_AHEAD",
    "AdmissionHealth",
    "AdmissionMiddleware",
    "Partition",
]

Partition = Callable[[Scope], Hashable | None]
"""The partition of a request, told from its ASGI scope; None: no partition."""

DEFAULT_PARTITION_SHARE: Final = 0.5
"""The share of the ceiling one partition may hold: however hard one caller
pushes, at least half of the service stays for the others, while a caller
alone on a quiet service still gets half of it (not one permit in n)."""

READ_AHEAD: Final = 65_536
"""Bytes of a queued request's body read (and kept) while it waits, to see
its caller leave; a larger body is left unread, and a caller who leaves
meanwhile is seen only when the request is let in."""

_OVERLOADED: Final = (
    "This service is at its limit of concurrent requests. Try again later."
)
_OVER_SHARE: Final = (
    "This caller is at its share of this service's concurrent requests. "
    "Try again later."
)
_SERVER_ERROR: Final = 500


@dataclass(frozen=True, slots=True)
class AdmissionHealth:
    """What an `AdmissionMiddleware` admits, as read just now.

    Attributes:
        limit: Requests let in at once now (the ceiling), as learned.
        in_use: Requests inside the app now.
        queued: Requests waiting for a permit.
        queue_limit: Requests that may wait.
        baseline_rtt: The handlers' long-term latency the limit compares
            with, in seconds; 0.0 until the first sample window closed.
        partitions: Partitions holding a request (inside or queued) now.
        overloaded: Requests answered 503 so far (ceiling and queue full).
        over_share: Requests answered 429 so far (partition over its share).
    """

    limit: int
    in_use: int
    queued: int
    queue_limit: int
    baseline_rtt: float
    partitions: int
    overloaded: int
    over_share: int


class AdmissionMiddleware:
    """Admits a service's own requests under a limit learned from its latency.

    Each HTTP request takes a permit of one global `AdaptiveLimit` (the
    ceiling, the outbound adaptive limiter's, with the same controller) for
    as long as the app handles it: from admission until the app returns,
    its whole response sent. Requests answered below 500 without raising
    are the limit's latency samples; a 5xx or an exception teaches it
    nothing, so an outage neither lowers the baseline nor moves the limit.
    Beyond the limit a request waits in the queue (`limiter.queue_limit`,
    first come first served; a caller who disconnects or is cancelled gives
    its place back), and beyond the queue it is answered at once:

    - 503 ``application/problem+json``, with ``Retry-After``: the time the
      requests inside and queued take to drain at the baseline latency
      (``baseline_rtt x (in_use + queued + 1) / limit``), in whole seconds
      rounded up, at least 1 (a permit frees as soon as a request ends, and
      1 s is the shortest ``Retry-After`` says).

    With `partition`, each request's partition (a tenant, say) may hold at
    most `partition_share` of the current limit, at least one permit,
    counting its requests inside and queued; one more is answered 429
    problem+json, with ``Retry-After`` (the same drain, of the partition's
    own requests over its share, at least 1 s), without taking a permit or a
    place of the ceiling: the other partitions and unpartitioned requests
    still get in. Only partitions holding a request are kept (removed when
    their count falls to zero), so the memory is bounded by the requests
    inside and queued, whatever keys callers make up.

    Pure ASGI: scopes other than ``http`` (``lifespan``, ``websocket``) pass
    through untouched. It is not part of the checked middleware order: put
    it outermost among this package's and the mediator's middlewares, inside
    the authentication that `partition` reads, so a refused request costs
    nothing more. Keep long streams (server-sent events, downloads) out from
    behind it: their length is no handler latency.

    Args:
        app: The ASGI application to wrap.
        limiter: The limit's bounds, start and queue (`min_limit`,
            `max_limit`, `initial_limit`, `queue_limit`); `per_host` and
            `maximum_hosts` do not apply: there is one ceiling. Default
            ``AdaptiveLimiterOptions()``: from 20, between 1 and 1000, no
            queue.
        partition: Called once per request with its ASGI scope: the
            request's partition (any hashable, such as the verified tenant's
            id) or None for a request under the ceiling alone. A plain
            function, not ``async def``. Read a verified identity (set by the
            authentication middleware in the scope), never a header a caller
            writes as it likes. An exception it raises propagates (the server
            answers 500): no request is admitted on a partition not known.
            Default None: no partitions.
        partition_share: The share of the current limit one partition may
            hold, in (0, 1]. Default 0.5.
        clock: Times the handlers. Default the system clock.
        random: Jitters the sample windows, so replicas do not move in step.
            Default a new `random.Random`.

    Raises:
        TypeError: `limiter` is not an `AdaptiveLimiterOptions`, `partition`
            is not callable or is ``async``, `partition_share` is not a
            number.
        ValueError: `partition_share` is not in (0, 1].

    Example:
        >>> import asyncio, httpx
        >>> async def app(scope, receive, send):
        ...     await send({"type": "http.response.start", "status": 200})
        ...     await send({"type": "http.response.body", "body": b"ok"})
        >>> admitted = AdmissionMiddleware(
        ...     app, limiter=AdaptiveLimiterOptions(initial_limit=8, queue_limit=16)
        ... )
        >>> async def main():
        ...     transport = httpx.ASGITransport(app=admitted)
        ...     async with httpx.AsyncClient(transport=transport) as client:
        ...         return (await client.get("http://service/")).status_code
        >>> asyncio.run(main())
        200
        >>> admitted.health().limit, admitted.health().in_use
        (8, 0)
    """

    __slots__ = (
        "_held",
        "_limit",
        "_now",
        "_over_share",
        "_overloaded",
        "_partition",
        "_share",
        "_waiters",
        "app",
    )

    def __init__(
        self,
        app: ASGIApp,
        *,
        limiter: AdaptiveLimiterOptions | None = None,
        partition: Partition | None = None,
        partition_share: float = DEFAULT_PARTITION_SHARE,
        clock: Clock = SYSTEM_CLOCK,
        random: Random | None = None,
    ) -> None:
        options = _checked_limiter(limiter)
        self._partition = _checked_partition(partition)
        self._share = _checked_share(partition_share)
        self.app = app
        self._now = now = reader(clock)
        draw = Random() if random is None else random
        self._limit = AdaptiveLimit(
            min_limit=options.min_limit,
            max_limit=options.max_limit,
            initial_limit=options.initial_limit,
            queue_limit=options.queue_limit,
            now=now(),
            random=draw.random,
        )
        self._waiters = AsyncWaiters()
        self._held: dict[Hashable, int] = {}
        self._overloaded = 0
        self._over_share = 0

    def health(self) -> AdmissionHealth:
        """The limit, its use and its refusals, now: for an operator to report."""
        limit = self._limit
        return AdmissionHealth(
            limit=limit.limit,
            in_use=limit.in_use,
            queued=limit.queued,
            queue_limit=limit.queue_limit,
            baseline_rtt=limit.baseline_rtt,
            partitions=len(self._held),
            overloaded=self._overloaded,
            over_share=self._over_share,
        )

    def share(self) -> int:
        """The permits one partition may hold now: at least 1."""
        return max(1, math.floor(self._share * self._limit.limit))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Admit an HTTP request, queue it or refuse it; pass anything else."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        key = None if self._partition is None else self._partition(scope)
        if key is None:
            await self._admit(scope, receive, send)
            return
        held = self._held
        count = held.get(key, 0)
        share = self.share()
        if count >= share:
            self._over_share += 1
            wait = self._drain(count + 1, share)
            await send_problem(
                send, HTTPStatus.TOO_MANY_REQUESTS, wait, detail=_OVER_SHARE
            )
            return
        held[key] = count + 1
        try:
            await self._admit(scope, receive, send)
        finally:
            left = held[key] - 1
            if left:
                held[key] = left
            else:
                del held[key]

    async def _admit(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Take a permit (maybe after queueing) and run the app, or answer 503."""
        limit = self._limit
        entry = limit.enter()
        if entry is not GRANTED:
            if entry is not QUEUED:
                self._overloaded += 1
                wait = self._drain(limit.in_use + limit.queued + 1, limit.limit)
                await send_problem(
                    send, HTTPStatus.SERVICE_UNAVAILABLE, wait, detail=_OVERLOADED
                )
                return
            read = await self._queued(limit, receive)
            if read is None:
                return  # the caller left while queued: no one to answer
            receive = read
        await self._run(limit, scope, receive, send)

    async def _run(
        self, limit: AdaptiveLimit, scope: Scope, receive: Receive, send: Send
    ) -> None:
        """Run the app on a permit; its latency is a sample when it answered < 500."""
        status = 0

        async def watched(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        now = self._now
        started = now()
        try:
            await self.app(scope, receive, watched)
        except BaseException:
            self._waiters.leave(limit)
            raise
        if 0 < status < _SERVER_ERROR:
            ended = now()
            limit.sample(ended - started, ended)
        self._waiters.leave(limit)

    async def _queued(self, limit: AdaptiveLimit, receive: Receive) -> Receive | None:
        """Wait for a permit, watching the caller; None: it left, placeless.

        What is read of the request meanwhile is kept, and given to the app
        first by the receive returned.
        """
        kept: list[Message] = []
        left = admitted = False
        async with anyio.create_task_group() as group:

            async def watch() -> None:
                nonlocal left
                read = 0
                while read <= READ_AHEAD:
                    message = await receive()
                    kept.append(message)
                    if message["type"] == "http.disconnect":
                        left = True
                        group.cancel_scope.cancel()
                        return
                    read += len(message.get("body", b""))

            group.start_soon(watch)
            await self._waiters.wait(limit)
            admitted = True
            group.cancel_scope.cancel()
        if left:
            if admitted:  # the permit came as the caller left: pass it on
                self._waiters.leave(limit)
            return None
        if not kept:
            return receive

        async def replayed() -> Message:
            if kept:
                return kept.pop(0)
            return await receive()

        return replayed

    def _drain(self, ahead: int, permits: int) -> float:
        """Seconds for `ahead` requests to pass `permits` at a time: at least 1."""
        wait = self._limit.baseline_rtt * ahead / permits
        return wait if wait > 1.0 else 1.0


def _checked_limiter(limiter: object) -> AdaptiveLimiterOptions:
    """`limiter`, or the default options for None; refused if of another kind."""
    if limiter is None:
        return AdaptiveLimiterOptions()
    return of_type(
        limiter, AdaptiveLimiterOptions, "limiter must be an AdaptiveLimiterOptions"
    )


def _checked_partition(partition: object) -> Partition | None:
    """`partition` if it is None or a plain callable; refused at once otherwise."""
    if partition is None:
        return None
    if not callable(partition):
        raise TypeError(
            "partition must be a callable that takes the ASGI scope and returns "
            f"the request's partition or None, got {type(partition).__name__}"
        )
    if is_async_callable(partition):
        raise TypeError(
            "partition must be a plain function, not async def: it reads the "
            "request's partition from the ASGI scope"
        )
    return cast("Partition", partition)


def _checked_share(share: object) -> float:
    """`share` as a float in (0, 1]; refused at once otherwise."""
    if isinstance(share, bool) or not isinstance(share, int | float):
        raise TypeError(
            f"partition_share must be a number in (0, 1], got {type(share).__name__}"
        )
    if not 0.0 < share <= 1.0:
        raise ValueError(f"partition_share must be in (0, 1], got {share!r}")
    return float(share)
