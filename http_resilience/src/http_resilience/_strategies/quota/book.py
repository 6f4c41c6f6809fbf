"""Which published quotas are spent, and the hosts refused until when.

The pure part of the quota: `is_spent` and `spent_for` read a `Quota`, and
`QuotaBook` keeps only the hosts refused right now, at most `maximum_hosts`,
each until a time it is told (seconds on the pipeline's clock).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping

from http_resilience._core.quota_headers import Quota

__all__ = ["QuotaBook", "is_spent", "spent_for"]


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
