"""The bounded attributes both listeners of `http_resilience.otel` record.

The client's name, the method (``_OTHER`` for one the HTTP conventions do not
know), the normalised host (``server.address``, ``server.port``,
``url.scheme``), an outcome class and a reason. Never a URL path, a query,
userinfo, an id or a header value.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Final, TypeAlias

__all__ = [
    "INSTRUMENTATION",
    "Attributes",
    "base_attributes",
    "breaker_attributes",
    "checked_provider",
    "host_attributes",
    "known_method",
    "outcome_attributes",
    "outcome_class",
    "with_attribute",
]

Attributes: TypeAlias = Mapping[str, str | int | bool]

INSTRUMENTATION: Final = "http_resilience"
"""The meter's and the tracer's name."""

_KNOWN_METHODS: Final = frozenset(
    {"CONNECT", "DELETE", "GET", "HEAD", "OPTIONS", "PATCH", "POST", "PUT", "TRACE"}
)
_CANCELLED: Final = frozenset({"CancelledError", "Cancelled"})


def outcome_class(outcome: str, *, rejected: bool = False) -> str:
    """The bounded class of an attempt's or a call's `outcome`.

    ``"1xx"`` to ``"5xx"`` for a status code; ``"rejected"`` for a call refused
    in this process; ``"cancelled"`` for a cancelled one; ``"error"`` for
    any other exception.

    Example:
        >>> outcome_class("503"), outcome_class("ConnectError")
        ('5xx', 'error')
        >>> outcome_class("BrokenCircuitError", rejected=True)
        'rejected'
    """
    if rejected:
        return "rejected"
    if outcome.isdigit():
        return f"{outcome[0]}xx"
    if outcome in _CANCELLED:
        return "cancelled"
    return "error"


def known_method(method: str) -> str:
    """The method, or ``"_OTHER"`` for one the conventions do not know (bounded)."""
    return method if method in _KNOWN_METHODS else "_OTHER"


@functools.lru_cache(maxsize=1024)
def server_attributes(host: str) -> tuple[tuple[str, str | int], ...]:
    """``url.scheme``, ``server.address`` and ``server.port`` of a host key."""
    scheme, separator, rest = host.partition("://")
    if not separator:
        return ()  # the breaker shared by every host ("*")
    address, _, port = rest.rpartition(":")
    if not address or not port.isdigit():
        address, port = rest, ""
    address = address.removeprefix("[").removesuffix("]")  # IPv6, as the spec says
    found: list[tuple[str, str | int]] = [
        ("url.scheme", scheme),
        ("server.address", address),
    ]
    if port:
        found.append(("server.port", int(port)))
    return tuple(found)


@functools.lru_cache(maxsize=4096)
def base_attributes(client: str, method: str, host: str) -> Attributes:
    return {
        "http_resilience.client": client,
        "http.request.method": known_method(method),
        **dict(server_attributes(host)),
    }


def with_attribute(
    client: str, method: str, host: str, key: str, value: str | bool
) -> Attributes:
    return {**base_attributes(client, method, host), key: value}


@functools.lru_cache(maxsize=4096)
def outcome_attributes(
    client: str, method: str, host: str, outcome: str, rejected: bool
) -> Attributes:
    attributes: dict[str, str | int | bool] = {
        **base_attributes(client, method, host),
        "http_resilience.outcome": outcome_class(outcome, rejected=rejected),
    }
    if outcome.isdigit():
        status = int(outcome)
        attributes["http.response.status_code"] = status
        if status >= 400:
            attributes["error.type"] = outcome
    else:
        attributes["error.type"] = outcome
    return attributes


@functools.lru_cache(maxsize=4096)
def host_attributes(client: str, host: str) -> Attributes:
    """The client's name and the host's: a host's own figures, no call's."""
    return {"http_resilience.client": client, **dict(server_attributes(host))}


def breaker_attributes(
    client: str, host: str, previous: str, current: str
) -> Attributes:
    return {
        "http_resilience.client": client,
        **dict(server_attributes(host)),
        "http_resilience.breaker.previous_state": previous,
        "http_resilience.breaker.state": current,
    }


def checked_provider(provider: object, kind: type[object], argument: str) -> None:
    """Refuse a provider of the wrong kind here, not at its first use."""
    if provider is not None and not isinstance(provider, kind):
        raise TypeError(
            f"{argument} must be an OpenTelemetry {kind.__name__} or None, "
            f"got {type(provider).__name__}"
        )
