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
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from typing import Annotated, ClassVar, Final, cast

import httpx
from pydantic import AfterValidator, BaseModel, BeforeValidator, Field

from http_resilience._core.builder import BuildContext, Placement
from http_resilience._core.clock import Clock, reader, utc_now
from http_resilience._core.errors import RateLimitedError
from http_resilience._core.fields import FROZEN, Count
from http_resilience._core.host_registry import DEFAULT_MAXIMUM_HOSTS
from http_resilience._core.pipeline import AsyncHandler, Call, SyncHandler
from http_resilience._core.quota_headers import (
    LEGACY_HEADERS,
    Quota,
    legacy_quota,
    standard_quota,
)
from http_resilience._core.raw_headers import (
    KEEPS_TRIPLES,
    LOWER_KEY,
    is_token,
    triples,
)
from http_resilience._core.retry_after import parse_retry_after
from http_resilience._core.telemetry import Telemetry

__all__ = [
    "DEFAULT_QUOTA_LEGACY_HEADERS",
    "DEFAULT_QUOTA_RESERVE",
    "AsyncQuota",
    "HeaderNames",
    "QuotaBook",
    "QuotaOptions",
    "QuotaStrategy",
    "SyncQuota",
    "check_legacy_headers",
    "is_spent",
    "spent_for",
    "split_header_names",
]

DEFAULT_QUOTA_RESERVE: Final = 0.1
DEFAULT_QUOTA_LEGACY_HEADERS: Final = LEGACY_HEADERS

_POLICY: Final = b"ratelimit-policy"
_RATELIMIT: Final = b"ratelimit"


def is_spent(quota: Quota, reserve: float) -> bool:
    """Whether what is left of `quota` is within the reserve.

    ``remaining <= reserve x limit``; with no limit published, ``remaining == 0``.
    """
    limit = quota.limit
    if limit:
        return quota.remaining <= reserve * limit
    return quota.remaining == 0


def spent_for(quotas: list[Quota], reserve: float) -> float | None:
    """The longest reset among the quotas of `quotas` that are spent, in seconds.

    None when none is spent, or none of the spent ones publishes a reset.

    Example:
        >>> spent_for([Quota(remaining=9, limit=100, reset=30.0)], 0.1)
        30.0
        >>> spent_for([Quota(remaining=11, limit=100, reset=30.0)], 0.1) is None
        True
        >>> spent_for([Quota(remaining=0, limit=None, reset=5.0)], 0.1)
        5.0
    """
    wait: float | None = None
    for quota in quotas:
        reset = quota.reset
        later = reset is not None and (wait is None or reset > wait)
        if later and is_spent(quota, reserve):
            wait = reset
    return wait


class QuotaBook:
    """The hosts refused right now, and until when (seconds on the pipeline's clock).

    Bounded: at most `maximum` hosts; a new refusal beyond that forgets the
    oldest one (whose host is then tried again, and refused again if it
    still says so).
    """

    __slots__ = ("_maximum", "_until")

    def __init__(self, maximum: int) -> None:
        if maximum < 1:
            raise ValueError(f"maximum_hosts must be at least 1, got {maximum}")
        self._maximum = maximum
        self._until: OrderedDict[str, float] = OrderedDict()

    def __len__(self) -> int:
        """Hosts refused."""
        return len(self._until)

    @property
    def refused(self) -> Mapping[str, float]:
        """The hosts refused, and until when (read-only use)."""
        return self._until

    def until(self, host: str) -> float | None:
        """When the refusal of `host` ends; None if it is not refused."""
        return self._until.get(host)

    def refuse(self, host: str, until: float) -> None:
        """Refuse `host` until `until`."""
        book = self._until
        book.pop(host, None)
        if len(book) >= self._maximum:
            book.popitem(last=False)
        book[host] = until

    def lift(self, host: str) -> None:
        """`host` is not refused (any more)."""
        self._until.pop(host, None)


