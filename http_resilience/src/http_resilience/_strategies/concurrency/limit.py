"""The concurrency limit's decision: counts of permits and queued callers.

`ConcurrencyLimit` decides who gets in (granted, queued or refused) and who
gets a permit given back; it counts and never waits.
"""

from __future__ import annotations

from typing import Final, Literal, TypeAlias

__all__ = ["GRANTED", "QUEUED", "REFUSED", "ConcurrencyLimit", "Entry"]

Entry: TypeAlias = Literal["granted", "queued", "refused"]
GRANTED: Final = "granted"
QUEUED: Final = "queued"
REFUSED: Final = "refused"


class ConcurrencyLimit:
    """Counts of permits in use and callers queued; decides who gets in.

    Args:
        permits: Callers let through at once; at least 1.
        queue_limit: Callers that may wait for a permit; at least 0.

    Example:
        >>> limit = ConcurrencyLimit(permits=1, queue_limit=1)
        >>> limit.enter(), limit.enter(), limit.enter()
        ('granted', 'queued', 'refused')
        >>> limit.leave()  # the permit passes to the queued caller
        True
        >>> limit.in_use, limit.queued
        (1, 0)
    """

    __slots__ = ("in_use", "permits", "queue_limit", "queued")

    def __init__(self, *, permits: int, queue_limit: int) -> None:
        self.permits = permits
        self.queue_limit = queue_limit
        self.in_use = 0
        self.queued = 0

    def enter(self) -> Entry:
        """Take a permit, or a place in the queue, or neither."""
        if self.in_use < self.permits and not self.queued:
            self.in_use += 1
            return GRANTED
        if self.queued < self.queue_limit:
            self.queued += 1
            return QUEUED
        return REFUSED

    def leave(self) -> bool:
        """Give back a permit; True when it passes to the first queued caller."""
        if self.queued:
            self.queued -= 1
            return True
        self.in_use -= 1
        return False

    def abandon(self) -> None:
        """A queued caller gave up before a permit reached it."""
        self.queued -= 1
