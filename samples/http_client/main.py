"""Resilient HTTP clients against a flaky server: retry, breaker, POST, budget, quota.

Run it with ``make demo`` (or ``python samples/http_client/main.py``). The
inventory server is a small ASGI app in this file, served by uvicorn on
127.0.0.1 (a free port) in a thread that the demo starts and stops; it prints
every request it answers. The clients come from `http_resilience.injector`:
two named clients, each with its own options, read from configuration.
"""

import asyncio
import json
import logging
import socket
import threading
from collections import Counter
from collections.abc import Awaitable, Callable, Generator, MutableMapping
from contextlib import contextmanager
from typing import Any

import httpx
import uvicorn
from injector import Injector

from http_resilience import (
    BreakerEvent,
    BrokenCircuitError,
    HttpEvent,
    HttpResilienceOptions,
    RateLimitedError,
    RejectionEvent,
    ResilienceContextMiddleware,
    RetryEvent,
    SystemClock,
    TotalTimeoutError,
    create_async_client,
    deadline_scope,
)
from http_resilience.injector import (
    HttpClientFactory,
    HttpClientsModule,
    correlation_id,
)
from mediator import Command, CommandHandler, Mediator, MediatorModule
from mediator_resilience import ResilienceMediatorModule, retryable

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

BREAK = 0.3  # seconds: short, so that the demo sees the breaker recover
CLOCK = SystemClock()  # a test would pass http_resilience.testing.FakeClock

OUTAGE_CALLS = 20
WAREHOUSE_SECONDS = 3.0
PARTNER_QUOTA = 10

# Options as an application reads them from its configuration file: retries
# for everything, and for "stock" no retries and a breaker that trips early.
# "catalog" keeps the retry budget's share (0.2 retries per call) but not its
# floor of 10 retries a second, so the demo's figures are the same every run.
CONFIG = {
    "resilience": {
        "http": {
            "base_delay": "20ms",
            "clients": {
                "stock": {
                    "max_retry_attempts": 0,
                    "minimum_throughput": 4,
                    "failure_ratio": 0.5,
                    "break_duration": BREAK,
                },
                "catalog": {"retry_budget_min_per_second": 0},
                "partner": {"max_retry_attempts": 0},
            },
        }
    }
}


