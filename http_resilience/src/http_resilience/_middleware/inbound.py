"""What the context middleware decides from a caller's headers, whatever the server.

The checks of `ResilienceContextMiddleware`'s options and the reading of the
deadline and attempt headers, as plain functions, and `InboundContext`, what
the ASGI and the WSGI middleware share: their checked options, the count of
what was ignored, and the request's context set from what was read.
"""

from __future__ import annotations

import inspect
import math
import re
from collections import Counter
from collections.abc import Callable
from contextlib import ExitStack
from datetime import timedelta
from typing import Any, ClassVar, Final, Generic, TypeVar, cast

from http_resilience._core.arguments import is_async_callable
from http_resilience._core.correlation import correlation_id, new_correlation_id
from http_resilience._core.deadline import DEADLINE_HEADER, deadline_scope
from http_resilience._core.nested import (
    RETRY_ATTEMPT_HEADER,
    RETRY_EXHAUSTED_HEADER,
    DownstreamRecord,
    caller_attempt_scope,
    downstream_scope,
)
from http_resilience._core.raw_headers import is_token
from http_resilience._primitives.durations import (
    DurationInput,
    in_seconds,
    read_duration,
)
from http_resilience._transport.stamp import DEFAULT_CORRELATION_HEADER

__all__ = [
    "MAX_ATTEMPT",
    "InboundContext",
    "checked_limits",
    "checked_trusted",
    "lowered",
    "read_attempt",
    "read_deadline",
    "read_default_deadline",
    "trusts",
]

_INTEGER: Final = re.compile(rb"[0-9]{1,12}")
_DIGITS: Final = re.compile(rb"[0-9]+")
_LONGEST_READ: Final = 12
"""Digits of a deadline read as a number; more is far past any limit (31 years)."""
MAX_ATTEMPT: Final = 1000
"""The highest attempt number a caller may say it makes."""


def checked_limits(safety_margin: float, max_deadline: float) -> None:
    """Refuse a margin or limit that is no finite number of seconds >= 0.

    Raises:
        ValueError: Either is negative, NaN or infinite, named.
    """
    for name, value in (
        ("safety_margin", safety_margin),
        ("max_deadline", max_deadline),
    ):
        if not math.isfinite(value) or value < 0:
            raise ValueError(f"{name} must be a finite number of seconds >= 0")


def read_deadline(value: bytes, safety_margin: float, longest: float) -> float | None:
    """The seconds a caller's deadline header leaves; None if it is malformed.

    Less `safety_margin`, at least 0 and at most `longest`. Any run of digits
    is a deadline, however long: one too long to read as a number is past
    every limit, so it is clamped to `longest` like a large one, never
    converted (a megabyte of digits costs one scan, not a quadratic `int`).
    """
    text = value.strip()
    if not _DIGITS.fullmatch(text):
        return None
    text = text.lstrip(b"0") or b"0"
    if len(text) > _LONGEST_READ:
        return longest
    seconds = int(text) / 1000 - safety_margin
    return min(max(seconds, 0.0), longest)


def read_attempt(value: bytes) -> int | None:
    """The caller's attempt number, 1 to `MAX_ATTEMPT`; None if it is not one."""
    text = value.strip()
    if not _INTEGER.fullmatch(text) or not 1 <= int(text) <= MAX_ATTEMPT:
        return None
    return int(text)


def checked_trusted(trusted: object, where: str) -> Callable[[Any], bool] | None:
    """`trusted` if it is None or a plain callable; refused at once otherwise.

    `where` names what it is called with, such as ``"the WSGI environ"``.

    Raises:
        TypeError: It is not callable, or it is ``async``.
    """
    if trusted is None:
        return None
    if not callable(trusted):
        raise TypeError(
            f"trusted must be a callable that takes {where} and returns "
            f"True or False, or None, got {type(trusted).__name__}"
        )
    if is_async_callable(trusted):
        raise TypeError(
            "trusted must be a plain function, not async def: it decides from "
            f"{where} alone"
        )
    return cast("Callable[[Any], bool]", trusted)


def trusts(trusted: Callable[[Any], bool] | None, request: object) -> bool:
    """What `trusted` says of `request`; True when there is no `trusted`.

    Raises:
        TypeError: It returned something other than True or False.
    """
    if trusted is None:
        return True
    # Checked whatever the annotations say: a truthy string or a coroutine
    # must not pass for True.
    verdict = cast("object", trusted(request))
    if isinstance(verdict, bool):
        return verdict
    if inspect.iscoroutine(verdict):
        verdict.close()
    raise TypeError(f"trusted must return True or False, got {type(verdict).__name__}")


