"""`EventRecorder`: a listener that keeps every event, for a test to read.

The packages may not import each other, so each keeps a copy of this module,
written by tools/copy_primitives.py from tools/primitives/recorder.py.
"""

from __future__ import annotations

from typing import Generic, TypeVar

__all__ = ["EventRecorder"]

E = TypeVar("E")
K = TypeVar("K")


class EventRecorder(Generic[E]):
    """A listener that keeps every event it is called with, in order.

    Give it where a package takes listeners; read `events`, or `of(kind)` for
    the events of one class.

    Example:
        >>> recorder: EventRecorder[object] = EventRecorder()
        >>> recorder("retry"); recorder(2)
        >>> recorder.events, recorder.of(int)
        (['retry', 2], [2])
    """

    __slots__ = ("events",)

    def __init__(self) -> None:
        self.events: list[E] = []

    def __call__(self, event: E) -> None:
        """Keep `event`."""
        self.events.append(event)

    def of(self, kind: type[K]) -> list[K]:
        """The events that are instances of `kind`, in order."""
        return [event for event in self.events if isinstance(event, kind)]

    def clear(self) -> None:
        """Forget the events kept so far."""
        self.events.clear()

    def __repr__(self) -> str:
        return f"EventRecorder(events={len(self.events)})"
