"""Published quota: a host that says its allowance is spent is not sent more.

Every response is read for the quota its host publishes (`quota_headers`: the
IETF ``RateLimit``/``RateLimit-Policy`` fields, else the legacy triple). Once
what is left is within the reserve (``remaining <= reserve x quota``; with no
quota published, ``remaining == 0``), the host's next attempts are refused in
this process until the window resets: `RateLimitedError` with reason
``"quota"`` and the wait in ``retry_after``, a `RejectionEvent`, and nothing
sent. A retry around it waits for the reset as it would for ``Retry-After``
(never past its deadline); the breaker never sees the refusal, and the retry
budget is not charged for it.

The reset is the response's ``Retry-After`` when it has a valid one, else the
quota's own (``t``, or the legacy reset); a spent quota with neither is not
acted on (there is no telling when to try again). A later response that shows
allowance left lifts the refusal at once.

`QuotaBook` keeps only the hosts refused right now, at most `maximum_hosts`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Final

import httpx

from http_resilience._core.call import Call
from http_resilience._core.clock import Clock, reader, utc_now
from http_resilience._core.drive import AsyncDriver, SyncDriver
from http_resilience._core.errors import RateLimitedError
from http_resilience._core.quota_headers import Quota, legacy_quota, standard_quota
from http_resilience._core.raw_headers import KEEPS_TRIPLES, LOWER_KEY
from http_resilience._core.refusal import rate_limited
from http_resilience._core.retry_after import parse_retry_after
from http_resilience._core.telemetry import Telemetry
from http_resilience._strategies.quota.book import QuotaBook, is_spent, spent_for

if TYPE_CHECKING:
    from http_resilience._strategies.quota.options import QuotaOptions

__all__ = ["AsyncQuota", "QuotaStrategy", "SyncQuota"]

_POLICY: Final = b"ratelimit-policy"
_RATELIMIT: Final = b"ratelimit"


class QuotaStrategy:
    """What both chains decide: refuse before an attempt, read after it.

    Args:
        options: The reserve, the legacy names and the bound.
        clock: The refusals' time.
        telemetry: Where refusals are reported.
        wall_clock: The present as a Unix time, for a legacy reset given as
            one, and for a ``Retry-After`` date.

    Attributes:
        refused: The hosts refused right now (look here before `check`).
        reserve: The share of a published quota held back.
        telemetry: Where refusals are reported.
    """

    __slots__ = (
        "_book",
        "_legacy",
        "_names",
        "_now",
        "_wall",
        "refused",
        "reserve",
        "telemetry",
    )

    def __init__(
        self,
        *,
        options: QuotaOptions,
        clock: Clock,
        telemetry: Telemetry,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self.reserve = options.quota_reserve
        self._legacy = tuple(
            name.lower().encode("ascii") for name in options.quota_legacy_headers
        )
        self._names = frozenset({_POLICY, _RATELIMIT, *self._legacy})
        self._book = QuotaBook(options.maximum_hosts)
        self.refused: Mapping[str, float] = self._book.refused
        """The hosts refused right now, and until when: to look up without a call."""
        self._now = reader(clock)
        self.telemetry = telemetry
        self._wall = wall_clock

    @property
    def book(self) -> QuotaBook:
        """The hosts refused right now."""
        return self._book

    def check(self, call: Call) -> None:
        """Raise `RateLimitedError` if the call's host is refused right now."""
        until = self._book.until(call.host)
        if until is None:
            return
        left = until - self._now()
        if left <= 0:
            self._book.lift(call.host)
            return
        spent = "the host's published quota is spent"
        raise self.refusal(call, spent, "it resets in", left)

    def refusal(self, call: Call, why: str, when: str, wait: float) -> RateLimitedError:
        """Report the refusal of `call` (reason ``"quota"``); the error to raise.

        Its message ends ``"<why>; <when> <wait> s"``; ``retry_after`` is `wait`.
        """
        return rate_limited(self.telemetry, call, "quota", why, when, wait)

    def read(self, call: Call, response: httpx.Response) -> None:
        """Read the quota `response` publishes for the call's host."""
        quotas = self.published(response)
        if quotas is not None:
            self.apply(call, response, quotas)

    def published(self, response: httpx.Response) -> list[Quota] | None:
        """The quotas `response` publishes; None when it publishes none."""
        headers = response.headers
        values: Callable[[bytes], list[str] | None]
        if KEEPS_TRIPLES:
            # Most answers publish nothing: that is seen in C, in one pass.
            names = self._names
            entries = headers._list  # pyright: ignore[reportPrivateUsage] - `triples`, inline
            if names.isdisjoint(map(LOWER_KEY, entries)):
                return None
            found: dict[bytes, list[str]] | None = None
            for _, lowered, value in entries:
                if lowered in names:
                    if found is None:
                        found = {}
                    found.setdefault(lowered, []).append(value.decode("latin-1"))
            if found is None:
                return None
            values = found.get
        else:
            values = self._from_mapping(headers)
        quotas = standard_quota(values(_POLICY) or (), values(_RATELIMIT) or ())
        if not quotas:
            limit, remaining, reset = (values(name) or () for name in self._legacy)
            legacy = legacy_quota(limit, remaining, reset, now=self._wall())
            if legacy is None:
                return None
            quotas = [legacy]
        return quotas

    def apply(self, call: Call, response: httpx.Response, quotas: list[Quota]) -> None:
        """Refuse the call's host while `quotas` are spent; lift it when not."""
        reserve = self.reserve
        for quota in quotas:
            if is_spent(quota, reserve):
                break
        else:
            self._book.lift(call.host)
            return
        headers = response.headers
        wait = parse_retry_after(
            headers.get_list("retry-after"),
            now=utc_now(),
            date=headers.get_list("date"),
        )
        if wait is None:
            wait = spent_for(quotas, reserve)
        if wait is not None and wait > 0:
            self._book.refuse(call.host, self._now() + wait)

    @staticmethod
    def _from_mapping(
        headers: httpx.Headers,
    ) -> Callable[[bytes], list[str] | None]:
        def values(name: bytes) -> list[str] | None:
            return headers.get_list(name.decode("ascii")) or None

        return values


class AsyncQuota(AsyncDriver[QuotaStrategy]):
    """`QuotaStrategy` on an event loop."""

    __slots__ = ()

    async def handle(self, request: httpx.Request, call: Call) -> httpx.Response:
        """Refuse a host whose quota is spent; read the quota of each answer."""
        strategy = self.strategy
        if call.host in strategy.refused:  # rare: look before the call
            strategy.check(call)
        response = await self._next.handle(request, call)
        # `read`, unrolled: most answers publish nothing, one call less each.
        quotas = strategy.published(response)
        if quotas is not None:
            strategy.apply(call, response, quotas)
        return response


class SyncQuota(SyncDriver[QuotaStrategy]):
    """`AsyncQuota` for the sync chain."""

    __slots__ = ()

    def handle_sync(self, request: httpx.Request, call: Call) -> httpx.Response:
        """Refuse a host whose quota is spent; read the quota of each answer."""
        strategy = self.strategy
        if call.host in strategy.refused:  # rare: look before the call
            strategy.check(call)
        response = self._next.handle_sync(request, call)
        # `read`, unrolled: most answers publish nothing, one call less each.
        quotas = strategy.published(response)
        if quotas is not None:
            strategy.apply(call, response, quotas)
        return response
