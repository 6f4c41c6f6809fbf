"""The published quota, spent once by the fleet: leases of what a host allows.

A host that publishes a quota (``RateLimit``, or the legacy triple) tells
every replica what is left for the account, not for the replica; each one
alone would spend it as if it were its own. Here, once the fleet has seen a
host's quota in its current window (Redis keeps, per host, the window's end
and the allowance left: what is left above the reserve, less what has been
leased since), a replica sends a request to that host only with one request
leased from the allowance; the sync thread leases a few at a time (twice
what the last interval needed) and hands back what was not spent. When the
fleet's allowance is gone, every replica refuses the host until the window
ends: `RateLimitedError` with reason ``"quota"``, as the local reader does.

Local first, as the rest: a host the fleet has no view of (none published,
its window over, Redis away, or not synced yet) is decided by the local
reader alone. A refusal for want of a lease while the fleet has allowance
left waits one sync interval (``retry_after``), for the next lease.

Counters written by the requests: `calls`, `spent`, `refused`, `observed`.
Written by the sync thread: `granted`, `returned`, `hold_until`, `seen_*`,
`reset_at`, `left`, `active`.
"""

from __future__ import annotations

import math
import threading
from collections import OrderedDict
from typing import TYPE_CHECKING

import httpx

from http_resilience._core.call import AsyncHandler, Call, SyncHandler
from http_resilience._core.quota_headers import Quota
from http_resilience._strategies.quota.strategy import (
    AsyncQuota,
    QuotaStrategy,
    SyncQuota,
)

if TYPE_CHECKING:
    from http_resilience._core.builder import BuildContext
    from http_resilience._fleet.link import ClientShare
    from http_resilience._strategies.quota.options import QuotaOptions

__all__ = [
    "AsyncSharedQuota",
    "QuotaLease",
    "SharedQuotaStrategy",
    "SyncSharedQuota",
    "quota_strategy",
    "usable",
]


def usable(quotas: list[Quota], reserve: float) -> tuple[int, float] | None:
    """How many more requests the tightest quota allows, and its reset (seconds).

    What is left above the reserve: the local reader refuses once
    ``remaining <= reserve x limit``. None when no quota publishes a reset
    (there is no window to share).

    Example:
        >>> usable([Quota(remaining=100, limit=100, reset=30.0)], 0.1)
        (90, 30.0)
        >>> usable([Quota(remaining=3, limit=None, reset=5.0)], 0.1)
        (3, 5.0)
    """
    best: tuple[int, float] | None = None
    for quota in quotas:
        if quota.reset is None:
            continue
        left = quota.remaining
        if quota.limit:
            left = max(math.ceil(quota.remaining - reserve * quota.limit - 1e-9), 0)
        if best is None or left < best[0]:
            best = (left, quota.reset)
    return best


class QuotaLease:
    """One host's share of the fleet's allowance, in one replica."""

    __slots__ = (
        "active",
        "calls",
        "granted",
        "hold_until",
        "left",
        "lock",
        "observed",
        "refused",
        "reset_at",
        "returned",
        "seen_calls",
        "seen_refused",
        "seen_spent",
        "spent",
    )

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.calls = self.spent = self.refused = 0
        self.observed: tuple[int, float] | None = None
        self.granted = self.returned = 0
        self.hold_until = 0.0
        self.seen_calls = self.seen_spent = self.seen_refused = 0
        self.active = False
        self.reset_at = 0.0
        self.left = 0

    def unused(self) -> int:
        """Leased and not spent."""
        return max(self.granted - self.returned - self.spent, 0)