class InventoryServer:
    """The flaky inventory service, as an ASGI app.

    - ``GET /items/widget``: 503 twice, then the item;
    - ``GET /stock/gadget``: 503 while `down`, else the stock;
    - ``POST /orders``: 503 on the first two requests of each
      ``Idempotency-Key`` (and of the requests without one), then 201;
    - ``GET /catalog/...``: always 503, and not printed (there are many);
    - ``GET /partner/...``: 200 while its quota of `PARTNER_QUOTA` a minute
      lasts, each answer saying what is left in ``RateLimit`` fields;
    - ``GET /chain``: service B, behind `ResilienceContextMiddleware`: it
      calls service C (``/warehouse``, which takes `WAREHOUSE_SECONDS`) and
      answers C's status, or 504 when its caller's deadline runs out first.
    """

    def __init__(self) -> None:
        self.down = False
        self.hits: Counter[tuple[str, str, str]] = Counter()
        self.started = threading.Event()
        self.url = ""
        self.service_b = ResilienceContextMiddleware(self._service_b)

    def answer(self, method: str, path: str, headers: dict[str, str]) -> int:
        key = (method, path, headers.get("idempotency-key", ""))
        self.hits[key] += 1
        if path == "/items/widget":
            return 503 if self.hits[key] <= 2 else 200
        if path == "/stock/gadget":
            return 503 if self.down else 200
        if method == "POST" and path == "/orders":
            return 503 if self.hits[key] <= 2 else 201
        if path.startswith("/catalog/"):
            return 503
        if path.startswith("/partner/"):
            return 200 if self.partner_hits() <= PARTNER_QUOTA else 429
        return 404

    def partner_hits(self) -> int:
        """Requests the partner routes answered."""
        return sum(n for (_, path, _), n in self.hits.items() if "/partner/" in path)

    def quota_headers(self, path: str) -> list[tuple[bytes, bytes]]:
        """What the partner routes publish: the quota, and what is left of it."""
        if not path.startswith("/partner/"):
            return []
        left = max(PARTNER_QUOTA - self.partner_hits(), 0)
        return [
            (b"ratelimit-policy", f'"minute";q={PARTNER_QUOTA};w=60'.encode()),
            (b"ratelimit", f'"minute";r={left};t=60'.encode()),
        ]

    def catalog_hits(self) -> int:
        """Requests the catalog routes answered."""
        return sum(n for (_, path, _), n in self.hits.items() if "/catalog/" in path)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            while (await receive())["type"] != "lifespan.shutdown":
                self.started.set()
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        if scope["path"] == "/chain":
            await self.service_b(scope, receive, send)
            return
        if scope["path"] == "/warehouse":
            await self._service_c(receive, send)
            return
        while (await receive()).get("more_body", False):
            pass  # the body does not matter here
        headers = {k.decode(): v.decode() for k, v in scope["headers"]}
        status = self.answer(scope["method"], scope["path"], headers)
        seen = [f"[{headers.get('x-correlation-id')}]"]
        if "idempotency-key" in headers:
            seen.append(f"Idempotency-Key: {headers['idempotency-key']}")
        if not scope["path"].startswith("/catalog/"):
            print(f"   server: {scope['method']} {scope['path']} -> {status}", *seen)
        body = json.dumps({"status": status, "stock": 12}).encode()
        head = [(b"content-type", b"application/json")]
        head += self.quota_headers(scope["path"])
        await send({"type": "http.response.start", "status": status, "headers": head})
        await send({"type": "http.response.body", "body": body})

    async def _service_b(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Service B: calls C, within whatever deadline its caller gave."""
        options = HttpResilienceOptions(max_retry_attempts=0)
        async with create_async_client(
            "warehouse", options, base_url=self.url, clock=CLOCK
        ) as warehouse:
            try:
                status = (await warehouse.get("/warehouse")).status_code
            except TotalTimeoutError:
                print("   service B: its call to C ran out of its caller's deadline")
                status = 504
        print(f"   service B answers {status}")
        await send({"type": "http.response.start", "status": status, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    async def _service_c(self, receive: Receive, send: Send) -> None:
        """Service C: slow; it stops as soon as its caller goes away."""
        try:
            while True:  # until the caller disconnects, or C is done
                message = await asyncio.wait_for(receive(), WAREHOUSE_SECONDS)
                if message["type"] == "http.disconnect":
                    return
        except TimeoutError:
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": b""})


@contextmanager
def serving(app: InventoryServer) -> Generator[str]:
    """Serve `app` on 127.0.0.1 in a thread; yield its base URL; stop it."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    listener.bind(("127.0.0.1", 0))
    listener.listen()  # before uvicorn runs: early connections wait, not fail
    config = uvicorn.Config(
        app, lifespan="on", log_config=None, access_log=False, http="h11", ws="none"
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(
        target=server.run, kwargs={"sockets": [listener]}, daemon=True
    )
    thread.start()
    try:
        if not app.started.wait(timeout=10):
            raise RuntimeError("the inventory server did not start")
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        listener.close()


REFUSED: Counter[str] = Counter()


def show(event: HttpEvent) -> None:
    """A listener: print the retries and the breaker's changes (no timings).

    The catalog's retries are many and alike: counted, not printed, as are
    the requests refused in the process.
    """
    if isinstance(event, RejectionEvent):
        REFUSED[event.reason] += 1
    elif isinstance(event, RetryEvent) and event.client == "catalog":
        REFUSED["retried"] += 1
    elif isinstance(event, RetryEvent):
        print(
            f"   client {event.client!r}: attempt {event.attempt} failed "
            f"({event.reason}), retrying"
        )
    elif isinstance(event, BreakerEvent):
        print(
            f"   client {event.client!r}: breaker {event.previous} -> {event.current}"
        )


async def retries(factory: HttpClientFactory) -> None:
    print("1. A GET that fails twice, then succeeds, is retried")
    print("   (the server shows each request's X-Correlation-ID in brackets)")
    with correlation_id("lookup-1"):
        response = await factory.async_client("inventory").get("/items/widget")
    print(f"   -> {response.status_code}, {response.json()['stock']} widgets in stock")


async def breaker(factory: HttpClientFactory, app: InventoryServer) -> None:
    print("2. The stock service goes down: the breaker opens, then recovers")
    stock = factory.async_client("stock")
    app.down = True
    with correlation_id("stock-check"):
        for call in range(1, 8):
            try:
                response = await stock.get("/stock/gadget")
            except BrokenCircuitError:
                reached = app.hits["GET", "/stock/gadget", ""]
                print(
                    f"   call {call}: BrokenCircuitError, not sent "
                    f"(the server has seen {reached} calls)"
                )
            else:
                print(f"   call {call}: {response.status_code}")
        app.down = False
        print(f"   the service is back; the demo waits out the {BREAK} s break")
        await CLOCK.sleep(BREAK + 0.2)
        response = await stock.get("/stock/gadget")
        print(f"   call 8, the probe: {response.status_code}")
        response = await stock.get("/stock/gadget")
        print(f"   call 9: {response.status_code}")


async def posts(factory: HttpClientFactory) -> None:
    print("3. A POST is sent once: a retry could place the order twice")
    orders = factory.async_client("inventory")
    with correlation_id("order-1"):
        response = await orders.post("/orders", json={"sku": "widget", "count": 2})
    print(f"   -> {response.status_code}, not retried")
    print("   The same POST with an Idempotency-Key is retried")
    with correlation_id("order-2"):
        response = await orders.post(
            "/orders",
            json={"sku": "widget", "count": 2},
            headers={"Idempotency-Key": "order-7"},
        )
    print(f"   -> {response.status_code} after three attempts")


async def budget(factory: HttpClientFactory, app: InventoryServer) -> None:
    print("4. The catalog is down for everyone: the retry budget bounds the retries")
    catalog = factory.async_client("catalog")
    statuses: Counter[int] = Counter()
    for call in range(OUTAGE_CALLS):
        response = await catalog.get(f"/catalog/item-{call}")
        statuses[response.status_code] += 1
    print(
        f"   {OUTAGE_CALLS} calls, each answered {', '.join(map(str, statuses))}; "
        f"the server saw {app.catalog_hits()} requests"
    )
    print(
        f"   {REFUSED['retried']} retries sent, {REFUSED['retry_budget']} refused "
        f"by the budget (0.2 per call); without it: {4 * OUTAGE_CALLS} requests"
    )


async def quota(factory: HttpClientFactory, app: InventoryServer) -> None:
    print("5. The partner API publishes its quota: the client keeps a tenth back")
    partner = factory.async_client("partner")
    for call in range(1, PARTNER_QUOTA + 1):
        try:
            with correlation_id("offers"):
                response = await partner.get(f"/partner/offer-{call}")
        except RateLimitedError as refused:
            print(
                f"   call {call}: RateLimitedError ({refused.reason}), not sent; "
                f"the quota resets in {refused.retry_after:.0f} s"
            )
        else:
            left = response.headers["ratelimit"].rpartition("r=")[2].split(";")[0]
            print(f"   call {call}: {response.status_code}, {left} left")
    print(f"   the server saw {app.partner_hits()} requests and never answered 429")


@retryable
class PriceBasket(Command[int]):
    """A command the application made safe to repeat: the mediator may retry it."""


class PriceBasketHandler(CommandHandler[PriceBasket, int]):
    client: Any = None  # the "pricing" client, set by the demo

    async def handle(self, request: PriceBasket) -> int:
        response = await PriceBasketHandler.client.get("/catalog/prices")
        response.raise_for_status()
        return int(response.status_code)


async def ceiling(factory: HttpClientFactory, app: InventoryServer) -> None:
    print("6. A @retryable command calls the catalog, which is down")
    PriceBasketHandler.client = factory.async_client("pricing")
    mediator = Injector(
        [
            MediatorModule(lambda m: m.add_handler(PriceBasketHandler).use_defaults()),
            ResilienceMediatorModule(clock=CLOCK),
        ]
    ).get(Mediator)
    before = app.catalog_hits()
    try:
        await mediator.send(PriceBasket())
    except httpx.HTTPStatusError as failed:
        print(f"   -> {failed.response.status_code}, final: the HTTP client retried it")
    print(
        f"   the catalog saw {app.catalog_hits() - before} requests "
        "(4 x 4 = 16 if both layers retried)"
    )


async def across_services(factory: HttpClientFactory) -> None:
    print("7. A calls B with 1 s left; B calls C, which takes 3 s")
    started = CLOCK.monotonic()
    with deadline_scope(1.0):
        response = await factory.async_client("stock").get("/chain")
    took = CLOCK.monotonic() - started
    within = "within its deadline" if took < 1.0 + 0.3 else f"late, after {took:.1f} s"
    print(f"   A got {response.status_code} from B, {within}")
    if response.headers.get("X-Retry-Exhausted") == "1":
        print("   B says its own call gave up (X-Retry-Exhausted): A did not retry")


async def main() -> None:
    app = InventoryServer()
    with serving(app) as url:
        app.url = url
        print("The flaky inventory server is up on 127.0.0.1.")
        module = HttpClientsModule(
            lambda clients: (
                clients.add("inventory", base_url=url)
                .add("stock", base_url=url)
                .add("catalog", base_url=url)
                .add("partner", base_url=url)
                .add("pricing", base_url=url)
            ),
            config=CONFIG,
            clock=CLOCK,
            listeners=[show],
        )
        factory = Injector([module]).get(HttpClientFactory)
        async with factory:  # closes both clients before the server stops
            await retries(factory)
            await breaker(factory, app)
            await posts(factory)
            await budget(factory, app)
            await quota(factory, app)
            await ceiling(factory, app)
            await across_services(factory)
    print("The server is stopped.")


if __name__ == "__main__":
    # The pipeline logs each retry at WARNING, with its (jittered) delay; the
    # listener above prints the same events without timings, so the output is
    # the same on every run.
    logging.basicConfig(level=logging.ERROR)
    asyncio.run(main())
