"""`with_retry` and `with_retry_sync`: retry for a stream that breaks half-way.

Two thin loops over one decision (`StreamRetryDecision`): iterate the source,
close it, ask the decision, sleep on the clock, call the factory again.
"""

from __future__ import annotations

import logging
from collections.abc import (
    AsyncGenerator,
    AsyncIterable,
    AsyncIterator,
    Callable,
    Generator,
    Iterable,
    Iterator,
)
from typing import Any, TypeVar

from http_resilience._clock import Clock
from http_resilience._stream_decision import StreamRetryContext, StreamRetryDecision
from http_resilience._stream_options import StreamRetryOptions

__all__ = [
    "check_options",
    "retry_stream",
    "retry_stream_sync",
    "suppressed_failure",
    "with_retry",
    "with_retry_sync",
]

T = TypeVar("T")

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


def _keep_suppressed(winner: BaseException, loser: BaseException) -> None:
    # The first suppression wins as well: a later one would hide the earlier.
    if winner is not loser and getattr(winner, _SUPPRESSED, None) is None:
        setattr(winner, _SUPPRESSED, loser)


def check_options(options: object, name: str) -> StreamRetryOptions:
    """`options`, or the defaults for None; a `TypeError` naming `name` otherwise."""
    if options is None:
        return _DEFAULT_OPTIONS
    if not isinstance(options, StreamRetryOptions):
        raise TypeError(
            f"{name}() options must be a StreamRetryOptions or None, "
            f"got {type(options).__name__}"
        )
    return options


def _check_factory(factory: object, name: str) -> None:
    if not callable(factory):
        raise TypeError(
            f"{name}() needs a callable factory taking a StreamRetryContext, "
            f"got {type(factory).__name__}"
        )


def with_retry(
    factory: Callable[[StreamRetryContext], AsyncIterable[T]],
    options: StreamRetryOptions | None = None,
) -> AsyncGenerator[T, None]:
    """Iterate the async iterable `factory` returns, asking again when it breaks.

    `factory(context)` is called once per attempt and its items are passed on
    as they come. When the source raises an `Exception`, the retry is decided by
    `options`: `should_retry`, the budget (`max_retry_attempts` for the whole
    stream) and `partial_stream_policy`. Under the default
    `RETHROW_MID_STREAM` only a failure before the first item is retried, so no
    item ever comes twice. Before a retry the backoff is awaited on the clock,
    also when it is zero, so a cancellation is observed between attempts.

    The source's iterator is closed (`aclose`, when it has one) on every path:
    completion, failure, cancellation, and a consumer that stops early: close
    the returned generator (`contextlib.aclosing`) and the source is closed.
    Cancellation and other `BaseException`s that are not `Exception`s are
    never classified and never retried.

    Args:
        factory: Called with a `StreamRetryContext` for each attempt; returns
            an async iterable (an async generator, typically).
        options: How to retry; default `StreamRetryOptions()` (3 retries,
            200 ms base delay doubling up to 30 s, with jitter).

    Returns:
        An async generator of the source's items.

    Raises:
        TypeError: At the call, if `factory` is not callable or `options` is
            not a `StreamRetryOptions`; when iterated, if `factory` returns
            something that is not an async iterable.
        Exception: When iterated, the failure that ended the stream: the first
            failure of the last attempt (see `suppressed_failure`).

    Example:
        >>> import asyncio
        >>> async def numbers(context: StreamRetryContext):
        ...     for n in range(context.items_yielded, 3):
        ...         yield n
        >>> async def main() -> list[int]:
        ...     return [n async for n in with_retry(numbers)]
        >>> asyncio.run(main())
        [0, 1, 2]
    """
    _check_factory(factory, "with_retry")
    checked = check_options(options, "with_retry")
    return retry_stream(factory, StreamRetryDecision(checked), checked.clock)


def with_retry_sync(
    factory: Callable[[StreamRetryContext], Iterable[T]],
    options: StreamRetryOptions | None = None,
) -> Generator[T, None, None]:
    """The synchronous twin of `with_retry`, for plain iterables.

    The same rules: `factory(context)` once per attempt, the same options and
    decision; the backoff blocks on `options.clock.sleep_sync`. The source's
    iterator is closed (`close`, when it has one) on every path; closing the
    returned generator closes it.

    Args:
        factory: Called with a `StreamRetryContext` for each attempt; returns
            an iterable (a generator, typically).
        options: How to retry; default `StreamRetryOptions()`.

    Returns:
        A generator of the source's items.

    Raises:
        TypeError: At the call, if `factory` is not callable or `options` is
            not a `StreamRetryOptions`; when iterated, if `factory` returns
            something that is not iterable.
        Exception: When iterated, the failure that ended the stream.

    Example:
        >>> def lines(context: StreamRetryContext):
        ...     yield from ["a", "b"][context.items_yielded :]
        >>> list(with_retry_sync(lines))
        ['a', 'b']
    """
    _check_factory(factory, "with_retry_sync")
    checked = check_options(options, "with_retry_sync")
    return retry_stream_sync(factory, StreamRetryDecision(checked), checked.clock)