class QuotaStrategy:
    """What both chains decide: refuse before an attempt, read after it.

    Args:
        options: The reserve, the legacy names and the bound.
        clock: The refusals' time.
        telemetry: Where refusals are reported.
        wall_clock: The present as a Unix time, for a legacy reset given as
            one, and for a ``Retry-After`` date.
    """

    __slots__ = (
        "_book",
        "_legacy",
        "_names",
        "_now",
        "_reserve",
        "_telemetry",
        "_wall",
    )

    def __init__(
        self,
        *,
        options: QuotaOptions,
        clock: Clock,
        telemetry: Telemetry,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self._reserve = options.quota_reserve
        self._legacy = tuple(
            name.lower().encode("ascii") for name in options.quota_legacy_headers
        )
        self._names = frozenset({_POLICY, _RATELIMIT, *self._legacy})
        self._book = QuotaBook(options.maximum_hosts)
        self._now = reader(clock)
        self._telemetry = telemetry
        self._wall = wall_clock

    @property
    def book(self) -> QuotaBook:
        """The hosts refused right now."""
        return self._book

    @property
    def refused(self) -> Mapping[str, float]:
        """The hosts refused right now, and until when: to look up without a call."""
        return self._book.refused

    def check(self, call: Call) -> None:
        """Raise `RateLimitedError` if the call's host is refused right now."""
        until = self._book.until(call.host)
        if until is None:
            return
        left = until - self._now()
        if left <= 0:
            self._book.lift(call.host)
            return
        self._telemetry.rejection(call.method, call.host, "quota")
        raise RateLimitedError(
            f"{call.where()}: refused, the host's published quota is spent; "
            f"it resets in {left:.3g} s",
            retry_after=left,
            reason="quota",
        )

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
            entries = triples(headers)
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
        reserve = self._reserve
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

    @property
    def reserve(self) -> float:
        """The share of a published quota held back."""
        return self._reserve

    @property
    def telemetry(self) -> Telemetry:
        """Where refusals are reported."""
        return self._telemetry

    @staticmethod
    def _from_mapping(
        headers: httpx.Headers,
    ) -> Callable[[bytes], list[str] | None]:
        def values(name: bytes) -> list[str] | None:
            return headers.get_list(name.decode("ascii")) or None

        return values


class AsyncQuota:
    """`QuotaStrategy` on an event loop."""

    __slots__ = ("_next", "_refused", "strategy")

    def __init__(self, next: AsyncHandler, strategy: QuotaStrategy) -> None:
        self._next = next
        self.strategy = strategy
        self._refused = strategy.refused

    async def handle(self, request: httpx.Request, call: Call) -> httpx.Response:
        """Refuse a host whose quota is spent; read the quota of each answer."""
        strategy = self.strategy
        if call.host in self._refused:  # rare: look before the call
            strategy.check(call)
        response = await self._next.handle(request, call)
        # `read`, unrolled: most answers publish nothing, one call less each.
        quotas = strategy.published(response)
        if quotas is not None:
            strategy.apply(call, response, quotas)
        return response


class SyncQuota:
    """`AsyncQuota` for the sync chain."""

    __slots__ = ("_next", "_refused", "strategy")

    def __init__(self, next: SyncHandler, strategy: QuotaStrategy) -> None:
        self._next = next
        self.strategy = strategy
        self._refused = strategy.refused

    def handle_sync(self, request: httpx.Request, call: Call) -> httpx.Response:
        """Refuse a host whose quota is spent; read the quota of each answer."""
        strategy = self.strategy
        if call.host in self._refused:  # rare: look before the call
            strategy.check(call)
        response = self._next.handle_sync(request, call)
        # `read`, unrolled: most answers publish nothing, one call less each.
        quotas = strategy.published(response)
        if quotas is not None:
            strategy.apply(call, response, quotas)
        return response


def split_header_names(names: object) -> object:
    """The three names as a tuple, from a sequence or one comma-joined string.

    Raises:
        ValueError: Not exactly three strings: one error, on the field.
    """
    if isinstance(names, str):
        names = [name.strip() for name in names.split(",")]
    if not isinstance(names, list | tuple) or not all(
        isinstance(name, str) for name in cast("Sequence[object]", names)
    ):
        raise ValueError(
            "give three header names (limit, remaining, reset), as a list or "
            "joined by commas"
        )
    found = tuple(cast("Sequence[str]", names))
    if len(found) != 3:
        raise ValueError(
            "give exactly three header names (limit, remaining, reset), "
            f"got {len(found)}"
        )
    return found


def check_legacy_headers(names: tuple[str, str, str]) -> tuple[str, str, str]:
    """`names`, if they are three distinct HTTP header names; else `ValueError`."""
    for name in names:
        if not is_token(name):
            raise ValueError(f"{name!r} is not an HTTP header name")
    if len({name.lower() for name in names}) != len(names):
        raise ValueError("the three header names must differ (in any case)")
    return names


HeaderNames = Annotated[
    tuple[str, str, str],
    BeforeValidator(split_header_names),
    AfterValidator(check_legacy_headers),
]
"""The legacy triple's names: three distinct header names, or one string of
them joined by commas."""


class QuotaOptions(BaseModel):
    """The published-quota reader of the standard pipeline.

    Attributes:
        quota_reserve: The share of a published quota held back, in [0, 1):
            attempts are refused once ``remaining <= quota_reserve x quota``.
        quota_legacy_headers: The legacy triple's names: limit, remaining,
            reset.
        maximum_hosts: The hosts refused at once that are remembered.
    """

    model_config = FROZEN

    quota_reserve: float = Field(
        default=DEFAULT_QUOTA_RESERVE, ge=0.0, lt=1.0, allow_inf_nan=False
    )
    quota_legacy_headers: HeaderNames = DEFAULT_QUOTA_LEGACY_HEADERS
    maximum_hosts: Count = Field(default=DEFAULT_MAXIMUM_HOSTS, ge=1)

    is_deadline: ClassVar[bool] = False
    repeats: ClassVar[bool] = False

    @property
    def label(self) -> str:
        """``"quota"``."""
        return "quota"

    @property
    def waits_outside_attempts(self) -> bool:
        """The quota never waits: the retry around it does."""
        return False

    def will_repeat(self, request: httpx.Request) -> bool:
        """Never: the quota sends nothing twice."""
        return False

    def build_async(
        self, next: AsyncHandler, context: BuildContext, place: Placement
    ) -> AsyncQuota:
        """The quota reader, around `next`."""
        return AsyncQuota(
            next,
            QuotaStrategy(
                options=self, clock=context.clock, telemetry=context.telemetry
            ),
        )

    def build_sync(
        self, next: SyncHandler, context: BuildContext, place: Placement
    ) -> SyncQuota:
        """The quota reader, around `next`."""
        return SyncQuota(
            next,
            QuotaStrategy(
                options=self, clock=context.clock, telemetry=context.telemetry
            ),
        )
