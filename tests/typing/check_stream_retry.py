"""Type-checked only (mypy --strict and pyright strict), never run.

`with_retry` yields the factory's item type and can be closed; the sync twin
likewise; `resumable_bytes` yields bytes.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator, Generator, Iterator
from contextlib import aclosing, closing
from typing import assert_type

import httpx

from http_resilience import (
    PartialStreamPolicy,
    StreamRetryContext,
    StreamRetryOptions,
    resumable_bytes,
    resumable_bytes_sync,
    suppressed_failure,
    with_retry,
    with_retry_sync,
)
from http_resilience.testing import FakeClock


async def numbers(context: StreamRetryContext) -> AsyncIterator[int]:
    yield context.items_yielded


def words(context: StreamRetryContext) -> Iterator[str]:
    yield str(context.attempt_number)


OPTIONS = StreamRetryOptions(
    clock=FakeClock(), partial_stream_policy=PartialStreamPolicy.RESTART_FROM_START
)


async def typed_streams(client: httpx.AsyncClient, sync: httpx.Client) -> None:
    assert_type(with_retry(numbers), AsyncGenerator[int, None])
    async with aclosing(with_retry(numbers, OPTIONS)) as stream:
        async for n in stream:
            assert_type(n, int)
    assert_type(with_retry_sync(words, OPTIONS), Generator[str, None, None])
    with closing(with_retry_sync(words)) as lines:
        for line in lines:
            assert_type(line, str)
    async for chunk in resumable_bytes(client, "https://example.test/file"):
        assert_type(chunk, bytes)
    for piece in resumable_bytes_sync(sync, httpx.URL("https://example.test/file")):
        assert_type(piece, bytes)


def typed_suppressed(failure: Exception) -> BaseException | None:
    return suppressed_failure(failure)
