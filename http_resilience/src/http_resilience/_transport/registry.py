"""Which resilient transports a client built here runs on.

`create_async_client`, `create_client` and the factory's clients remember
them, so `http_resilience.health` and `CircuitControl` reach a client's
breakers through the client itself, never through httpx's private
attributes. The map holds clients weakly: a client let go is forgotten.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from typing import TypeVar

import httpx

from http_resilience._transport.transport import (
    AsyncResilientTransport,
    ResilientTransport,
)

__all__ = ["remember_transports", "transports_of"]

Resilient = AsyncResilientTransport | ResilientTransport
_C = TypeVar("_C", httpx.AsyncClient, httpx.Client)

_BUILT: weakref.WeakKeyDictionary[
    httpx.AsyncClient | httpx.Client, tuple[Resilient, ...]
] = weakref.WeakKeyDictionary()


def remember_transports(client: _C, transports: Sequence[Resilient]) -> _C:
    """`client`, remembered as running on `transports` (its own, then mounts)."""
    _BUILT[client] = tuple(transports)
    return client


def transports_of(client: httpx.AsyncClient | httpx.Client) -> tuple[Resilient, ...]:
    """The resilient transports of `client`, its own first, then its mounts'.

    Raises:
        TypeError: `client` was not built by this package.
    """
    found = _BUILT.get(client)
    if found is None:
        kind = type(client).__qualname__
        raise TypeError(
            f"this {kind} was not built by create_async_client, create_client "
            "or an HttpClientFactory: give its AsyncResilientTransport (or "
            "ResilientTransport) instead"
        )
    return found
