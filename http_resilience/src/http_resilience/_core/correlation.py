"""Correlation ids: the id of the call in progress, and how ids are made and checked.

The id of a call is the one set with `correlation_id` (a context variable, so
it follows the task and the threads `asyncio.to_thread` starts), else a new
one (`new_correlation_id`). The transport's stamp that puts it on the wire
(`http_resilience._transport.stamp`), the telemetry that logs it and
the stream retry's log line all read it here.
"""

from __future__ import annotations

import itertools
import os
import re
import secrets
from collections.abc import Callable, Generator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Final, cast

__all__ = [
    "CORRELATION_EXTENSION",
    "CURRENT_CORRELATION",
    "MAX_CORRELATION_LENGTH",
    "CorrelationSource",
    "correlation_id",
    "current_correlation_id",
    "inbound_correlation_id",
    "is_correlation_id",
    "new_correlation_id",
]

CORRELATION_EXTENSION: Final = "http_resilience.correlation_id"
"""The request extension that carries a call's id from its first attempt to the rest."""

MAX_CORRELATION_LENGTH: Final = 200
"""The longest correlation id, in characters, set here or taken from a caller.

The same limit as `mediator`'s (each package keeps its own copy of the rule):
200 is the longest request id common routers pass on (Heroku's), so an id a
caller's platform made is kept, and still short enough to go on every attempt
and into every log line.
"""
# Visible ASCII but the comma: what any server, proxy and log line takes as
# is. A comma is refused because HTTP lets any hop join two lines of a header
# into one with commas (RFC 9110, 5.3): a value with one may be two ids.
_VALUE: Final = re.compile(rf"[\x21-\x2b\x2d-\x7e]{{1,{MAX_CORRELATION_LENGTH}}}")
_REFUSED: Final = (
    f"a correlation id is 1 to {MAX_CORRELATION_LENGTH} visible ASCII characters "
    "without spaces or commas"
)
CorrelationSource = Callable[[], str | None]
"""Where a factory's clients read a call's id first: a callable of no argument.

What it returns is checked on every call: anything but a valid id (None, an
empty or overlong string, a character outside visible ASCII or a comma, not a
string at all) falls back to this package's own rule.
"""

CURRENT_CORRELATION: Final[ContextVar[str | None]] = ContextVar(
    "http_resilience_correlation_id", default=None
)
"""The id set by the innermost `correlation_id` block (None: none is)."""


def current_correlation_id() -> str | None:
    """The correlation id set by the innermost `correlation_id` block, if any.

    Example:
        >>> current_correlation_id() is None
        True
        >>> with correlation_id("order-42"):
        ...     current_correlation_id()
        'order-42'
    """
    return CURRENT_CORRELATION.get()


@contextmanager
def correlation_id(value: str | None = None) -> Generator[str]:
    """Give every HTTP call made inside the block this correlation id.

    The clients of an `HttpClientFactory` send it in their correlation header
    on every attempt of every call made inside the block: in this task, and in
    the tasks it starts and `asyncio.to_thread` calls, which copy the context
    (a plain `threading.Thread` does not). Blocks nest; leaving one restores
    the id around it.

    Args:
        value: The id: 1 to 200 visible ASCII characters, no spaces or commas
            (such as an incoming request's own correlation id). None makes a
            new one.

    Yields:
        The id in force inside the block.

    Raises:
        TypeError: `value` is neither a string nor None.
        ValueError: `value` is empty, too long, or has a character outside
            visible ASCII, or a comma. The message does not repeat the value.

    Example:
        >>> with correlation_id() as made:
        ...     current_correlation_id() == made
        True
    """
    if value is None:
        value = new_correlation_id()
    elif not isinstance(cast("object", value), str):
        raise TypeError(
            f"a correlation id must be a string, got {type(value).__name__}"
        )
    elif _VALUE.fullmatch(value) is None:
        raise ValueError(_REFUSED)
    token = CURRENT_CORRELATION.set(value)
    try:
        yield value
    finally:
        CURRENT_CORRELATION.reset(token)


def is_correlation_id(value: object) -> bool:
    """True when `value` is a string `correlation_id` takes.

    Example:
        >>> is_correlation_id("order-42"), is_correlation_id("a, b")
        (True, False)
    """
    return isinstance(value, str) and _VALUE.fullmatch(value) is not None


def inbound_correlation_id(values: list[bytes]) -> str | None:
    """The id a caller sent, from the values of every line of its header.

    Taken only when it sent the header once, with a valid id (outer spaces and
    tabs aside, which are no part of a field value): a header sent twice, or
    a value with a comma in it (two lines a hop joined), names no one id.

    Example:
        >>> inbound_correlation_id([b" order-42 "])
        'order-42'
        >>> inbound_correlation_id([b"a", b"b"]) is None
        True
    """
    if len(values) != 1:
        return None
    text = values[0].strip(b" \t").decode("ascii", errors="replace")
    return text if _VALUE.fullmatch(text) is not None else None


def new_correlation_id() -> str:
    """A new id: a UUID in its usual 36-character form, unique in practice.

    Version 8 (RFC 9562's layout of one's own): a random prefix of 74 bits,
    drawn once per process (and again in a forked child), then a 48-bit
    counter. Unique across processes as random UUIDs are, unique within one
    until its 2**48th id, and about a tenth of the cost of `uuid.uuid4`, which
    reads the system's random source on every call.

    Example:
        >>> import uuid
        >>> made = new_correlation_id()
        >>> (len(made), uuid.UUID(made).version, made == new_correlation_id())
        (36, 8, False)
    """
    # `next` on an `itertools.count` is one step under the GIL: no lock needed.
    return f"{_prefix}{next(_counter) & _COUNTER_MASK:012x}"


_COUNTER_MASK: Final = (1 << 48) - 1
_counter = itertools.count()


def _new_prefix() -> str:
    """``xxxxxxxx-xxxx-8xxx-Vxxx-``: 74 random bits, version 8, variant 10."""
    bits = secrets.randbits(74)
    return (
        f"{bits >> 42:08x}-{(bits >> 26) & 0xFFFF:04x}-"
        f"8{(bits >> 14) & 0xFFF:03x}-"
        f"{0x8 | ((bits >> 12) & 0x3):x}{bits & 0xFFF:03x}-"
    )


_prefix = _new_prefix()


def _renew_prefix() -> None:
    # A forked child shares the parent's counter: a prefix of its own keeps
    # its ids apart from the parent's.
    global _prefix
    _prefix = _new_prefix()


if hasattr(os, "register_at_fork"):  # pragma: no branch - not on Windows
    os.register_at_fork(after_in_child=_renew_prefix)
