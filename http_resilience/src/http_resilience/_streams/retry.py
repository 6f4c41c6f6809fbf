"""`with_retry`: retry for a stream that breaks half-way.

A thin loop over one decision (`StreamRetryDecision`): iterate the source,
close it, ask the decision, sleep on the clock, call the factory again.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterable, AsyncIterator, Callable
from typing import Any, TypeVar

from http_resilience._core.clock import Clock
from http_resilience._primitives.testing_mode import testing_wait
from http_resilience._streams.decision import StreamRetryContext, StreamRetryDecision
from http_resilience._streams.options import StreamRetryOptions
from http_resilience._streams.retry_support import (
    announce,
    check_factory,
    check_options,
    keep_suppressed,
)

__all__ = ["retry_stream", "with_retry"]

T = TypeVar("T")


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
    item ever comes twice.

    Before a retry the backoff is waited on `options.clock.sleep`, also when
    it is zero, so a cancellation is observed between attempts.

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
    check_factory(factory, "with_retry")
    checked = check_options(options, "with_retry")
    return retry_stream(factory, StreamRetryDecision(checked), checked.clock)


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
        announce(attempt_number, yielded, failure, delay)
        # Awaited also when zero: the one place a cancellation requested while
        # the source was failing synchronously is sure to be delivered.
        await clock.sleep(testing_wait(delay))
        attempt_number += 1


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
        keep_suppressed(failure, exc)
    except BaseException as stop:
        if failure is not None:
            keep_suppressed(stop, failure)
        raise
    return failure


async def _aclose_after_stop(iterator: AsyncIterator[Any], stop: BaseException) -> None:
    aclose = getattr(iterator, "aclose", None)
    if aclose is None:
        return
    try:
        await aclose()
    except Exception as exc:
        keep_suppressed(stop, exc)
    except BaseException as other:
        keep_suppressed(other, stop)
        raise
