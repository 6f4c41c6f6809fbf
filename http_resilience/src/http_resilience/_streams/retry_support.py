"""What the two stream retry loops share: argument checks, the log line, suppression.

`retry.py` holds the async loop; `retry_sync.py` is generated from it
(tools/unasync.py). Everything here is the same for both.
"""

from __future__ import annotations

import logging

from http_resilience._core.arguments import of_type
from http_resilience._core.correlation import current_correlation_id
from http_resilience._streams.options import StreamRetryOptions

__all__ = [
    "announce",
    "check_factory",
    "check_options",
    "keep_suppressed",
    "suppressed_failure",
]

_DEFAULT_OPTIONS = StreamRetryOptions()
_log = logging.getLogger("http_resilience")
_SUPPRESSED = "__http_resilience_suppressed_failure__"


def suppressed_failure(exc: BaseException) -> BaseException | None:
    """The failure that `exc` won over when the broken source was closed.

    The first failure of an attempt wins: when closing the source after a
    break raises too, the break is what `with_retry` classifies and raises,
    and the closing failure is kept on it, as the exception object itself.
    Likewise a cancellation or an early stop wins over a failure while closing.

    Treat what it returns as diagnostic material to redact deliberately: a
    network client's error can name a host or carry parts of a request, so do
    not render it into a response.

    Args:
        exc: An exception raised by a `with_retry` or `with_retry_sync` stream.

    Returns:
        The suppressed exception, or None if nothing was suppressed.

    Example:
        >>> suppressed_failure(ValueError("no cleanup failed")) is None
        True
    """
    found: BaseException | None = getattr(exc, _SUPPRESSED, None)
    return found


def keep_suppressed(winner: BaseException, loser: BaseException) -> None:
    """Keep `loser` on `winner`, for `suppressed_failure`; the first one kept stays."""
    # The first suppression wins as well: a later one would hide the earlier.
    if winner is not loser and getattr(winner, _SUPPRESSED, None) is None:
        setattr(winner, _SUPPRESSED, loser)


def check_options(options: object, name: str) -> StreamRetryOptions:
    """`options`, or the defaults for None; a `TypeError` naming `name` otherwise."""
    if options is None:
        return _DEFAULT_OPTIONS
    return of_type(
        options,
        StreamRetryOptions,
        f"{name}() options must be a StreamRetryOptions or None",
    )


def check_factory(factory: object, name: str) -> None:
    """A `TypeError` naming `name` unless `factory` is callable."""
    if not callable(factory):
        raise TypeError(
            f"{name}() needs a callable factory taking a StreamRetryContext, "
            f"got {type(factory).__name__}"
        )


def announce(
    attempt_number: int, yielded: int, failure: Exception, delay: float
) -> None:
    """Log the retry about to happen, at WARNING, with the package's extras.

    ``resilience_event`` is ``"stream_retry"``; ``resilience_attempt``,
    ``resilience_delay_s``, ``resilience_reason``, ``resilience_items_yielded``
    and ``correlation_id`` as the pipeline's records carry them.
    """
    # The failure's type only: its message may name a host or carry data.
    reason = type(failure).__qualname__
    _log.warning(
        "a stream: attempt %d failed with %s, %d yielded so far; retrying in %.3f s",
        attempt_number,
        reason,
        yielded,
        delay,
        extra={
            "resilience_event": "stream_retry",
            "resilience_attempt": attempt_number,
            "resilience_delay_s": delay,
            "resilience_reason": reason,
            "resilience_items_yielded": yielded,
            "correlation_id": current_correlation_id(),
        },
    )
