# A copy of tools/primitives/config_sections.py; do not edit. Edit that file and
# run `python tools/copy_primitives.py`, which writes every copy.
"""The sections under ``resilience`` in a configuration mapping, and their check.

Both resilience packages read one configuration mapping (nested dicts from
TOML, JSON or YAML): ``resilience.mediator`` for the mediator's retry,
``resilience.http`` for the HTTP clients. A key under ``resilience`` that is
neither would be read by nobody, so a misspelt section (``resilience.mediatr``)
is refused where the mapping is read, with the nearest known name.

The packages may not import each other, so each keeps a copy of this module,
written by tools/copy_primitives.py from tools/primitives/config_sections.py:
the list of sections is the same in both.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from typing import Any, Final, cast

__all__ = ["ROOT", "SECTIONS", "check_sections"]

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
