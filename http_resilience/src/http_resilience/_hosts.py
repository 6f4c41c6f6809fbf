"""Per-host state: a host's key, and a bounded registry of per-host breakers.

A host is its scheme, host and port, normalised: ``HTTPS://Example.COM.:443``
and ``https://example.com`` are one host. Path, query and userinfo never take
part, so a key is safe to log.

Eviction and open breakers: the registry holds at most `maximum` hosts. When a
new host arrives and the registry is full, the least recently used host whose
breaker is closed is dropped: a closed breaker holds only recent counts, and
the host starts afresh if it comes back. An open or half-open breaker is never
evicted, because forgetting it would silently close it and send traffic to a
host known to be failing. If every slot holds an open breaker, new hosts share
one overflow breaker until a slot frees (a breaker closes); memory stays
bounded either way, at `maximum` hosts plus the overflow.
"""

from __future__ import annotations

import functools
from collections import OrderedDict
from collections.abc import Callable
from typing import Final

import httpx

from http_resilience._breaker import (
    CLOSED,
    BreakerState,
    CircuitBreaker,
    TransitionListener,
)

__all__ = ["DEFAULT_PORTS", "OVERFLOW_HOST", "HostRegistry", "host_key"]

DEFAULT_PORTS: Final = {"http": 80, "https": 443, "ws": 80, "wss": 443}
OVERFLOW_HOST: Final = "(overflow)"
"""The key events carry for the overflow breaker of a full registry."""

NewBreaker = Callable[[TransitionListener], CircuitBreaker]
"""Builds a breaker that reports its transitions to the callable it is given."""
HostTransition = Callable[[str, BreakerState, BreakerState], None]


def host_key(url: httpx.URL) -> str:
    """``scheme://host:port`` of `url`, normalised.

    The scheme and host in lower case, the host without a trailing dot, an
    IPv6 host in brackets, and the port always written (the scheme's default
    when the URL has none).

    Example:
        >>> host_key(httpx.URL("HTTPS://user:secret@Example.COM.:443/a?token=x"))
        'https://example.com:443'
        >>> host_key(httpx.URL("http://[::1]:8080/"))
        'http://[::1]:8080'
    """
    # A client sends to few hosts, over and over: the key is made once per
    # (scheme, host, port), from a bounded cache.
    return _key(url.scheme, url.host, url.port)


@functools.lru_cache(maxsize=256)
def _key(scheme: str, host: str, port: int | None) -> str:
    # httpx gives the scheme and a named host in lower case already (a named
    # host IDNA-decoded); an IPv6 host keeps the case it was written in.
    if host.endswith("."):
        host = host.rstrip(".")
    if ":" in host:
        host = f"[{host.lower()}]"
    port = port or DEFAULT_PORTS.get(scheme)
    return f"{scheme}://{host}" if port is None else f"{scheme}://{host}:{port}"


class HostRegistry:
    """Breakers by host key, at most `maximum` of them (see the module's notes).

    Args:
        maximum: The bound; at least 1.
        new_breaker: Builds a breaker for a new host, given the callable it must
            report its transitions to.
        on_transition: Told (host key, previous, current) on every transition
            of every breaker it holds.

    Example:
        >>> registry = HostRegistry(
        ...     2,
        ...     lambda on_transition: CircuitBreaker(
        ...         failure_ratio=0.5, minimum_throughput=1,
        ...         sampling_duration=10, break_duration=5,
        ...         on_transition=on_transition,
        ...     ),
        ... )
        >>> for key in ("http://a:80", "http://b:80", "http://c:80"):
        ...     _ = registry.breaker(key)
        >>> registry.keys()
        ['http://b:80', 'http://c:80']
    """

    __slots__ = ("_closed", "_held", "_maximum", "_new", "_on_transition", "_overflow")

    def __init__(
        self,
        maximum: int,
        new_breaker: NewBreaker,
        on_transition: HostTransition | None = None,
    ) -> None:
        if maximum < 1:
            raise ValueError(f"maximum_hosts must be at least 1, got {maximum}")
        self._maximum = maximum
        self._new = new_breaker
        self._on_transition = on_transition
        # Least recently used first. Only closed breakers may be evicted.
        self._closed: OrderedDict[str, CircuitBreaker] = OrderedDict()
        self._held: dict[str, CircuitBreaker] = {}
        self._overflow: CircuitBreaker | None = None

    def __len__(self) -> int:
        """Hosts held, the overflow breaker not counted."""
        return len(self._closed) + len(self._held)

    def keys(self) -> list[str]:
        """The hosts held: closed ones least recently used first, then the rest."""
        return [*self._closed, *self._held]

    def breaker(self, key: str) -> CircuitBreaker:
        """The breaker of host `key`, made on first use; marks it recently used."""
        found = self._closed.get(key)
        if found is not None:
            self._closed.move_to_end(key)
            return found
        found = self._held.get(key)
        if found is not None:
            return found
        return self._add(key)

    def _add(self, key: str) -> CircuitBreaker:
        if len(self._closed) + len(self._held) >= self._maximum:
            if not self._closed:
                return self._overflow_breaker()
            self._closed.popitem(last=False)

        # A partial, not a closure over the breaker: no reference cycle, so an
        # evicted breaker is freed at once rather than by the cyclic collector.
        breaker = self._new(functools.partial(self._moved, key))
        self._closed[key] = breaker
        return breaker

    def _overflow_breaker(self) -> CircuitBreaker:
        if self._overflow is None:
            self._overflow = self._new(functools.partial(self._tell, OVERFLOW_HOST))
        return self._overflow

    def _moved(
        self,
        key: str,
        breaker: CircuitBreaker,
        previous: BreakerState,
        current: BreakerState,
    ) -> None:
        if current == CLOSED:
            if self._held.get(key) is breaker:
                del self._held[key]
                self._closed[key] = breaker
        elif previous == CLOSED:
            if self._closed.get(key) is breaker:
                del self._closed[key]
                self._held[key] = breaker
            elif key not in self._closed and key not in self._held:
                # Evicted while an attempt was in flight, and that attempt
                # opened it: keep it, or the open breaker would be forgotten.
                if len(self) >= self._maximum and self._closed:
                    self._closed.popitem(last=False)
                self._held[key] = breaker
        self._tell(key, breaker, previous, current)

    def _tell(
        self,
        key: str,
        breaker: CircuitBreaker,
        previous: BreakerState,
        current: BreakerState,
    ) -> None:
        if self._on_transition is not None:
            self._on_transition(key, previous, current)
