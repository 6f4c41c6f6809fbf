"""Type-checked only (mypy --strict and pyright strict), never run.

The web middlewares wrap any ASGI app and mount in FastAPI; the telemetry
listeners and behavior are what the clients and the mediator take; testing
mode is a context manager; the recorder keeps events of the kind asked for.
"""

from __future__ import annotations

from collections.abc import MutableMapping
from datetime import timedelta
from typing import Any, assert_type

import httpx
from fastapi import FastAPI
from injector import Injector
from sqlalchemy.ext.asyncio import AsyncEngine

from http_resilience import (
    AttemptEvent,
    HttpClientFactory,
    HttpEvent,
    ResilienceContextMiddleware,
    create_async_client,
)
from http_resilience.injector import HttpClientsModule
from http_resilience.otel import HttpMetrics, HttpTracing
from http_resilience.testing import EventRecorder, ScriptedTransport
from http_resilience.testing import set_testing as set_http_testing
from mediator import MediatorModule, Principal, current_correlation_id
from mediator.asgi import (
    DomainErrorMiddleware,
    IdempotencyKeyMiddleware,
    RequestContextMiddleware,
)
from mediator.otel import TelemetryBehavior
from mediator.sqlalchemy import AsyncSqlAlchemyIdempotencyStore
from mediator_resilience.testing import set_testing as set_retry_testing


def web(app: FastAPI) -> None:
    app.add_middleware(DomainErrorMiddleware)
    app.add_middleware(RequestContextMiddleware, principal=lambda scope: None)

    async def from_token(scope: object) -> Principal | None:
        return Principal("u-1")

    DomainErrorMiddleware(app, retry_after=2.0)
    RequestContextMiddleware(app, principal=from_token, correlation_header="X-Id")


def trust_at_the_edge(app: FastAPI) -> None:
    def from_the_mesh(scope: MutableMapping[str, Any]) -> bool:
        return scope.get("client") is not None

    app.add_middleware(
        ResilienceContextMiddleware, trusted=from_the_mesh, default_deadline="5s"
    )
    app.add_middleware(RequestContextMiddleware, trusted=from_the_mesh)
    ResilienceContextMiddleware(app, default_deadline=timedelta(seconds=5))
    ResilienceContextMiddleware(app, trusted=None, default_deadline=2.5)


def idempotency_keys(app: FastAPI, engine: AsyncEngine) -> None:
    app.add_middleware(
        IdempotencyKeyMiddleware,
        store_factory=lambda: AsyncSqlAlchemyIdempotencyStore(engine),
        required=["/orders"],
    )
    IdempotencyKeyMiddleware(
        app,
        required=lambda scope: scope["path"] == "/pay",
        methods={"POST"},
        replay_headers=("ETag",),
        lease=timedelta(minutes=2),
    )


def one_correlation_id() -> None:
    HttpClientFactory(correlation=current_correlation_id)
    Injector([HttpClientsModule(correlation=current_correlation_id)])


def telemetry() -> None:
    recorder: EventRecorder[HttpEvent] = EventRecorder()
    client = create_async_client(
        "stock",
        listeners=[HttpMetrics(), HttpTracing(), recorder],
        transport=ScriptedTransport(503, 200),
    )
    assert_type(client, httpx.AsyncClient)
    assert_type(recorder.of(AttemptEvent), list[AttemptEvent])
    MediatorModule(lambda m: m.add_behavior(TelemetryBehavior()).use_defaults())


def testing_mode() -> None:
    with set_http_testing(True, attempts=1), set_retry_testing(True):
        pass
