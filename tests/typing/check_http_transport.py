"""Type-checked only (mypy --strict and pyright strict), never run.

The transports are httpx transports, the factories return httpx clients, the
options read from configuration, and listeners take the event union.
"""

from __future__ import annotations

from datetime import timedelta
from typing import assert_type

import httpx

from http_resilience import (
    AdaptiveLimiterOptions,
    AsyncResilientTransport,
    AttemptEvent,
    BreakerOptions,
    BrokenCircuitError,
    ConcurrencyLimiterOptions,
    HedgeEvent,
    HedgingOptions,
    HttpEvent,
    HttpEventListener,
    HttpResilienceOptions,
    RateLimitedError,
    ResilienceError,
    ResiliencePipeline,
    ResilientTransport,
    RetryOptions,
    create_async_client,
    create_client,
)
from http_resilience.testing import FakeClock


def on_event(event: HttpEvent) -> None:
    if isinstance(event, AttemptEvent):
        assert_type(event.outcome, str)
        assert_type(event.duration, float)


listener: HttpEventListener = on_event


async def typed_async() -> None:
    options = HttpResilienceOptions(max_retry_attempts=2)
    assert_type(options.base_delay, timedelta)
    transport = AsyncResilientTransport(
        httpx.AsyncHTTPTransport(),
        options=options,
        name="orders",
        clock=FakeClock(),
        listeners=[listener],
        random=lambda: 0.5,
    )
    base: httpx.AsyncBaseTransport = transport
    assert_type(transport.will_retry(httpx.Request("GET", "http://x")), bool)
    async with httpx.AsyncClient(transport=base) as client:
        await client.get("http://x")
    async with create_async_client("orders", options, base_url="http://x") as client:
        assert_type(client, httpx.AsyncClient)
        try:
            await client.get("/")
        except BrokenCircuitError as error:
            assert_type(error.retry_after, float | None)
        except RateLimitedError as error:
            assert_type(error.retry_after, float | None)
        except ResilienceError:
            pass


def typed_sync() -> None:
    config = {"resilience": {"http": {"clients": {"orders": {"queue_limit": 5}}}}}
    options = HttpResilienceOptions.from_config(config, client="orders")
    assert_type(options, HttpResilienceOptions)
    transport = ResilientTransport(config=config, name="orders")
    base: httpx.BaseTransport = transport
    with httpx.Client(transport=base) as client:
        client.get("http://x")
    with create_client("orders", config=config, timeout=5) as client:
        assert_type(client, httpx.Client)


async def typed_pipeline() -> None:
    pipeline = (
        ResiliencePipeline()
        .add_timeout(timedelta(seconds=1))
        .add_retry(RetryOptions(max_retry_attempts=2))
        .add_breaker(BreakerOptions())
        .add_limiter(ConcurrencyLimiterOptions())
        .add_adaptive_limiter(AdaptiveLimiterOptions(max_limit=200))
        .add_hedging(HedgingOptions(delay=timedelta(milliseconds=200)))
        .add_timeout("300ms")
    )
    assert_type(pipeline, ResiliencePipeline)
    transport = AsyncResilientTransport(pipeline=pipeline, name="catalog")
    assert_type(transport.pipeline, ResiliencePipeline | None)
    assert_type(transport.options, HttpResilienceOptions | None)
    async with create_async_client("catalog", pipeline=pipeline) as client:
        assert_type(client, httpx.AsyncClient)


def on_hedge(event: HttpEvent) -> None:
    if isinstance(event, HedgeEvent):
        assert_type(event.attempt, int)
        assert_type(event.reason, str)
