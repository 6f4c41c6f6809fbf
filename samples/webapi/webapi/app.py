"""The orders service: FastAPI, the mediator, SQLAlchemy and a resilient client.

The recipe (docs/web-services.md, "FastAPI: the recipe"), in order:

- `create_app` builds everything the service holds, when the app is built:
  the database engine, one `Injector` (the mediator and its handlers, the
  database's unit of work, the mediator's retry, the named HTTP clients),
  the mediator itself, the idempotency store and the health routes. A wiring
  mistake fails here, before the server takes a request;
- the lifespan creates the tables (a service in production migrates them
  instead: see ``mediator/src/mediator/sqlalchemy/migrations``), starts the
  outbox's relay (`OutboxRelay`, as an asyncio task: `webapi.relay`) that
  delivers each order's `ReserveStock` after its commit, and, when the
  application stops, stops the relay (within a bound), then closes the HTTP
  clients and the engine;
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
  its ``Degraded`` header;
- ``POST /orders`` answers 202 Accepted with the order ``"reserving"`` and
  its ``Location``; ``GET /orders/{order_id}`` answers its state as the
  relay settles it (``"reserved"`` or ``"rejected"``); ``GET
  /health/outbox`` is the operator's view of the relay: messages pending and
  dead and the delivery lag, counts only, never a message's content.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Annotated, Any, Final, NoReturn

import httpx
from fastapi import Depends, FastAPI, Path, Request, Response
from fastapi.exceptions import RequestValidationError
from injector import Injector
from pydantic import BaseModel
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
    WallClock,
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
    OutboxRelay,
    OutboxStats,
    SqlAlchemyModule,
    acreate_idempotency_table,
    acreate_outbox_table,
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
from webapi.relay import STOP_WITHIN, RelayTask


@dataclass(frozen=True)
class RelaySettings:
    """How the outbox's relay delivers the orders' reservations.

    The defaults are `OutboxRelay`'s own but for the poll (a commit in this
    process wakes the relay anyway; the poll only finds what another process
    recorded).

    Attributes:
        base_delay: The wait before a failed delivery's second attempt,
            doubled each attempt after (jittered).
        max_delay: The longest wait between attempts.
        max_attempts: Deliveries before a message is dead (held for an
            operator's ``redeliver``).
        poll_interval: The wait between rounds that found nothing due.
        in_process: Whether the app's lifespan runs the relay (`RelayTask`).
            False leaves it to the caller: a test drives
            ``app.state.relay.run_once()``, a worker process runs it.
        clock: The relay's wall clock; None for the system's (a test's
            fake one makes a backoff pass without waiting).
        stop_within: Seconds the shutdown waits for the round in flight.
    """

    base_delay: timedelta = timedelta(seconds=1)
    max_delay: timedelta = timedelta(minutes=10)
    max_attempts: int = 10
    poll_interval: timedelta = timedelta(seconds=1)
    in_process: bool = True
    clock: WallClock | None = None
    stop_within: float = STOP_WITHIN


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
        relay: How the outbox's relay delivers.
    """

    inventory_url: str
    database_url: str = "sqlite+aiosqlite:///orders.db"
    inventory: HttpResilienceOptions = field(default_factory=HttpResilienceOptions)
    listeners: Sequence[HttpEventListener] = ()
    inventory_transport: httpx.AsyncBaseTransport | None = None
    relay: RelaySettings = field(default_factory=RelaySettings)


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
    # The outbox's relay, on the same engine and mediator: it delivers each
    # order's ReserveStock after the order's commit.
    relay = OutboxRelay(
        mediator,
        engine,
        base_delay=settings.relay.base_delay,
        max_delay=settings.relay.max_delay,
        max_attempts=settings.relay.max_attempts,
        poll_interval=settings.relay.poll_interval,
        clock=settings.relay.clock,
    )
    running = RelayTask(relay)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncGenerator[None]:
        # A demo creates its tables; a service in production migrates them
        # before it starts (the idempotency and outbox tables' migrations
        # ship with mediator.sqlalchemy) and leaves these lines out.
        async with engine.begin() as connection:
            await connection.run_sync(Base.metadata.create_all)
        await acreate_idempotency_table(engine)
        await acreate_outbox_table(engine)
        if settings.relay.in_process:
            running.start()
        try:
            yield
        finally:
            # The relay first: its deliveries use the clients and the engine.
            await running.stop(settings.relay.stop_within)
            await clients.aclose()
            await engine.dispose()

    app = FastAPI(title="orders", lifespan=lifespan)
    app.state.mediator = mediator
    app.state.relay = relay
    app.state.relay_task = running
    # Up while the process serves, whatever its dependencies do.
    app.router.routes.append(Route("/health/live", liveness()))
    # Ready while no dependency refuses calls (an open or isolated breaker).
    app.router.routes.append(Route("/health/ready", readiness(clients)))

    # The operator's view of the outbox: counts and the lag, never a
    # message's content (a payload, a principal, an error). What the running
    # relay read after its last round; read now when no relay runs here.
    @app.get("/health/outbox", responses=ANSWERS)
    async def outbox_health() -> OutboxHealth:
        stats = relay.last_stats if running.running else None
        return OutboxHealth.of(stats or await relay.stats())

    # The OpenAPI says what the middlewares answer too (the key the route
    # needs, their problem+json), so schema-driven tools hold it to that.
    # Accepted: the order is recorded, its reservation follows (the relay
    # delivers it); GET its Location for its state.
    @app.post(
        "/orders",
        status_code=202,
        responses={**KEYED_ANSWERS, 202: {"headers": LOCATION}},
        openapi_extra={"parameters": [IDEMPOTENCY_KEY]},
    )
    async def place_order(
        order: PlaceOrder, mediator: MediatorOf, response: Response
    ) -> OrderView:
        placed = await mediator.send(order)
        response.headers["Location"] = f"/orders/{placed.order_id}"
        return placed

    @app.get("/orders/{order_id}", responses=CALLERS_ANSWERS)
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


class OutboxHealth(BaseModel):
    """The outbox's relay at one moment, as ``GET /health/outbox`` answers it."""

    pending: int
    """Messages not delivered yet, those in flight included."""
    in_flight: int
    dead: int
    """Messages held for an operator (``OutboxRelay.redeliver``)."""
    oldest_pending_age_seconds: float | None
    """The delivery lag: how long the oldest pending message has waited."""
    read_at: datetime

    @classmethod
    def of(cls, stats: OutboxStats) -> OutboxHealth:
        age = stats.oldest_pending_age
        return cls(
            pending=stats.pending,
            in_flight=stats.in_flight,
            dead=stats.dead,
            oldest_pending_age_seconds=None if age is None else age.total_seconds(),
            read_at=stats.read_at,
        )


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

CALLERS_ANSWERS: Final[dict[int | str, dict[str, Any]]] = {
    **ANSWERS,
    401: _problem(
        "No caller: an order is read by the caller that placed it.",
        **{"WWW-Authenticate": {"schema": {"type": "string"}}},
    ),
    404: _problem("No such order of this caller's (DomainErrorMiddleware)."),
}
"""The answers of a route that reads what a caller owns."""

LOCATION: Final[dict[str, Any]] = {
    "Location": {
        "description": "The order's own route: GET it for its state.",
        "schema": {"type": "string"},
    }
}

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
