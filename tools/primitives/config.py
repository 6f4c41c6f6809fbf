"""Reading a configuration mapping: its sections, and their check.

Both resilience packages read one configuration mapping (nested dicts from
TOML, JSON or YAML): ``resilience.mediator`` for the mediator's retry,
``resilience.http`` for the HTTP clients. `section` finds one of them, and
names the first value on the way that is not a mapping. A key under
``resilience`` that is neither section would be read by nobody, so a misspelt
section (``resilience.mediatr``) is refused where the mapping is read, with
the nearest known name (`check_sections`).

The packages may not import each other, so each keeps a copy of this module,
written by tools/copy_primitives.py from tools/primitives/config.py: the list
of sections, and the way a section is found, are the same in both.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from typing import Any, Final, cast

__all__ = ["ROOT", "SECTIONS", "check_sections", "mapping", "section"]

ROOT: Final = "resilience"
"""The key every resilience section sits under."""

SECTIONS: Final[frozenset[str]] = frozenset({"http", "mediator"})
"""The sections under ``resilience`` that a package reads."""


def check_sections(config: Mapping[str, Any] | None) -> None:
    """Refuse a key under ``resilience`` that is not a known section.

    Nothing to check when `config` has no ``resilience`` mapping; a value
    that is not a mapping is left to the reader, which names it.

    Raises:
        ValueError: Naming every unknown section, each with the nearest known
            one when there is one, and the known sections.

    Example:
        >>> check_sections({"resilience": {"mediator": {}, "http": {}}})
        >>> check_sections({"resilience": {"mediatr": {}}})  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        ValueError: unknown configuration section 'resilience.mediatr' (did you ...
    """
    if not isinstance(config, Mapping):
        return
    root: object = cast("Mapping[str, object]", config).get(ROOT)
    if not isinstance(root, Mapping):
        return
    known = sorted(SECTIONS)
    problems: list[str] = []
    for key in sorted(map(str, cast("Mapping[object, object]", root))):
        if key in SECTIONS:
            continue
        near = difflib.get_close_matches(key, known, n=1)
        hint = f" (did you mean '{ROOT}.{near[0]}'?)" if near else ""
        problems.append(f"unknown configuration section '{ROOT}.{key}'{hint}")
    if problems:
        sections = ", ".join(f"'{ROOT}.{name}'" for name in known)
        raise ValueError(
            f"{'; '.join(problems)}; the sections under '{ROOT}' are {sections}"
        )


def section(
    config: Mapping[str, Any] | None, dotted: str, *, prefix: str = ""
) -> Mapping[str, Any]:
    """The mapping at `dotted` (``"resilience.http"``) in `config`; empty if absent.

    Args:
        config: The whole configuration; None reads as empty.
        dotted: The section's keys from the root, joined by dots.
        prefix: Put before an error's message (``"HTTP client 'billing': "``).

    Raises:
        TypeError: `config`, or a value on the way to the section or the
            section itself, is not a mapping; the message names its path.

    Example:
        >>> section({"resilience": {"http": {"retries": 2}}}, "resilience.http")
        {'retries': 2}
        >>> section(None, "resilience.http")
        {}
        >>> section({"resilience": []}, "resilience.http")
        Traceback (most recent call last):
        ...
        TypeError: configuration section 'resilience' is not a mapping
    """
    found = mapping({} if config is None else config, "(root)", prefix=prefix)
    path: list[str] = []
    for part in dotted.split("."):
        path.append(part)
        found = mapping(found.get(part, {}), ".".join(path), prefix=prefix)
    return found


def mapping(found: object, where: str, *, prefix: str = "") -> Mapping[str, Any]:
    """`found` as a mapping; a `TypeError` naming section `where` if it is not one.

    Example:
        >>> mapping({"clients": {}}, "resilience.http")
        {'clients': {}}
    """
    if not isinstance(found, Mapping):
        raise TypeError(f"{prefix}configuration section {where!r} is not a mapping")
    return cast("Mapping[str, Any]", found)
