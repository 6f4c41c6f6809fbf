"""The orders service: FastAPI, the mediator, SQLAlchemy and a resilient client.

The recipe (docs/web-services.md, "FastAPI: the recipe"), in order:

- `create_app` builds everything the service holds, when the app is built:
  the database engine, one `Injector` (the mediator and its handlers, the
  database's unit of work, the mediator's retry, the named HTTP clients),
  the mediator itself, the idempotency store and the health routes. A wiring
  mistake fails here, before the server takes a request;
- the lifespan only creates the tables (a service in production migrates
  them instead: see ``mediator/src/mediator/sqlalchemy/migrations``) and,
  when the application stops, closes the HTTP clients and the engine;
- `mediator_of`, a FastAPI dependency, hands each endpoint the mediator;
- FastAPI's own 422 for a body it cannot read (`RequestValidationError`) is
  raised on as the mediator's `ValidationError`, so that every 422 has one
  shape: `DomainErrorMiddleware`'s problem+json, with ``errors``;
- OpenTelemetry's meters and spans are on (they report nowhere until the
  application configures an SDK), and two health routes say whether the
  process is up and whether its dependencies take calls;
- the middlewares, in the one order they take, set each request's
  correlation id (one for the audit records and the HTTP calls) and caller
  (`webapi.auth`, a stand-in for real authentication), carry the caller's
  deadline in, take the ``Idempotency-Key`` every ``POST /orders`` must carry
  (the order sent again under it is answered with its first answer, marked
  ``Idempotent-Replayed: true``), and turn what escapes a handler into the
  answer it means: a domain error, or an outage of the inventory; an answer
  given degraded (the stock route's, while the inventory is down) says so in
  its ``Degraded`` header.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Annotated, Any, Final, NoReturn

import httpx
from fastapi import Depends, FastAPI, Path, Request
from fastapi.exceptions import RequestValidationError
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
    FieldError,
    Mediator,
    MediatorModule,
    ValidationError,
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
from webapi.auth import CHALLENGE, demo_principal
from webapi.domain import (
    HANDLERS,
    INVENTORY,
    SKU_LENGTH,
    SKU_PATTERN,
    Base,
    Order,
    OrderView,
    PlaceOrder,
    Stock,
    StockView,
)


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
    """The orders service for `settings`, built whole; served once.

    The lifespan closes what this builds (the HTTP clients, the engine) when
    the application stops, so an app is served once: build another to serve
    again.
    """
    engine = create_async_engine(settings.database_url)
    injector = Injector(
        [
            MediatorModule(
                lambda m: (
                    m.add_handler(*HANDLERS)
                    .add_behavior(TelemetryBehavior)  # the global providers
                    .use_defaults()
                )
            ),
            # The wait for the database's write lock, and the mediator's
            # retry, keep the caller's deadline too.
            SqlAlchemyModule(async_engine=engine, remaining_time=remaining_time),
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
    mediator = injector.get(Mediator)  # a wiring mistake fails here
    clients = injector.get(HttpClientFactory)
    # The idempotency records: the mediator's (@idempotent commands) and the
    # HTTP answers IdempotencyKeyMiddleware keeps, in one table.
    store = AsyncSqlAlchemyIdempotencyStore(engine)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncGenerator[None]:
        # A demo creates its tables; a service in production migrates them
        # before it starts (the idempotency table's migrations ship with
        # mediator.sqlalchemy) and leaves these two lines out.
        async with engine.begin() as connection:
            await connection.run_sync(Base.metadata.create_all)
        await acreate_idempotency_table(engine)
        try:
            yield
        finally:
            await clients.aclose()
            await engine.dispose()

    app = FastAPI(title="orders", lifespan=lifespan)
    app.state.mediator = mediator
    # Up while the process serves, whatever its dependencies do.
    app.router.routes.append(Route("/health/live", liveness()))
    # Ready while no dependency refuses calls (an open or isolated breaker).
    app.router.routes.append(Route("/health/ready", readiness(clients)))

    # The OpenAPI says what the middlewares answer too (the key the route
    # needs, their problem+json), so schema-driven tools hold it to that.
    @app.post(
        "/orders",
        status_code=201,
        responses=KEYED_ANSWERS,
        openapi_extra={"parameters": [IDEMPOTENCY_KEY]},
    )
    async def place_order(order: PlaceOrder, mediator: MediatorOf) -> OrderView:
        return await mediator.send(order)

    @app.get("/orders/{order_id}", responses=ANSWERS)
    async def get_order(order_id: str, mediator: MediatorOf) -> OrderView:
        return await mediator.send(Order(order_id=order_id))

    # Browsing may degrade: while the inventory is down, the level last seen,
    # its source and age in the answer's Degraded header (the middleware's
    # degradation_header). Placing an order never does.
    @app.get("/stock/{sku}", responses=ANSWERS)
    async def get_stock(
        sku: Annotated[
            str, Path(min_length=1, max_length=SKU_LENGTH, pattern=SKU_PATTERN)
        ],
        mediator: MediatorOf,
    ) -> StockView:
        return await mediator.send(Stock(sku=sku))

    app.add_exception_handler(RequestValidationError, invalid_request)

    # The one order of the web middlewares (docs/web-services.md, "The
    # middleware stack"); each refuses to serve in another. The last added is
    # the outermost: the request's correlation id and caller first (echoed on
    # every answer), then the caller's deadline and retry (counted from the
    # request's arrival), then the idempotency key (scoped to the caller;
    # without one, 401), then what escapes a handler: a domain error, whose
    # answer the key keeps, or an outage of the inventory.
    app.add_middleware(ResilienceErrorMiddleware)
    app.add_middleware(
        DomainErrorMiddleware, www_authenticate=CHALLENGE, degradation_header=True
    )
    app.add_middleware(
        IdempotencyKeyMiddleware,
        store_factory=lambda: store,
        required=["/orders"],
        www_authenticate=CHALLENGE,
    )
    app.add_middleware(ResilienceContextMiddleware)
    app.add_middleware(RequestContextMiddleware, principal=demo_principal)
    return app


_PROBLEM_SCHEMA: Final[dict[str, Any]] = {
    "type": "object",
    "required": ["type", "title", "status", "detail"],
    "properties": {
        "type": {"type": "string"},
        "title": {"type": "string"},
        "status": {"type": "integer"},
        "detail": {"type": "string"},
        "errors": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["field", "message"],
                "properties": {
                    "field": {"type": ["string", "null"]},
                    "message": {"type": "string"},
                },
            },
        },
    },
}
_RETRY_AFTER: Final[dict[str, Any]] = {
    "Retry-After": {
        "description": "Whole seconds to wait before sending it again.",
        "schema": {"type": "integer", "minimum": 0},
    }
}


def _problem(description: str, **headers: dict[str, Any]) -> dict[str, Any]:
    """One problem+json answer of the middlewares, for FastAPI's ``responses=``."""
    answer: dict[str, Any] = {
        "description": description,
        "content": {"application/problem+json": {"schema": _PROBLEM_SCHEMA}},
    }
    if headers:
        answer["headers"] = headers
    return answer