async def retry_stream(
    factory: Callable[[StreamRetryContext], AsyncIterable[T]],
    decision: StreamRetryDecision,
    clock: Clock,
    size: Callable[[T], int] | None = None,
) -> AsyncGenerator[T, None]:
    """The async loop behind `with_retry`; `size` counts an item (default 1)."""
    counting = size is not None or decision.restarts_mid_stream
    attempt_number = 1
    yielded = 0
    while True:
        failure: Exception | None = None
        try:
            source = factory(StreamRetryContext(attempt_number, yielded))
        except Exception as exc:
            failure = exc
        else:
            iterator = aiter(source)
            # A failure of the source is classified; an exception thrown in at
            # `yield` (the consumer stopping) never is. `at_yield` tells them apart.
            at_yield = False
            try:
                if counting:
                    try:
                        if size is None:
                            async for item in iterator:
                                at_yield = True
                                yield item
                                at_yield = False
                                yielded += 1
                        else:
                            async for item in iterator:
                                at_yield = True
                                yield item
                                at_yield = False
                                yielded += size(item)
                    except Exception as exc:
                        if at_yield:
                            raise
                        failure = exc
                else:
                    # Only the first item matters here: once one is out, any
                    # failure is final, so the rest is passed on uncounted.
                    try:
                        first = await anext(iterator)
                    except StopAsyncIteration:
                        pass
                    except Exception as exc:
                        failure = exc
                    else:
                        yielded = 1
                        yield first
                        async for item in iterator:
                            yield item
            except BaseException as stop:
                await _aclose_after_stop(iterator, stop)
                raise
            failure = await _aclose(iterator, failure)
        if failure is None:
            return
        delay = decision.delay_before_retry(attempt_number, yielded, failure)
        if delay is None:
            raise failure
        _announce(attempt_number, yielded, failure, delay)
        # Awaited also when zero: the one place a cancellation requested while
        # the source was failing synchronously is sure to be delivered.
        await clock.sleep(delay)
        attempt_number += 1


def _announce(
    attempt_number: int, yielded: int, failure: Exception, delay: float
) -> None:
    # The failure's type only: its message may name a host or carry data.
    _log.warning(
        "retrying a stream: attempt %d failed (%s), %d yielded so far, next in %.0f ms",
        attempt_number,
        type(failure).__qualname__,
        yielded,
        delay * 1000,
    )


async def _aclose(
    iterator: AsyncIterator[Any], failure: Exception | None
) -> Exception | None:
    aclose = getattr(iterator, "aclose", None)
    if aclose is None:
        return failure
    try:
        await aclose()
    except Exception as exc:
        if failure is None:
            return exc
        _keep_suppressed(failure, exc)
    except BaseException as stop:
        if failure is not None:
            _keep_suppressed(stop, failure)
        raise
    return failure


async def _aclose_after_stop(iterator: AsyncIterator[Any], stop: BaseException) -> None:
    aclose = getattr(iterator, "aclose", None)
    if aclose is None:
        return
    try:
        await aclose()
    except Exception as exc:
        _keep_suppressed(stop, exc)
    except BaseException as other:
        _keep_suppressed(other, stop)
        raise


def retry_stream_sync(
    factory: Callable[[StreamRetryContext], Iterable[T]],
    decision: StreamRetryDecision,
    clock: Clock,
    size: Callable[[T], int] | None = None,
) -> Generator[T, None, None]:
    """The sync loop behind `with_retry_sync`; `size` counts an item (default 1)."""
    counting = size is not None or decision.restarts_mid_stream
    attempt_number = 1
    yielded = 0
    while True:
        failure: Exception | None = None
        try:
            source = factory(StreamRetryContext(attempt_number, yielded))
        except Exception as exc:
            failure = exc
        else:
            iterator = iter(source)
            at_yield = False
            try:
                if counting:
                    try:
                        if size is None:
                            for item in iterator:
                                at_yield = True
                                yield item
                                at_yield = False
                                yielded += 1
                        else:
                            for item in iterator:
                                at_yield = True
                                yield item
                                at_yield = False
                                yielded += size(item)
                    except Exception as exc:
                        if at_yield:
                            raise
                        failure = exc
                else:
                    try:
                        first = next(iterator)
                    except StopIteration:
                        pass
                    except Exception as exc:
                        failure = exc
                    else:
                        yielded = 1
                        yield first
                        for item in iterator:
                            yield item
            except BaseException as stop:
                _close_after_stop(iterator, stop)
                raise
            failure = _close(iterator, failure)
        if failure is None:
            return
        delay = decision.delay_before_retry(attempt_number, yielded, failure)
        if delay is None:
            raise failure
        _announce(attempt_number, yielded, failure, delay)
        clock.sleep_sync(delay)
        attempt_number += 1


def _close(iterator: Iterator[Any], failure: Exception | None) -> Exception | None:
    close = getattr(iterator, "close", None)
    if close is None:
        return failure
    try:
        close()
    except Exception as exc:
        if failure is None:
            return exc
        _keep_suppressed(failure, exc)
    except BaseException as stop:
        if failure is not None:
            _keep_suppressed(stop, failure)
        raise
    return failure


def _close_after_stop(iterator: Iterator[Any], stop: BaseException) -> None:
    close = getattr(iterator, "close", None)
    if close is None:
        return
    try:
        close()
    except Exception as exc:
        _keep_suppressed(stop, exc)
    except BaseException as other:
        _keep_suppressed(other, stop)
        raise
