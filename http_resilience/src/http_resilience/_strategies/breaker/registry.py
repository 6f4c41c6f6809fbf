"""The breakers of one transport, one per host and bounded: `HostRegistry`.

`HostRegistry` keeps one breaker per host, bounded. When a new host arrives
and the registry is full, the least recently used host whose breaker is closed
is dropped: a closed breaker holds only recent counts, and the host starts
afresh if it comes back. An open or half-open breaker is never evicted,
because forgetting it would silently close it and send traffic to a host known
to be failing. If every slot holds an open breaker, new hosts share one
overflow breaker until a slot frees (a breaker closes); memory stays bounded
either way, at `maximum` hosts plus the overflow.

It holds `CircuitBreaker`s and reads their state, so it lives with the
breaker rather than in `http_resilience._core.host_registry`, which holds only
the keys and the bound every per-host registry shares.
"""

from __future__ import annotations

import functools
from collections import OrderedDict
from collections.abc import Callable

from http_resilience._core.events import CLOSED, BreakerState
from http_resilience._core.host_registry import OVERFLOW_HOST
from http_resilience._strategies.breaker.state import CircuitBreaker, TransitionListener

__all__ = ["HostRegistry", "HostTransition", "NewBreaker"]

NewBreaker = Callable[[TransitionListener], CircuitBreaker]
"""Builds a breaker that reports its transitions to the callable it is given."""
HostTransition = Callable[[str, BreakerState, BreakerState], None]


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

    __slots__ = (
        "_closed",
        "_held",
        "_maximum",
        "_moved_listener",
        "_new",
        "_on_transition",
        "_overflow",
    )

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
        # One listener for every breaker, made once: each breaker carries its
        # own key, so a new host costs one object the cyclic collector tracks
        # (the breaker), not a listener too.
        self._moved_listener: TransitionListener = self._moved

    def __len__(self) -> int:
        """Hosts held, the overflow breaker not counted."""
        return len(self._closed) + len(self._held)

    def keys(self) -> list[str]:
        """The hosts held: closed ones least recently used first, then the rest."""
        return [*self._closed, *self._held]

    def items(self) -> list[tuple[str, CircuitBreaker]]:
        """Each host held and its breaker, then the overflow breaker if made.

        From another thread too: each part is copied in one step, which no
        other thread interrupts (the keys are strings: no Python code runs).
        """
        items = [*self._closed.items(), *self._held.items()]
        if self._overflow is not None:
            items.append((OVERFLOW_HOST, self._overflow))
        return items

    def find(self, key: str) -> CircuitBreaker | None:
        """The breaker of host `key` if one is held; nothing is made or marked."""
        found = self._closed.get(key)
        return self._held.get(key) if found is None else found

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

        # The breaker refers to the registry (through the listener), never the
        # other way round once it is evicted: no reference cycle, so an evicted
        # breaker is freed at once rather than by the cyclic collector.
        breaker = self._new(self._moved_listener)
        breaker.key = key
        self._closed[key] = breaker
        return breaker

    def _overflow_breaker(self) -> CircuitBreaker:
        if self._overflow is None:
            overflow = self._new(functools.partial(self._tell, OVERFLOW_HOST))
            overflow.key = OVERFLOW_HOST
            self._overflow = overflow
        return self._overflow

    def _moved(
        self,
        breaker: CircuitBreaker,
        previous: BreakerState,
        current: BreakerState,
    ) -> None:
        key = breaker.key
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
