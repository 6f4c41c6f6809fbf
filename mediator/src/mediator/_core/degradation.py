"""Whether a send was answered by its fallback, from where, and how fresh.

The fallback behavior opens a `Pending` answer while a fallback handler runs;
the handler calls `degraded` to say where its answer comes from and how old it
is. When the fallback returns, the behavior settles the send's `Degradation`:
`degradation` reads it, the audit record and the telemetry carry it, and a web
middleware that asked (`collecting`) gathers every degradation of the HTTP
request it answers.
"""

from __future__ import annotations

import re
from collections.abc import Generator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Final, cast

from mediator._core.errors import ConfigurationError
from mediator._core.markers import is_fallback

__all__ = [
    "DEFAULT_SOURCE",
    "MAX_SOURCE_LENGTH",
    "Degradation",
    "Pending",
    "collecting",
    "degradation",
    "degradation_of",
    "degraded",
    "pending",
    "settle",
]

MAX_SOURCE_LENGTH: Final = 64
"""The longest source name, in characters."""

DEFAULT_SOURCE: Final = "fallback"
"""The source of a fallback answer whose handler did not call `degraded`."""

# A name, not a value: it goes into a response header, a metric attribute and
# a log line as it is, so it holds no quote, space or separator.
_SOURCE: Final = re.compile(
    rf"[A-Za-z0-9][A-Za-z0-9._:/-]{{0,{MAX_SOURCE_LENGTH - 1}}}"
)


@dataclass(frozen=True, slots=True)
class Degradation:
    """How a ``@fallback`` query's answer was degraded.

    Attributes:
        source: Where the answer came from, as the fallback handler named it
            with `degraded` (``"fallback"`` when it did not): a fixed name
            such as ``"stock-cache"``, never a value.
        as_of: When the data the answer holds was current, timezone-aware;
            None when the fallback did not say.
        age: How old that data was when the fallback answered (the bound
            `WallClock`'s time less `as_of`, never negative); None without
            `as_of`.
        failure: The qualified name of the original failure's type: what the
            chain raised when it gave up.
    """

    source: str
    as_of: datetime | None
    age: timedelta | None
    failure: str


class Pending:
    """What a running fallback handler said of its answer, through `degraded`."""

    __slots__ = ("as_of", "source")

    def __init__(self) -> None:
        self.source = DEFAULT_SOURCE
        self.as_of: datetime | None = None


_pending: ContextVar[Pending | None] = ContextVar("mediator_fallback", default=None)
_last: ContextVar[Degradation | None] = ContextVar("mediator_degradation", default=None)
_collected: ContextVar[list[Degradation] | None] = ContextVar(
    "mediator_degradations", default=None
)


def degraded(*, source: str, as_of: datetime | None = None) -> None:
    """Say where the fallback's answer comes from and how fresh it is.

    Called by a `FallbackHandler` while it answers (from its ``handle``,
    on either path, in its worker thread too). The send's `Degradation`
    carries what it says; a second call replaces the first.

    Args:
        source: A fixed name of where the answer comes from, such as
            ``"stock-cache"``: 1 to 64 characters, letters, digits and
            ``. _ : / -``, starting with a letter or digit. It reaches a
            response header and metric attributes: name the source, never
            put a value (an id, a key) in it.
        as_of: When the data was current, timezone-aware; None when unknown.

    Raises:
        TypeError: `source` is not a string, or `as_of` not a datetime.
        ValueError: `source` breaks the rule above, or `as_of` is naive.
        ConfigurationError: No fallback handler is running in this context.

    Example:
        >>> degraded(source="stock-cache")
        Traceback (most recent call last):
        ...
        mediator.ConfigurationError: degraded() is called by a fallback ...
    """
    if not isinstance(cast("object", source), str):
        raise TypeError(f"source must be a string, got {type(source).__name__}")
    if _SOURCE.fullmatch(source) is None:
        raise ValueError(
            f"source must be 1 to {MAX_SOURCE_LENGTH} letters, digits and . _ : / - "
            "starting with a letter or digit: a fixed name such as 'stock-cache'"
        )
    if as_of is not None:
        if not isinstance(cast("object", as_of), datetime):
            raise TypeError(f"as_of must be a datetime, got {type(as_of).__name__}")
        if as_of.utcoffset() is None:
            raise ValueError("as_of must be timezone-aware, such as datetime.now(UTC)")
    answer = _pending.get()
    if answer is None:
        raise ConfigurationError(
            "degraded() is called by a fallback handler while it answers a "
            "@fallback query; here no fallback handler is running"
        )
    answer.source = source
    answer.as_of = as_of


def degradation() -> Degradation | None:
    """How the last ``@fallback`` send that ended in this context was degraded.

    None when its handler answered (or it failed), and outside any
    ``@fallback`` send; its `Degradation` when its fallback answered. The
    rule of `is_replay`: read it right after the send returns, in the same
    task. A ``@fallback`` send answers for itself only: what a send nested in
    its handler degraded is not its own reading. A send of an unmarked type
    leaves the reading as it was.

    Example:
        >>> degradation() is None
        True
    """
    return _last.get()


def degradation_of(request: object) -> Degradation | None:
    """The degradation of `request`, which just ended (None if unmarked)."""
    return _last.get() if is_fallback(request) else None


@contextmanager
def pending() -> Generator[Pending, None, None]:
    """The answer of the fallback handler running inside the block."""
    answer = Pending()
    token = _pending.set(answer)
    try:
        yield answer
    finally:
        _pending.reset(token)


def settle(found: Degradation | None) -> None:
    """Record how the ``@fallback`` send ending now was answered."""
    if found is None:
        # Most sends answer: a read is cheaper than a write of the same None.
        if _last.get() is not None:
            _last.set(None)
        return
    _last.set(found)
    collected = _collected.get()
    if collected is not None:
        collected.append(found)


@contextmanager
def collecting() -> Generator[list[Degradation], None, None]:
    """Gather every degradation settled inside the block, nested sends too.

    The list is shared with the tasks and threads the block starts (they copy
    the context, and with it the list), so a web middleware sees what the
    app's handlers degraded wherever they ran.
    """
    found: list[Degradation] = []
    token = _collected.set(found)
    try:
        yield found
    finally:
        _collected.reset(token)