class SharedQuotaStrategy(QuotaStrategy):
    """`QuotaStrategy`, plus the leases of the fleet's allowance per host.

    Args:
        options: As for `QuotaStrategy`.
        context: The transport's build context (clock, telemetry).
        share: The transport's link to its `SharedState`.
        maximum_hosts: The hosts it keeps leases for (least recent out).
    """

    __slots__ = ("_maximum", "_share", "leases")

    def __init__(
        self,
        *,
        options: QuotaOptions,
        context: BuildContext,
        share: ClientShare,
    ) -> None:
        super().__init__(
            options=options, clock=context.clock, telemetry=context.telemetry
        )
        self._share = share
        self._maximum = options.maximum_hosts
        self.leases: OrderedDict[str, QuotaLease] = OrderedDict()

    def lease(self, host: str) -> QuotaLease:
        """The lease of `host`, made on first use (bounded)."""
        found = self.leases.get(host)
        if found is None:
            with self._share.lock:
                found = self.leases.get(host)
                if found is None:
                    if len(self.leases) >= self._maximum:
                        self.leases.popitem(last=False)
                    found = self.leases[host] = QuotaLease()
        return found

    def take(self, call: Call) -> None:
        """Spend one leased request on the call's host, or refuse it.

        Raises:
            RateLimitedError: Reason ``"quota"``: the fleet's allowance is
                gone (until the window ends), or this replica holds no lease
                right now (for one sync interval).
        """
        lease = self.lease(call.host)
        share = self._share
        if not (lease.active and share.up):
            lease.calls += 1  # demand, for the first lease: not an account
            return
        now = share.wall()
        if now >= lease.reset_at:
            lease.calls += 1
            return
        with lease.lock:
            if lease.granted - lease.returned - lease.spent > 0:
                lease.spent += 1
                return
            lease.refused += 1
        share.wake()
        wait = lease.reset_at - now if lease.left <= 0 else share.interval
        spent = "the replicas have spent the host's published quota"
        raise self.refusal(call, spent, "try again in", wait)

    def read(self, call: Call, response: httpx.Response) -> None:
        """As `QuotaStrategy.read`; a quota seen is news for the fleet too."""
        quotas = self.published(response)
        if quotas is None:
            return
        self.apply(call, response, quotas)
        seen = usable(quotas, self.reserve)
        if seen is not None:
            left, reset = seen
            lease = self.lease(call.host)
            observed = (left, self._share.wall() + reset)
            with lease.lock:
                if lease.observed is None or left <= lease.observed[0]:
                    lease.observed = observed


def quota_strategy(
    share: ClientShare, options: QuotaOptions, context: BuildContext
) -> SharedQuotaStrategy | None:
    """The quota the fleet spends; None for a second quota step (it stays local)."""
    if share.quota is not None:
        return None
    share.quota = SharedQuotaStrategy(options=options, context=context, share=share)
    return share.quota


class AsyncSharedQuota(AsyncQuota):
    """`AsyncQuota`, each request to a host of the fleet's view leased first."""

    __slots__ = ("_shared",)

    def __init__(self, next: AsyncHandler, strategy: SharedQuotaStrategy) -> None:
        super().__init__(next, strategy)
        self._shared = strategy

    async def handle(self, request: httpx.Request, call: Call) -> httpx.Response:
        """Refuse a host whose quota is spent, here or by the fleet; else send."""
        strategy = self._shared
        if call.host in strategy.refused:
            strategy.check(call)
        strategy.take(call)
        response = await self._next.handle(request, call)
        strategy.read(call, response)
        return response


class SyncSharedQuota(SyncQuota):
    """`AsyncSharedQuota` for the sync chain."""

    __slots__ = ("_shared",)

    def __init__(self, next: SyncHandler, strategy: SharedQuotaStrategy) -> None:
        super().__init__(next, strategy)
        self._shared = strategy

    def handle_sync(self, request: httpx.Request, call: Call) -> httpx.Response:
        """Refuse a host whose quota is spent, here or by the fleet; else send."""
        strategy = self._shared
        if call.host in strategy.refused:
            strategy.check(call)
        strategy.take(call)
        response = self._next.handle_sync(request, call)
        strategy.read(call, response)
        return response
