"""The keys and the bound every per-host registry of strategy state shares.

A strategy that keeps state per host (breakers, budgets, limiters, buckets,
quotas) holds at most `DEFAULT_MAXIMUM_HOSTS` hosts unless told otherwise.
`OVERFLOW_HOST` keys the state new hosts share while a registry is full of
state it may not drop; `ALL_HOSTS` keys the one state that serves every host
when a strategy is not per host. What reports or shares per-host state
outside the strategies uses the same keys.
"""

from __future__ import annotations

from typing import Final

__all__ = ["ALL_HOSTS", "DEFAULT_MAXIMUM_HOSTS", "OVERFLOW_HOST"]

DEFAULT_MAXIMUM_HOSTS: Final = 1024
"""How many hosts a per-host registry holds by default."""

OVERFLOW_HOST: Final = "(overflow)"
"""The key events carry for the overflow breaker of a full registry."""

ALL_HOSTS: Final = "*"
"""The host `BreakerEvent`s carry when one breaker serves every host."""
