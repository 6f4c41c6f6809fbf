"""RFC 9651 structured-field Lists: members, inner lists and their parameters.

`parse_list` reads the Lists the quota fields are (`quota_headers`). It never
raises on what a server sends: a field that does not parse is None, ignored
whole as RFC 9651 asks (the whole field, not just the bad member). No I/O.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from typing import Final, NamedTuple, TypeAlias

__all__ = [
    "PARSED_KEPT",
    "SF_STRING",
    "SF_TOKEN",
    "BareItem",
    "SfItem",
    "parse_list",
]

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
SF_TOKEN: Final = r"[A-Za-z*][!#$%&'*+\-.^_`|~0-9A-Za-z:/]*"
SF_STRING: Final = r'"[ !#-\[\]-~]*"'
_SF_INTEGER = r"-?[0-9]{1,15}"
_SF_VALUE = rf"(?:{_SF_INTEGER}|{SF_STRING}|{SF_TOKEN}|\?[01])"
_SF_PARAMETER = rf";[ ]*[a-z*][a-z0-9_.*-]*(?:={_SF_VALUE})?"
_SF_MEMBER = rf"(?:{SF_STRING}|{SF_TOKEN}|{_SF_INTEGER})(?:{_SF_PARAMETER})*"
_SIMPLE_LIST: Final = re.compile(rf"{_SF_MEMBER}(?:[ \t]*,[ \t]*{_SF_MEMBER})*")
_SIMPLE_MEMBER: Final = re.compile(
    rf"({SF_STRING}|{SF_TOKEN}|{_SF_INTEGER})((?:{_SF_PARAMETER})*)"
)
_SIMPLE_PARAMETER: Final = re.compile(rf";[ ]*([a-z*][a-z0-9_.*-]*)(?:=({_SF_VALUE}))?")


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
