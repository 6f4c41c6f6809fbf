"""What the two stream retry loops share: argument checks, the log line, suppression.

`retry.py` holds the async loop; `retry_sync.py` is generated from it
(tools/unasync.py). Everything here is the same for both.
"""

from __future__ import annotations

import logging

from http_resilience._core.arguments import of_type
from http_resilience._core.correlation import current_correlation_id
from http_resilience._core.suppressed import keep_suppressed, suppressed_failure
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
