"""Type-checked only (mypy --strict and pyright strict), never run.

`SharedState` is given to transports, clients, the factory and the injector
module, and is a context manager.
"""

from __future__ import annotations

from datetime import timedelta
from typing import assert_type

import httpx
import redis

from http_resilience import (
    AsyncResilientTransport,
    HttpClientFactory,
    ResilientTransport,
    SharedState,
    create_async_client,
    create_client,
)
from http_resilience.injector import HttpClientsModule


def build(client: redis.Redis) -> None:
    with SharedState(
        "redis://127.0.0.1:6379/0",
        namespace="shop",
        fallback="local",
        sync_interval=timedelta(milliseconds=50),
        maximum_batch=64,
        maximum_hosts=100,
    ) as shared:
        assert_type(shared, SharedState)
        assert_type(shared.up, bool)
        assert_type(shared.sync_now(), bool)
        AsyncResilientTransport(name="inventory", shared=shared)
        ResilientTransport(name="inventory", shared=shared)
        assert_type(create_client("inventory", shared=shared), httpx.Client)
        assert_type(create_async_client("inventory", shared=shared), httpx.AsyncClient)
        factory = HttpClientFactory(shared=shared)
        factory.add("inventory", shared=SharedState(client))
        HttpClientsModule(shared=shared)
    SharedState(client, sync_interval=0.1).close()
    SharedState("redis://x", fallback="closed")  # type: ignore[arg-type]  # pyright: ignore[reportArgumentType]
