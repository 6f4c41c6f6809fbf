"""The keys and the bound every per-host registry of strategy state shares.

A strategy that keeps state per host (breakers, budgets, limiters, buckets,
quotas) holds at most `DEFAULT_MAXIMUM_HOSTS` hosts unless told otherwise.
`OVERFLOW_HOST` keys the state new hosts share while a registry is full of
state it may not drop; `ALL_HOSTS` keys the one state that serves every host
when a strategy is not per host. What reports or shares per-host state
outside the strategies uses the same keys.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Final, Generic, TypeVar

__all__ = ["ALL_HOSTS", "DEFAULT_MAXIMUM_HOSTS", "OVERFLOW_HOST", "HostStates"]

T = TypeVar("T")

DEFAULT_MAXIMUM_HOSTS: Final = 1024
"""How many hosts a per-host registry holds by default."""

OVERFLOW_HOST: Final = "(overflow)"
"""The key events carry for the overflow breaker of a full registry."""

ALL_HOSTS: Final = "*"
"""The host `BreakerEvent`s carry when one breaker serves every host."""


class HostStates(Generic[T]):
    """One state per host key, at most `maximum` of them, least recently used out.

    Safe from many threads: a host already held is found without a lock; a
    new one is added under one. What a strategy drops goes on serving the
    calls that hold it; the host starts afresh on its next call.

    Args:
        maximum: The bound; at least 1.
        new: Makes the state of a host seen for the first time.

    Example:
        >>> states = HostStates(2, list)
        >>> for key in ("http://a:80", "http://b:80", "http://c:80"):
        ...     _ = states.get(key)
        >>> states.keys()
        ['http://b:80', 'http://c:80']
    """

    __slots__ = ("_lock", "_maximum", "_new", "_states")

    def __init__(self, maximum: int, new: Callable[[], T]) -> None:
        if maximum < 1:
            raise ValueError(f"maximum_hosts must be at least 1, got {maximum}")
        self._maximum = maximum
        self._new = new
        self._states: OrderedDict[str, T] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        """Hosts held."""
        return len(self._states)

    def keys(self) -> list[str]:
        """The hosts held, least recently used first."""
        return list(self._states)

    def items(self) -> list[tuple[str, T]]:
        """Each host held and its state; copied in one step, from any thread."""
        return [*self._states.items()]

    def get(self, key: str) -> T:
        """The state of host `key`, made on first use; marks it recently used."""
        states = self._states
        found = states.get(key)
        if found is not None:
            try:  # noqa: SIM105 - every call passes here; `suppress` costs more
                states.move_to_end(key)
            except KeyError:
                pass  # another thread dropped it just now: it still serves
            return found
        with self._lock:
            found = states.get(key)
            if found is None:
                if len(states) >= self._maximum:
                    states.popitem(last=False)
                found = states[key] = self._new()
            return found