def read_default_deadline(value: object, max_deadline: float) -> timedelta | None:
    """`value` read as a duration: positive, and no longer than `max_deadline`.

    Raises:
        TypeError: It is no duration.
        ValueError: It is not positive, or longer than `max_deadline`.
    """
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, timedelta | int | float | str):
        raise TypeError(
            "default_deadline must be a timedelta, seconds or a string such as "
            f"'5s', or None, got {type(value).__name__}"
        )
    try:
        deadline = read_duration(value, "default_deadline")
    except ValueError as error:
        # The reader names the field in some messages, not in others.
        text = str(error)
        named = text if text.startswith("default_deadline") else None
        raise ValueError(named or f"default_deadline: {text}") from None
    if deadline <= timedelta(0):
        raise ValueError(
            f"default_deadline must be positive, got {in_seconds(deadline)}"
        )
    if deadline.total_seconds() > max_deadline:
        raise ValueError(
            f"default_deadline ({in_seconds(deadline)}) may not be longer than "
            f"max_deadline ({max_deadline:g} s)"
        )
    return deadline


def lowered(header: object, name: str) -> str | None:
    """The header to read, lower case; refused at once if it is no header name.

    Raises:
        TypeError: It is neither a string nor None.
        ValueError: It is no HTTP header name.
    """
    if header is None:
        return None
    if not isinstance(header, str):
        raise TypeError(
            f"{name} must be a header name or None, got {type(header).__name__}"
        )
    if not is_token(header):
        raise ValueError(f"{name} {header!r} is not an HTTP header name")
    return header.lower()


AppT = TypeVar("AppT")
RequestT = TypeVar("RequestT")
KeyT = TypeVar("KeyT")
_T = TypeVar("_T")


class InboundContext(Generic[AppT, RequestT, KeyT]):
    """The constructor and the reading both context middlewares share.

    `AppT` is the app they wrap, `RequestT` what `trusted` is told a request
    by (the ASGI scope, the WSGI environ), and `KeyT` how a header is looked
    up and written (`_key`, `_mark`). The arguments, attributes and errors
    are `ResilienceContextMiddleware`'s.
    """

    _where: ClassVar[str]
    """What `trusted` is called with, for its error message."""

    def __init__(
        self,
        app: AppT,
        *,
        safety_margin: float = 0.05,
        max_deadline: float = 300.0,
        deadline_header: str | None = DEADLINE_HEADER,
        attempt_header: str | None = RETRY_ATTEMPT_HEADER,
        correlation_header: str | None = DEFAULT_CORRELATION_HEADER,
        exhausted_header: str | None = RETRY_EXHAUSTED_HEADER,
        trusted: Callable[[RequestT], bool] | None = None,
        default_deadline: DurationInput | None = None,
    ) -> None:
        self._check_app(app)
        self.app = app
        checked_limits(safety_margin, max_deadline)
        self.safety_margin = safety_margin
        self.max_deadline = max_deadline
        self.trusted: Callable[[RequestT], bool] | None = checked_trusted(
            trusted, self._where
        )
        self.default_deadline = read_default_deadline(default_deadline, max_deadline)
        self._default = (
            None
            if self.default_deadline is None
            else self.default_deadline.total_seconds()
        )
        self._longest = max_deadline if self._default is None else self._default
        self._deadline: KeyT | None = self._key(deadline_header, "deadline_header")
        self._attempt: KeyT | None = self._key(attempt_header, "attempt_header")
        self._correlation: KeyT | None = self._key(
            correlation_header, "correlation_header"
        )
        self._exhausted: KeyT | None = self._mark(exhausted_header, "exhausted_header")
        self.ignored: Counter[str] = Counter()

    def _check_app(self, app: AppT) -> None:
        """Refuse an `app` that cannot be one; by default, take any."""

    def _key(self, header: object, name: str) -> KeyT | None:
        """How header `name` is looked up, once checked; None for None."""
        raise NotImplementedError

    def _mark(self, header: object, name: str) -> KeyT | None:
        """How header `name` is written, once checked; None for None."""
        raise NotImplementedError

    def _trusts(self, request: RequestT) -> bool:
        return trusts(self.trusted, request)

    def _counted(self, kind: str, taken: _T | None) -> _T | None:
        """`taken`; when it is None (a malformed value), counted as ignored."""
        if taken is None:
            self.ignored[kind] += 1
        return taken

    def _seconds(self, value: bytes) -> float | None:
        """The seconds the caller's deadline header leaves, within the limits."""
        return read_deadline(value, self.safety_margin, self._longest)

    def _enter(
        self,
        stack: ExitStack,
        deadline: float | None,
        attempt: int | None,
        correlation: str | None,
    ) -> DownstreamRecord | None:
        """Set the request's context on `stack`; the record of its calls, if kept.

        A request without a deadline gets `default_deadline` (if any), and one
        without a correlation id a new one: one id for every call the request
        makes, as if the caller sent it.
        """
        if deadline is None:
            deadline = self._default
        if correlation is None and self._correlation is not None:
            correlation = new_correlation_id()
        if deadline is not None:
            stack.enter_context(deadline_scope(deadline))
        if attempt is not None:
            stack.enter_context(caller_attempt_scope(attempt))
        if correlation is not None:
            stack.enter_context(correlation_id(correlation))
        if self._exhausted is None:
            return None
        return stack.enter_context(downstream_scope())
