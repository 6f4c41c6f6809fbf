"""The orders service: FastAPI, the mediator, SQLAlchemy and a resilient client.

The recipe, in order:

- the lifespan builds one `Injector` (the mediator and its handlers, the
  database's unit of work, the mediator's retry, the named HTTP clients) and
  closes the clients and the engine when the application stops;
- `mediator_of`, a FastAPI dependency, hands each endpoint the mediator;
- OpenTelemetry's meters and spans are on (they report nowhere until the
  application configures an SDK), and two health routes say whether the
  process is up and whether its dependencies take calls;
- the middlewares, in the one order they take, set each request's
  correlation id (one for the audit records and the HTTP calls), carry the
  caller's deadline in, take the ``Idempotency-Key`` every ``POST /orders``
  must carry (the order sent again under it is answered with its first
  answer, marked ``Idempotent-Replayed: true``), and turn what escapes a
  handler into the answer it means.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Annotated

import httpx
from fastapi import Depends, FastAPI, Request
from fastapi.responses import JSONResponse
from injector import Injector
from sqlalchemy.ext.asyncio import create_async_engine
from starlette.routing import Route

from http_resilience import (
    HttpClientFactory,
    HttpEventListener,
    HttpResilienceOptions,
    ResilienceContextMiddleware,
    ResilienceErrorMiddleware,
    remaining_time,
)
from http_resilience.asgi import liveness, readiness
from http_resilience.injector import HttpClientsModule
from http_resilience.otel import HttpMetrics, HttpTracing
from mediator import (
    IdempotencyOptions,
    Mediator,
    MediatorModule,
    current_correlation_id,
)
from mediator.asgi import (
    DomainErrorMiddleware,
    IdempotencyKeyMiddleware,
    RequestContextMiddleware,
)
from mediator.otel import TelemetryBehavior
from mediator.sqlalchemy import (
    AsyncSqlAlchemyIdempotencyStore,
    SqlAlchemyModule,
    acreate_idempotency_table,
)
from mediator_resilience import ResilienceMediatorModule
from webapi.domain import HANDLERS, INVENTORY, Base, Order, OrderView, PlaceOrder


@dataclass(frozen=True)
class Settings:
    """What the service needs to know.

    Attributes:
        inventory_url: The inventory service's base URL.
        database_url: An async SQLAlchemy URL: SQLite (``sqlite+aiosqlite``)
            by default, PostgreSQL (``postgresql+psycopg``) as well.
        inventory: The inventory client's resilience options.
        listeners: Called with every event of the HTTP clients.
        inventory_transport: The transport under the inventory client's
            pipeline; None for the network (tests pass an in-process one).
    """

    inventory_url: str
    database_url: str = "sqlite+aiosqlite:///orders.db"
    inventory: HttpResilienceOptions = field(default_factory=HttpResilienceOptions)
    listeners: Sequence[HttpEventListener] = ()
    inventory_transport: httpx.AsyncBaseTransport | None = None


def create_app(settings: Settings) -> FastAPI:
    """The orders service for `settings`."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncGenerator[None]:
        engine = create_async_engine(settings.database_url)
        async with engine.begin() as connection:
            await connection.run_sync(Base.metadata.create_all)
        # The idempotency records: the mediator's (@idempotent commands) and
        # the HTTP answers IdempotencyKeyMiddleware keeps.
        await acreate_idempotency_table(engine)
        app.state.idempotency_store = AsyncSqlAlchemyIdempotencyStore(engine)
        injector = Injector(
            [
                MediatorModule(
                    lambda m: (
                        m.add_handler(*HANDLERS)
                        .add_behavior(TelemetryBehavior)  # the global providers
                        .use_defaults()
                    )
                ),
                SqlAlchemyModule(async_engine=engine),
                # This demo signs no one in: its callers are anonymous and opt
                # in to share one idempotency scope. A service that
                # authenticates leaves this out: each principal keeps its own.
                lambda binder: binder.bind(
                    IdempotencyOptions, to=IdempotencyOptions(allow_anonymous=True)
                ),
                # The mediator's retry keeps the caller's deadline too.
                ResilienceMediatorModule(remaining_time=remaining_time),
                HttpClientsModule(
                    lambda clients: clients.add(
                        INVENTORY,
                        settings.inventory,
                        base_url=settings.inventory_url,
                        transport=settings.inventory_transport,
                    ),
                    listeners=[HttpMetrics(), HttpTracing(), *settings.listeners],
                    # The inventory calls carry the id the audit records carry.
                    correlation=current_correlation_id,
                ),
            ]
        )
        app.state.injector = injector
        clients = injector.get(HttpClientFactory)
        # Ready while no dependency refuses calls (an open or isolated breaker).
        app.router.routes.append(Route("/health/ready", readiness(clients)))
        try:
            yield
        finally:
            await injector.get(HttpClientFactory).aclose()
            await engine.dispose()

    app = FastAPI(title="orders", lifespan=lifespan)
    # Up while the process serves, whatever its dependencies do.
    app.router.routes.append(Route("/health/live", liveness()))

    @app.post("/orders", status_code=201)
    async def place_order(order: PlaceOrder, mediator: MediatorOf) -> OrderView:
        return await mediator.send(order)

    @app.get("/orders/{order_id}")
    async def get_order(order_id: str, mediator: MediatorOf) -> OrderView:
        return await mediator.send(Order(order_id=order_id))

    @app.exception_handler(httpx.HTTPStatusError)
    async def inventory_failed(request: Request, error: Exception) -> JSONResponse:
        # The inventory still failed after the client's retries.
        return JSONResponse(
            {"title": "the inventory is unavailable", "status": 503}, status_code=503
        )

    # The one order of the web middlewares (docs/web-services.md, "The
    # middleware stack"); each refuses to serve in another. The last added is
    # the outermost: the request's correlation id and caller first (echoed on
    # every answer), then the caller's deadline and retry (counted from the
    # request's arrival), then the idempotency key (the caller is known), then
    # what escapes a handler: a domain error, whose answer the key keeps, or
    # an outage of the inventory.
    app.add_middleware(ResilienceErrorMiddleware)
    app.add_middleware(DomainErrorMiddleware)
    app.add_middleware(
        IdempotencyKeyMiddleware,
        store_factory=lambda: app.state.idempotency_store,
        required=["/orders"],
        anonymous=["/orders"],  # no sign-in in this demo, as above
    )
    app.add_middleware(ResilienceContextMiddleware)
    app.add_middleware(RequestContextMiddleware)
    return app


def mediator_of(request: Request) -> Mediator:
    """The mediator, for an endpoint: ``mediator: MediatorOf``."""
    injector: Injector = request.app.state.injector
    return injector.get(Mediator)


MediatorOf = Annotated[Mediator, Depends(mediator_of)]
