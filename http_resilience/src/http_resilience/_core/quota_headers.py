"""Reading the quota a host publishes: the IETF fields and the legacy triple.

Two shapes are read, and the standard one wins where a response has both:

- ``RateLimit-Policy: "burst";q=100;w=60`` and ``RateLimit: "burst";r=50;t=30``
  (draft-ietf-httpapi-ratelimit-headers): Lists of RFC 9651 structured fields,
  one member per policy, named by a String. ``q`` is the policy's quota, ``r``
  what is left of it, ``t`` the seconds until it resets.
- ``X-RateLimit-Limit``, ``X-RateLimit-Remaining`` and ``X-RateLimit-Reset``
  (the names are configurable): the quota, what is left, and the reset, in
  seconds from now or, above 1e9, as a Unix time.

Nothing here raises on what a server sends: a field that does not parse is
ignored, as RFC 9651 asks (the whole field, not just the bad member; the Lists
are read by `structured_fields`), and a host whose fields say nothing usable
has no quota. No I/O, no clock: the
present is passed in.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Final, NamedTuple, TypeGuard

from http_resilience._core.structured_fields import (
    PARSED_KEPT,
    SF_STRING,
    SF_TOKEN,
    parse_list,
)

__all__ = [
    "LEGACY_HEADERS",
    "MAX_RESET",
    "Quota",
    "legacy_quota",
    "standard_quota",
]

LEGACY_HEADERS: Final = (
    "X-RateLimit-Limit",
    "X-RateLimit-Remaining",
    "X-RateLimit-Reset",
)
"""The legacy triple's names, in the order limit, remaining, reset."""

MAX_RESET: Final = 86_400.0
"""The longest reset read, in seconds (a day); a later one is capped."""

UNIX_TIME_ABOVE: Final = 1e9
"""A legacy reset above this is a Unix time (2001 on), else seconds from now."""


class Quota(NamedTuple):
    """What a host's response says of one of its quotas.

    Attributes:
        remaining: Requests left in the current window.
        limit: The window's quota, when published (the reserve's denominator).
        reset: Seconds until the window resets, when published.
    """

    remaining: int
    limit: int | None
    reset: float | None


# --- the two shapes ------------------------------------------------------------


def standard_quota(policy: Sequence[str], ratelimit: Sequence[str]) -> list[Quota]:
    """Each quota the ``RateLimit`` field reports, with its policy's ``q``.

    Args:
        policy: Every ``RateLimit-Policy`` line of the response.
        ratelimit: Every ``RateLimit`` line.

    Returns:
        One `Quota` per ``RateLimit`` member with a valid ``r``; its `limit`
        is ``q`` of the ``RateLimit-Policy`` member of the same name, if any.
        Empty when ``RateLimit`` is missing or does not parse.

    Example:
        >>> standard_quota(['"burst";q=100;w=60'], ['"burst";r=50;t=30'])
        [Quota(remaining=50, limit=100, reset=30.0)]
    """
    if not ratelimit:
        return []
    single = (
        _ONE_REPORT.fullmatch(ratelimit[0].strip(" ")) if len(ratelimit) == 1 else None
    )
    if single is not None:
        # The usual report, one policy, what is left and the reset: read
        # without building the List; the policy is remembered by `parse_list`.
        name, left, reset = single.groups()
        key: Name = name[1:-1] if name.startswith('"') else name
        return [
            Quota(
                remaining=int(left),
                limit=_limits(policy).get(key),
                reset=min(float(reset), MAX_RESET),
            )
        ]
    reports = parse_list(ratelimit)
    if not reports:
        return []
    limits = _limits(policy)
    found: list[Quota] = []
    for member in reports:
        remaining = member.parameters.get("r")
        if not _count(remaining):
            continue
        reset = member.parameters.get("t")
        name = member.value if isinstance(member.value, Name) else None
        found.append(
            Quota(
                remaining=remaining,
                limit=None if name is None else limits.get(name),
                reset=min(float(reset), MAX_RESET) if _count(reset) else None,
            )
        )
    return found


def _limits(policy: Sequence[str]) -> Mapping[Name, int]:
    """Each policy's quota ``q``, by its name."""
    return _limits_of(", ".join(policy)) if policy else _NO_LIMITS


@functools.lru_cache(maxsize=PARSED_KEPT)
def _limits_of(text: str) -> Mapping[Name, int]:
    limits: dict[Name, int] = {}
    for member in parse_list([text]) or ():
        quota = member.parameters.get("q")
        if _count(quota) and isinstance(member.value, Name):
            limits[member.value] = quota
    return MappingProxyType(limits)


_NO_LIMITS: Final[Mapping[Name, int]] = MappingProxyType({})


_ONE_REPORT: Final = re.compile(
    rf"({SF_STRING}|{SF_TOKEN});r=([0-9]{{1,15}});t=([0-9]{{1,15}})"
)


Name = str | bytes | int
"""What may name a policy: a String (the draft's), a Token, bytes, a number."""


def _count(value: object) -> TypeGuard[int]:
    """Whether `value` is a non-negative integer (and not a boolean)."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


_INTEGER: Final = re.compile(r"[0-9]{1,15}")
_SECONDS: Final = re.compile(r"[0-9]{1,15}(?:\.[0-9]{1,9})?")


def legacy_quota(
    limit: Sequence[str], remaining: Sequence[str], reset: Sequence[str], *, now: float
) -> Quota | None:
    """The legacy triple's quota, or None when there is no valid remaining count.

    Each header counts only when sent once with a plain number; the limit may
    carry a comment after it (``100, 100;w=60``), of which its first number is
    read. A reset above `UNIX_TIME_ABOVE` is a Unix time, read against `now`.

    Args:
        limit: Every value of the limit header.
        remaining: Every value of the remaining header.
        reset: Every value of the reset header.
        now: The present as a Unix time (seconds since 1970, UTC).

    Example:
        >>> legacy_quota(["100"], ["7"], ["30"], now=0.0)
        Quota(remaining=7, limit=100, reset=30.0)
        >>> legacy_quota(["100"], ["seven"], ["30"], now=0.0) is None
        True
    """
    left = _single(remaining, _INTEGER)
    if left is None:
        return None
    quota = None
    if len(limit) == 1:
        first = re.match(r"\s*([0-9]{1,15})\s*(?:[,;]|$)", limit[0])
        if first is not None:
            quota = int(first.group(1))
    seconds = None
    text = _single(reset, _SECONDS)
    if text is not None:
        value = float(text)
        if value > UNIX_TIME_ABOVE:
            value -= now
        if math.isfinite(value):
            seconds = min(max(value, 0.0), MAX_RESET)
    return Quota(remaining=int(left), limit=quota, reset=seconds)


def _single(values: Sequence[str], pattern: re.Pattern[str]) -> str | None:
    if len(values) != 1:
        return None
    text = values[0].strip(" \t")
    return text if pattern.fullmatch(text) else None
