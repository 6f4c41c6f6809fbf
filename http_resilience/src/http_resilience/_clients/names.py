"""Configuration for a client a factory does not have: refused, naming it.

Once a factory's client names are fixed, it checks what the configuration says
about clients against them:

- every section under ``resilience.http.clients`` must name one of its clients:
  the mapping is given to this factory, so a section for any other name is a
  mistake (a program with two factories gives each its own mapping);
- a ``RESILIENCE__HTTP__CLIENTS__<CLIENT>__<FIELD>`` variable whose client is
  not one of its own is refused when the name is close to one of them (by
  `difflib.get_close_matches` and its default cutoff, 0.6), and otherwise left
  alone: the environment is the whole process's, and another factory may have
  that client.
"""

from __future__ import annotations

import difflib
from collections.abc import Collection, Mapping
from typing import Any, cast

from http_resilience._pipelines.standard import (
    HttpResilienceOptions,
    client_variables,
    env_client_name,
)

__all__ = ["check_client_names"]

_CLIENTS_SECTION = f"{HttpResilienceOptions.SECTION}.clients"


def check_client_names(
    known: Collection[str],
    config: Mapping[str, Any] | None,
    environment: Mapping[str, str],
) -> None:
    """Refuse a section, or a near-miss variable, for a client not in `known`.

    Raises:
        ValueError: Naming every such section and variable, each with the
            nearest known name when there is one, and the names known.
    """
    problems: list[str] = []
    for name in sorted(_configured_names(config)):
        if name not in known:
            problems.append(
                f"configuration section '{_CLIENTS_SECTION}.{name}' is for HTTP "
                f"client {name!r}, which this factory does not have"
                + _nearest(name, {client: client for client in known})
            )
    spelled = {env_client_name(client): client for client in known}
    for variable, client in sorted(client_variables(environment)):
        if client not in spelled:
            near = _nearest(client, spelled)
            if near:
                problems.append(
                    f"environment variable {variable} is for HTTP client "
                    f"{client!r}, which this factory does not have{near}"
                )
    if problems:
        names = ", ".join(repr(client) for client in sorted(known))
        raise ValueError(f"{'; '.join(problems)}; it has {names}")


def _nearest(name: str, spelled: Mapping[str, str]) -> str:
    """`` (did you mean 'x'?)`` for the known name nearest `name`, or nothing.

    `spelled` maps each known name, spelled as `name` is, to the name itself.
    """
    found = difflib.get_close_matches(name, sorted(spelled), n=1)
    return f" (did you mean {spelled[found[0]]!r}?)" if found else ""


def _configured_names(config: Mapping[str, Any] | None) -> list[str]:
    """The client names with a section of their own in `config`."""
    section: object = config or {}
    for part in _CLIENTS_SECTION.split("."):
        if not isinstance(section, Mapping):
            # `from_config` names the section that is not a mapping.
            return []
        section = cast("Mapping[str, object]", section).get(part, {})
    if not isinstance(section, Mapping):
        return []
    return [str(name) for name in cast("Mapping[object, object]", section)]
