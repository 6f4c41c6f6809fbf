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
ignored, as RFC 9651 asks (the whole field, not just the bad member), and a
host whose fields say nothing usable has no quota. No I/O, no clock: the
present is passed in.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Final, NamedTuple, TypeAlias, TypeGuard

__all__ = [
    "LEGACY_HEADERS",
    "MAX_RESET",
    "Quota",
    "SfItem",
    "legacy_quota",
    "parse_list",
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


# --- RFC 9651 lists ------------------------------------------------------------

BareItem: TypeAlias = int | float | str | bytes | bool
Parameters: TypeAlias = dict[str, BareItem]


class SfItem(NamedTuple):
    """One member of a structured-field List: a value and its parameters.

    An inner list's value is the tuple of its items' values.
    """

    value: BareItem | tuple[BareItem, ...]
    parameters: Parameters


class _Invalid(Exception):
    """The field does not parse: it is ignored whole."""


_KEY: Final = re.compile(r"[a-z*][a-z0-9_.*-]*")
_TOKEN: Final = re.compile(r"[A-Za-z*][!#$%&'*+\-.^_`|~0-9A-Za-z:/]*")
_NUMBER: Final = re.compile(r"-?[0-9]+(?:\.[0-9]+)?")
_BINARY: Final = re.compile(r":([A-Za-z0-9+/=]*):")


# The shape nearly every quota field has: Strings, Tokens and Integers, with
# parameters of the same (or Booleans), no escapes, no inner lists. A field of
# that shape is read with three regular expressions; any other goes through
# the whole grammar.
_S_TOKEN = r"[A-Za-z*][!#$%&'*+\-.^_`|~0-9A-Za-z:/]*"
_S_STRING = r'"[ !#-\[\]-~]*"'
_S_INTEGER = r"-?[0-9]{1,15}"
_S_VALUE = rf"(?:{_S_INTEGER}|{_S_STRING}|{_S_TOKEN}|\?[01])"
_S_PARAMETER = rf";[ ]*[a-z*][a-z0-9_.*-]*(?:={_S_VALUE})?"
_S_MEMBER = rf"(?:{_S_STRING}|{_S_TOKEN}|{_S_INTEGER})(?:{_S_PARAMETER})*"
_SIMPLE_LIST: Final = re.compile(rf"{_S_MEMBER}(?:[ \t]*,[ \t]*{_S_MEMBER})*")
_SIMPLE_MEMBER: Final = re.compile(
    rf"({_S_STRING}|{_S_TOKEN}|{_S_INTEGER})((?:{_S_PARAMETER})*)"
)
_SIMPLE_PARAMETER: Final = re.compile(rf";[ ]*([a-z*][a-z0-9_.*-]*)(?:=({_S_VALUE}))?")


def _simple_value(text: str) -> BareItem:
    first = text[0]
    if first == '"':
        return text[1:-1]
    if first == "?":
        return text == "?1"
    if first == "-" or first in _DIGITS:
        return int(text)
    return text


_DIGITS: Final = frozenset("0123456789")


def _simple_list(text: str) -> list[SfItem]:
    value = _simple_value
    return [
        SfItem(
            value(item),
            {
                key: value(raw) if raw else True
                for key, raw in _SIMPLE_PARAMETER.findall(parameters)
            },
        )
        for item, parameters in _SIMPLE_MEMBER.findall(text)
    ]


def parse_list(lines: Sequence[str]) -> tuple[SfItem, ...] | None:
    """A structured-field List from its field lines, or None if it does not parse.

    The lines are joined with ``", "``, as RFC 9110 combines a field sent more
    than once. The last `PARSED_KEPT` fields read are remembered: a host
    sends the same policy on every answer.

    Example:
        >>> [(m.value, m.parameters) for m in parse_list(['"burst";q=100;w=60']) or ()]
        [('burst', {'q': 100, 'w': 60})]
        >>> parse_list(['"burst";q=1.5.5']) is None
        True
    """
    return _parse(", ".join(lines).strip(" "))


PARSED_KEPT: Final = 256


@functools.lru_cache(maxsize=PARSED_KEPT)
def _parse(text: str) -> tuple[SfItem, ...] | None:
    if not text:
        return None
    if _SIMPLE_LIST.fullmatch(text):
        return tuple(_simple_list(text))
    try:
        members, at = _members(text)
    except _Invalid:
        return None
    return tuple(members) if at == len(text) else None


def _members(text: str) -> tuple[list[SfItem], int]:
    members: list[SfItem] = []
    at = 0
    while True:
        if text.startswith("(", at):
            value, at = _inner_list(text, at)
            parameters, at = _parameters(text, at)
            members.append(SfItem(value, parameters))
        else:
            item, at = _bare_item(text, at)
            parameters, at = _parameters(text, at)
            members.append(SfItem(item, parameters))
        at = _skip(text, at, " \t")
        if at == len(text):
            return members, at
        if text[at] != ",":
            raise _Invalid
        at = _skip(text, at + 1, " \t")
        if at == len(text):
            raise _Invalid  # a trailing comma


def _inner_list(text: str, at: int) -> tuple[tuple[BareItem, ...], int]:
    at += 1
    items: list[BareItem] = []
    while True:
        at = _skip(text, at, " ")
        if text.startswith(")", at):
            return tuple(items), at + 1
        item, at = _bare_item(text, at)
        _, at = _parameters(text, at)
        items.append(item)
        if at < len(text) and text[at] not in " )":
            raise _Invalid


def _parameters(text: str, at: int) -> tuple[Parameters, int]:
    parameters: Parameters = {}
    while text.startswith(";", at):
        at = _skip(text, at + 1, " ")
        key = _KEY.match(text, at)
        if key is None:
            raise _Invalid
        at = key.end()
        value: BareItem = True
        if text.startswith("=", at):
            value, at = _bare_item(text, at + 1)
        parameters[key.group()] = value  # a repeated key: the last wins
    return parameters, at


def _bare_item(text: str, at: int) -> tuple[BareItem, int]:
    if at >= len(text):
        raise _Invalid
    first = text[at]
    if first == '"':
        return _string(text, at)
    if first == "?":
        flag = text[at + 1 : at + 2]
        if flag not in ("0", "1"):
            raise _Invalid
        return flag == "1", at + 2
    if first == ":":
        found = _BINARY.match(text, at)
        if found is None:
            raise _Invalid
        return found.group(1).encode("ascii"), found.end()
    if first == "@":
        number, end = _number(text, at + 1)
        if not isinstance(number, int):
            raise _Invalid
        return number, end
    if first == "-" or first.isdigit():
        return _number(text, at)
    token = _TOKEN.match(text, at)
    if token is None:
        raise _Invalid  # a display string (%"...") or anything else
    return token.group(), token.end()


def _number(text: str, at: int) -> tuple[int | float, int]:
    found = _NUMBER.match(text, at)
    if found is None:
        raise _Invalid
    digits = found.group()
    whole, _, fraction = digits.lstrip("-").partition(".")
    if fraction:
        if len(whole) > 12 or len(fraction) > 3:
            raise _Invalid
        return float(digits), found.end()
    if len(whole) > 15:
        raise _Invalid
    return int(digits), found.end()


def _string(text: str, at: int) -> tuple[str, int]:
    out: list[str] = []
    at += 1
    while at < len(text):
        char = text[at]
        if char == "\\":
            escaped = text[at + 1 : at + 2]
            if escaped not in ('"', "\\"):
                raise _Invalid
            out.append(escaped)
            at += 2
        elif char == '"':
            return "".join(out), at + 1
        elif " " <= char <= "~":
            out.append(char)
            at += 1
        else:
            raise _Invalid
    raise _Invalid  # no closing quote


def _skip(text: str, at: int, spaces: str) -> int:
    while at < len(text) and text[at] in spaces:
        at += 1
    return at


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
    rf"({_S_STRING}|{_S_TOKEN});r=([0-9]{{1,15}});t=([0-9]{{1,15}})"
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