ANSWERS: Final[dict[int | str, dict[str, Any]]] = {
    404: _problem("Not found (DomainErrorMiddleware)."),
    422: _problem("Invalid request, or a business rule it breaks."),
    429: _problem("A dependency's rate limit.", **_RETRY_AFTER),
    500: _problem("A bug: the answer says nothing of it."),
    502: _problem("A dependency answered wrongly."),
    503: _problem("Busy, or a dependency is down.", **_RETRY_AFTER),
    504: _problem("The request's deadline passed."),
}
"""The answers any route of the service may give, besides its own."""

KEYED_ANSWERS: Final[dict[int | str, dict[str, Any]]] = {
    **ANSWERS,
    400: _problem("No Idempotency-Key, or a malformed one."),
    401: _problem(
        "No caller: a keyed request needs one.",
        **{"WWW-Authenticate": {"schema": {"type": "string"}}},
    ),
    409: _problem(
        "The key's first request is still running, or the order exists.",
        **_RETRY_AFTER,
    ),
    413: _problem("A body too large to keep under a key."),
    422: _problem(
        "Invalid request, a business rule it breaks, or the key used with "
        "another request."
    ),
}
"""The answers of a route `IdempotencyKeyMiddleware` requires a key for."""

IDEMPOTENCY_KEY: Final[dict[str, Any]] = {
    "name": "Idempotency-Key",
    "in": "header",
    "required": True,
    "description": "The caller's key of this order: the same key again is "
    "answered with the first answer, marked Idempotent-Replayed.",
    "schema": {"type": "string", "pattern": "^[!-~]{1,255}$"},
}
"""The header `IdempotencyKeyMiddleware` requires, as an OpenAPI parameter."""


def mediator_of(request: Request) -> Mediator:
    """The mediator, for an endpoint: ``mediator: MediatorOf``."""
    mediator: Mediator = request.app.state.mediator
    return mediator


MediatorOf = Annotated[Mediator, Depends(mediator_of)]


async def invalid_request(request: Request, error: Exception) -> NoReturn:
    """FastAPI's 422 raised on as the mediator's, for `DomainErrorMiddleware`.

    FastAPI answers a body (or a parameter) it cannot read with a 422 of its
    own shape. Raised on as a `ValidationError`, it gets the shape of every
    other 422 of the service: problem+json, with one ``{"field", "message"}``
    per error. A field of the body is named as the command's field is (the
    body is the command: ``"quantity"``, ``"lines.0.sku"``), one elsewhere
    by where it was sent (``"query.limit"``), and the body as a whole (not
    JSON, missing, or no object) by null.

    Raises:
        ValidationError: Always; the middleware answers it.
    """
    errors = error.errors() if isinstance(error, RequestValidationError) else ()
    raise ValidationError(
        f"{request.method} {request.url.path}: the request is invalid",
        [FieldError(_field(item), str(item["msg"])) for item in errors],
    ) from error


def _field(error: Mapping[str, Any]) -> tuple[str | int, ...]:
    path = tuple[str | int, ...](error["loc"])
    if error["type"] == "json_invalid":
        return ()  # FastAPI's location is ("body", <offset of the error>)
    return path[1:] if path[:1] == ("body",) else path
