"""Type-checked only (mypy --strict and pyright strict), never run.

The factory returns httpx clients, `add` chains and takes options or a
pipeline, the module and the factory take a callable that configures the
factory, `http_resilience` exports the factory itself, and `correlation_id`
yields the id in force.
"""

from __future__ import annotations

from typing import assert_type

import httpx
from injector import Injector

import http_resilience
from http_resilience import HttpEvent, HttpResilienceOptions, ResiliencePipeline
from http_resilience.injector import (
    HttpClientFactory,
    HttpClientsModule,
    correlation_id,
    current_correlation_id,
)
from http_resilience.testing import FakeClock


def on_event(event: HttpEvent) -> None:
    pass


async def typed_async() -> None:
    module = HttpClientsModule(
        lambda clients: clients.add(
            "stock", HttpResilienceOptions(max_retry_attempts=1), base_url="http://x"
        ).add("prices"),
        config={"resilience": {"http": {}}},
        clock=FakeClock(),
        listeners=[on_event],
        correlation_header="Request-Id",
    )
    factory = Injector([module]).get(HttpClientFactory)
    assert_type(factory, HttpClientFactory)
    assert_type(factory.async_client("stock"), httpx.AsyncClient)
    assert_type(factory.names, tuple[str, ...])
    with correlation_id("order-42") as chosen:
        assert_type(chosen, str)
        assert_type(current_correlation_id(), str | None)
    async with factory as same:
        assert_type(same, HttpClientFactory)
    await factory.aclose()


def typed_sync() -> None:
    factory = HttpClientFactory(correlation_header=None).add("stock")
    assert_type(factory, HttpClientFactory)
    with factory:
        assert_type(factory.client(), httpx.Client)
    factory.close()


async def typed_pipeline() -> None:
    factory = http_resilience.HttpClientFactory(
        lambda clients: clients.add(
            "catalog",
            pipeline=ResiliencePipeline().add_hedging(delay=0.2),
            base_url="http://catalog.local",
        ),
        config={"resilience": {"http": {}}},
        clock=FakeClock(),
    )
    assert_type(factory, HttpClientFactory)
    assert_type(factory.async_client("catalog"), httpx.AsyncClient)
    await factory.aclose()
