"""Type-checked only (mypy --strict and pyright strict), never run.

A fallback is a function of the request and the failure (an exception or the
failing response) to a response or None, sync or async; the stale cache
takes its options or their fields; a degraded answer is read as a
`Degradation`, and the `RequestEvent` says where it came from.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Literal, assert_type

import httpx

from http_resilience import (
    Degradation,
    RequestEvent,
    ResiliencePipeline,
    StaleCacheOptions,
    degradation,
)


def offline(
    request: httpx.Request, failure: Exception | httpx.Response
) -> httpx.Response:
    return httpx.Response(200, json={"items": []})


def maybe(
    request: httpx.Request, failure: Exception | httpx.Response
) -> httpx.Response | None:
    if isinstance(failure, httpx.Response) and failure.status_code == 503:
        return None
    return offline(request, failure)


async def later(
    request: httpx.Request, failure: Exception | httpx.Response
) -> httpx.Response | None:
    return None


def one_argument(request: httpx.Request) -> httpx.Response:
    return httpx.Response(200)


def wrong_answer(request: httpx.Request, failure: Exception | httpx.Response) -> str:
    return "offline"


def build() -> None:
    pipeline = (
        ResiliencePipeline()
        .add_fallback(offline)
        .add_fallback(maybe)
        .add_fallback(later)
        .add_stale_cache(StaleCacheOptions(max_stale=timedelta(minutes=5)))
        .add_retry()
    )
    assert_type(pipeline, ResiliencePipeline)
    ResiliencePipeline().add_stale_cache(max_stale="5m", max_entries=100)
    ResiliencePipeline().add_fallback(lambda request, failure: None)
    ResiliencePipeline().add_fallback(one_argument)  # type: ignore[arg-type]  # pyright: ignore[reportArgumentType]
    ResiliencePipeline().add_fallback(wrong_answer)  # type: ignore[arg-type]  # pyright: ignore[reportArgumentType]
    options = StaleCacheOptions(max_stale=60, max_bytes=1 << 20, store_private=True)
    assert_type(options.max_stale, timedelta)
    assert_type(options.max_entries, int)


def read(response: httpx.Response, event: RequestEvent) -> None:
    found = degradation(response)
    assert_type(found, Degradation | None)
    if found is not None:
        assert_type(found.source, Literal["stale-cache", "fallback"])
        assert_type(found.reason, str)
        assert_type(found.age, float | None)
    assert_type(event.degraded, Literal["stale-cache", "fallback"] | None)
