"""A failure kept on the one that won over it: `suppressed_failure` reads it.

Two places keep one: a stream retry whose source also failed while it was
closed after a break (the break wins), and a fallback that raised while it
stood in for a failure (the original failure wins: it is what the call
raises, never swapped for the fallback's).
"""

from __future__ import annotations

__all__ = ["keep_suppressed", "suppressed_failure"]

_SUPPRESSED = "__http_resilience_suppressed_failure__"


def suppressed_failure(exc: BaseException) -> BaseException | None:
    """The failure that `exc` won over: kept on it, as the exception object.

    Two cases keep one. A stream retry: when closing the source after a break
    raises too, the break is what `with_retry` classifies and raises, and
    the closing failure is kept on it; likewise a cancellation or an early
    stop wins over a failure while closing. A fallback
    (`ResiliencePipeline.add_fallback`) that raised while it stood in for a
    failure: the call raises the original failure, the fallback's kept on it.

    Treat what it returns as diagnostic material to redact deliberately: a
    network client's error can name a host or carry parts of a request, so do
    not render it into a response.

    Args:
        exc: An exception raised by a `with_retry` or `with_retry_sync`
            stream, or by a call through a pipeline with a fallback.

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
