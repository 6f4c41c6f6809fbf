"""What an operator told one transport's breakers: hosts isolated, breakers reset.

`CircuitControl` writes here, from any thread; the breaker's chain reads it.
The chain never takes this lock on its usual path: `pending` is True only
while a host is isolated or a reset waits, and only then does a call look
closer (`BreakerStrategy.acquire`). A reset is carried out there, by the
chain, on its own thread (the event loop's, or under the sync breaker's
lock), so the breakers and their registry are changed by the chain alone.
"""

from __future__ import annotations

import threading

__all__ = ["ManualState"]


class ManualState:
    """Hosts isolated and resets not yet carried out; thread-safe.

    Keys are those of the breakers' registry (``scheme://host:port``), or
    ``"*"`` for a breaker every host shares.

    Attributes:
        isolated: The hosts refused until reset; replaced, never changed in
            place, so a reader needs no lock.
        pending: Whether the chain must look here before an attempt: a host
            is isolated, or a reset waits.

    Example:
        >>> state = ManualState()
        >>> state.isolate("https://api.example:443")
        True
        >>> state.reset("https://api.example:443")
        >>> state.isolated, state.take_resets(), state.pending
        (frozenset(), frozenset({'https://api.example:443'}), False)
    """

    __slots__ = ("_lock", "_resets", "isolated", "pending")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.isolated: frozenset[str] = frozenset()
        self._resets: frozenset[str] = frozenset()
        self.pending = False

    def isolate(self, key: str) -> bool:
        """Refuse every call to `key` until it is reset; False if it already was."""
        with self._lock:
            if key in self.isolated:
                return False
            self.isolated = self.isolated | {key}
            self.pending = True
            return True

    def reset(self, key: str) -> None:
        """Lift the isolation of `key`, and close its breaker before the next call."""
        with self._lock:
            self.isolated = self.isolated - {key}
            self._resets = self._resets | {key}
            self.pending = True

    def resetting(self, key: str) -> bool:
        """Whether `key` has a reset the chain has not carried out yet."""
        return key in self._resets

    def take_resets(self) -> frozenset[str]:
        """The resets to carry out now; the chain's side, on its own thread."""
        with self._lock:
            resets, self._resets = self._resets, frozenset()
            self.pending = bool(self.isolated)
            return resets
