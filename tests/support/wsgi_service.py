"""One service, served twice: as a Flask app and as a Django app, under WSGI.

Its views send through a mediator with `send_sync`; its handlers call a
second local server (`Downstream`, which records what each request carried)
through an `HttpClientFactory`'s sync client. The middlewares of
`mediator.wsgi` and `http_resilience.wsgi` wrap each app in their order.
"""

from __future__ import annotations

import ipaddress
import json
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from injector import Binder, Injector, inject

import mediator
from http_resilience import (
    BrokenCircuitError,
    HttpClientFactory,
    HttpResilienceOptions,
    TotalTimeoutError,
)
from http_resilience import wsgi as resilience_wsgi
from http_resilience.testing import FakeClock
from mediator import (
    BusinessRuleError,
    ConflictError,
    FieldError,
    ForbiddenError,
    Mediator,
    MediatorModule,
    NotFoundError,
    Principal,
    Query,
    QueryHandler,
    TransientDatabaseError,
    ValidationError,
)
from mediator import wsgi as mediator_wsgi

SERVICE_NETWORK = ipaddress.ip_network("127.0.0.1/32")
UNTRUSTED_PEER = "127.0.0.2"
DEFAULT_DEADLINE = 5  # seconds
SECRET = "customer secret@example.com"  # in every message: never answered


def from_the_service_network(environ: dict[str, Any]) -> bool:
    return ipaddress.ip_address(environ["REMOTE_ADDR"]) in SERVICE_NETWORK


def principal_of(environ: dict[str, Any]) -> Principal | None:
    # Stands for what an authenticating layer verified.
    user = environ.get("HTTP_X_USER")
    return None if user is None else Principal(user)


_CONTEXT_HEADERS = ("x-request-timeout-ms", "x-correlation-id", "x-retry-attempt")


@dataclass
class Downstream:
    """``/ok`` answers 200 with what it was sent; ``/down`` 503. All are kept."""

    seen: list[tuple[str, dict[str, str]]] = field(
        default_factory=list[tuple[str, dict[str, str]]]
    )
    lock: threading.Lock = field(default_factory=threading.Lock)

    def __call__(
        self, environ: dict[str, Any], start_response: Callable[..., Any]
    ) -> Iterable[bytes]:
        headers = {
            name: environ[f"HTTP_{name.upper().replace('-', '_')}"]
            for name in _CONTEXT_HEADERS
            if f"HTTP_{name.upper().replace('-', '_')}" in environ
        }
        path = environ["PATH_INFO"]
        with self.lock:
            self.seen.append((path, headers))
        if path != "/ok":
            start_response("503 Service Unavailable", [("Content-Length", "0")])
            return [b""]
        body = json.dumps(headers).encode()
        start_response("200 OK", [("Content-Type", "application/json")])
        return [body]

    def calls_to(self, path: str) -> list[dict[str, str]]:
        with self.lock:
            return [headers for seen, headers in self.seen if seen == path]

    def clear(self) -> None:
        with self.lock:
            self.seen.clear()


class Quote(Query[dict[str, Any]]):
    """What the handler saw, and what the downstream was sent."""


class Fail(Query[None]):
    kind: str


class CallDown(Query[int]):
    then: str


class Clients:
    """The service's outbound clients: one, to the downstream."""

    def __init__(self, downstream_url: str) -> None:
        self.factory = HttpClientFactory(
            lambda clients: clients.add(
                "downstream",
                # Waits far shorter than any deadline: every retry is made.
                HttpResilienceOptions(base_delay=0.001),
                base_url=downstream_url,
            ),
            clock=FakeClock(),  # and they pass at once
            correlation=mediator.current_correlation_id,
        )


class QuoteHandler(QueryHandler[Quote, dict[str, Any]]):
    @inject
    def __init__(self, clients: Clients) -> None:
        self.clients = clients

    def handle(self, request: Quote) -> dict[str, Any]:
        principal = mediator.current_principal()
        answer = self.clients.factory.client("downstream").get("/ok")
        return {
            "principal": None if principal is None else principal.id,
            "correlation": mediator.current_correlation_id(),
            "downstream": answer.json(),
        }


class FailHandler(QueryHandler[Fail, None]):
    def handle(self, request: Fail) -> None:
        raise _FAILURES[request.kind]()


_FAILURES: dict[str, Callable[[], Exception]] = {
    "invalid": lambda: ValidationError(
        SECRET, [FieldError(("lines", 0, "sku"), "Field required")]
    ),
    "missing": lambda: NotFoundError(SECRET),
    "forbidden": lambda: ForbiddenError(SECRET),
    "conflict": lambda: ConflictError(SECRET),
    "rule": lambda: BusinessRuleError(SECRET),
    "busy": lambda: TransientDatabaseError(SECRET),
    "circuit": lambda: BrokenCircuitError(SECRET, retry_after=2.5),
    "timeout": lambda: TotalTimeoutError(SECRET),
    "bug": lambda: RuntimeError(SECRET),
}


class CallDownHandler(QueryHandler[CallDown, int]):
    """Calls ``/down`` (retried until the client gives up), then `then`."""

    @inject
    def __init__(self, clients: Clients) -> None:
        self.clients = clients

    def handle(self, request: CallDown) -> int:
        self.clients.factory.client("downstream").get("/down")
        if request.then == "answer":
            return 502
        raise _FAILURES[request.then]()


@dataclass
class Service:
    """The mediator and the clients the apps' views use."""

    mediator: Mediator
    clients: Clients

    def close(self) -> None:
        self.clients.factory.close()


def build_service(downstream_url: str) -> Service:
    clients = Clients(downstream_url)

    def bind(binder: Binder) -> None:
        binder.bind(Clients, to=clients)

    built = Injector(
        [
            bind,
            MediatorModule(
                lambda m: m.add_handler(QuoteHandler, FailHandler, CallDownHandler)
            ),
        ]
    ).get(Mediator)
    return Service(built, clients)


def stream_of(service: Service) -> Iterator[bytes]:
    """A streamed body: its parts are made while the server reads them."""
    yield f"{mediator.current_correlation_id()}\n".encode()
    answer = service.clients.factory.client("downstream").get("/ok")
    yield answer.content


def wrapped(app: Any) -> Any:
    """`app` inside the four middlewares, in their order."""
    return mediator_wsgi.RequestContextMiddleware(
        resilience_wsgi.ResilienceContextMiddleware(
            mediator_wsgi.DomainErrorMiddleware(
                resilience_wsgi.ResilienceErrorMiddleware(app),
                www_authenticate='Bearer realm="shop"',
            ),
            trusted=from_the_service_network,
            default_deadline=DEFAULT_DEADLINE,
        ),
        principal=principal_of,
        trusted=from_the_service_network,
    )


def misordered(app: Any) -> Any:
    """`app` with the error middleware outside the context one: refused."""
    return mediator_wsgi.DomainErrorMiddleware(
        mediator_wsgi.RequestContextMiddleware(app)
    )
