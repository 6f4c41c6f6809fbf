"""How the standard pipeline's options are read: sections, then the environment.

`HttpResilienceOptions.from_config` reads ``resilience.http`` and the
client's own section under it (`read_config`), and every client's options,
from the configuration or given in code, take the environment's
``RESILIENCE__HTTP__...`` variables on top (`apply_environment`). A value
that fails names the client, and the variable it came from.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Final, TypeVar, cast

from pydantic import BaseModel, ValidationError

from http_resilience._primitives.config import check_sections, mapping, section

__all__ = [
    "ENVIRONMENT_PREFIX",
    "apply_environment",
    "client_environment",
    "client_variables",
    "env_client_name",
    "read_config",
]

ENVIRONMENT_PREFIX: Final = "RESILIENCE__HTTP__"

_CLIENTS = "clients"

_O = TypeVar("_O", bound=BaseModel)


def apply_environment(
    options: _O, *, client: str, environ: Mapping[str, str] | None = None
) -> _O:
    """`options` with the environment's variables for `client` on top.

    Options given in code stand where the configuration sections would
    (steps 2 and 3 of `HttpResilienceOptions.from_config`); the operator's
    ``RESILIENCE__HTTP__<FIELD>`` and then
    ``RESILIENCE__HTTP__CLIENTS__<CLIENT>__<FIELD>`` variables win over them.
    Without such a variable, `options` itself.

    Raises:
        pydantic.ValidationError: A variable names no field or holds an
            invalid value; the title names the client and the variable.
    """
    environment = os.environ if environ is None else environ
    found = _from_environment(environment, client)
    if not found:
        return options
    values = {name: getattr(options, name) for name in type(options).model_fields}
    return _validated(type(options), values, found, client)


def read_config(
    cls: type[_O],
    section_name: str,
    config: Mapping[str, Any] | None,
    *,
    client: str,
    environ: Mapping[str, str] | None,
) -> _O:
    """One client's `cls`, from `section_name`, its client's section, the environment.

    See `HttpResilienceOptions.from_config`, which this reads for.
    """
    check_sections(config)
    where = f"HTTP client {client!r}: "
    found = section(config or {}, section_name, prefix=where)
    values: dict[str, Any] = {k: v for k, v in found.items() if k != _CLIENTS}
    clients = mapping(
        found.get(_CLIENTS, {}), f"{section_name}.{_CLIENTS}", prefix=where
    )
    own_section = clients.get(client, {})
    if not isinstance(own_section, Mapping):
        raise TypeError(
            f"{where}configuration section '{section_name}.{_CLIENTS}' holds "
            f"a value of type {type(own_section).__name__} for it, not a mapping"
        )
    values.update(cast("Mapping[str, Any]", own_section))
    environment = os.environ if environ is None else environ
    return _validated(cls, values, _from_environment(environment, client), client)


def client_environment(environment: Mapping[str, str], client: str) -> tuple[str, ...]:
    """The ``RESILIENCE__HTTP__CLIENTS__<CLIENT>__...`` variables for `client`."""
    wanted = env_client_name(client)
    return tuple(
        sorted(name for name, named in client_variables(environment) if named == wanted)
    )


def _validated(
    cls: type[_O],
    values: dict[str, Any],
    environment: dict[str, tuple[str, str]],
    client: str,
) -> _O:
    """Validate `values`, the environment on top; errors name client and variables."""
    values.update({field: value for field, (_, value) in environment.items()})
    try:
        return cls.model_validate(values, context={"client": client})
    except ValidationError as error:
        blamed = sorted(
            {
                environment[field][0]
                for entry in error.errors()
                if entry["loc"] and (field := str(entry["loc"][0])) in environment
            }
        )
        raise _naming(error, client, blamed) from None


def env_client_name(client: str) -> str:
    """How the environment spells client `client`: upper case, ``-`` as ``_``."""
    return client.upper().replace("-", "_")


def _from_environment(
    environment: Mapping[str, str], client: str
) -> dict[str, tuple[str, str]]:
    """Each field the environment sets for `client`: its variable and value.

    A client's own variable wins over the shared one for the same field.
    """
    shared: dict[str, tuple[str, str]] = {}
    own: dict[str, tuple[str, str]] = {}
    wanted = env_client_name(client)
    for name, value in environment.items():
        split = _split_variable(name)
        if split is None:
            continue
        named, field = split
        if named is None:
            shared[field] = (name, value)
        elif named == wanted:
            own[field] = (name, value)
    return {**shared, **own}


def _split_variable(name: str) -> tuple[str | None, str] | None:
    """The client (upper case, None for every client) and field `name` sets.

    None when `name` does not start with ``RESILIENCE__HTTP__``. A
    ``RESILIENCE__HTTP__CLIENTS__<CLIENT>`` without a field is a field no
    client knows, shared, so that reading options refuses it.
    """
    upper = name.upper()
    if not upper.startswith(ENVIRONMENT_PREFIX):
        return None
    rest = upper[len(ENVIRONMENT_PREFIX) :]
    clients_prefix = _CLIENTS.upper() + "__"
    if rest.startswith(clients_prefix):
        named, separator, field = rest[len(clients_prefix) :].rpartition("__")
        if separator:
            return named, field.lower()
    return None, rest.lower()


def client_variables(environment: Mapping[str, str]) -> Iterator[tuple[str, str]]:
    """Each ``RESILIENCE__HTTP__CLIENTS__<CLIENT>__<FIELD>`` variable, and its client.

    The client as the variable spells it, upper case: compare it with
    `env_client_name` of a client's name.
    """
    for name in environment:
        split = _split_variable(name)
        if split is not None and split[0] is not None:
            yield name, split[0]


def _naming(
    error: ValidationError, client: str, variables: Sequence[str] = ()
) -> ValidationError:
    """`error` again, its title naming the client (or a note, if it cannot be).

    `variables` are the environment variables the failing values came from.
    """
    source = f" (from environment variable {', '.join(variables)})" if variables else ""
    try:
        return ValidationError.from_exception_data(
            f"HttpResilienceOptions of HTTP client {client!r}{source}",
            cast("Any", error.errors()),
        )
    except (KeyError, TypeError, ValueError):  # an error type pydantic cannot rebuild
        error.add_note(f"in the options of HTTP client {client!r}{source}")
        return error
