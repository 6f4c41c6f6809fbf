"""The web sample (samples/webapi): its service in process, and its demo for real.

In process, FastAPI's `TestClient` drives the orders service, whose inventory
client reaches the inventory app through `httpx.ASGITransport` (no socket).
For real, the demo runs as a user runs it, two uvicorn servers on 127.0.0.1
for a 2 s load, and must end well, print its report and write its plot.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import subprocess
import sys
import threading
from collections.abc import Generator
from pathlib import Path
from typing import Any

import httpx
import pydantic
import pytest
import sqlalchemy
from fastapi.testclient import TestClient

from http_resilience import HttpResilienceOptions
from mediator import FieldError, ValidationError
from mediator.asgi import DomainErrorMiddleware
from mediator.sqlalchemy import idempotency_table
from tests.support.fault_server import serve_app
from webapi.app import Settings, create_app
from webapi.domain import Base, PlaceOrder
from webapi.inventory import Faults, Stock, create_inventory

DEMO = Path(__file__).resolve().parents[2] / "samples" / "webapi" / "demo.py"


def service(
    tmp_path: Path,
    stock: Stock,
    faults: Faults | None = None,
    *,
    database_url: str | None = None,
) -> Generator[TestClient]:
    inventory = create_inventory(stock, faults or Faults())
    settings = Settings(
        inventory_url="http://inventory.local",
        database_url=database_url or f"sqlite+aiosqlite:///{tmp_path}/orders.db",
        inventory=HttpResilienceOptions(base_delay="1ms"),
        inventory_transport=httpx.ASGITransport(app=inventory),
    )
    with TestClient(create_app(settings)) as client:
        yield client


@pytest.fixture
def stock() -> Stock:
    return Stock(levels={"widget": 5})


@pytest.fixture
def client(tmp_path: Path, stock: Stock) -> Generator[TestClient]:
    yield from service(tmp_path, stock)


ORDER = {"order_id": "o-1", "sku": "widget", "quantity": 2}
CALLER = "alice"  # the sample's stand-in authentication takes the token as the id


def place(
    client: TestClient,
    order: dict[str, Any],
    key: str | None = None,
    headers: dict[str, str] | None = None,
) -> Any:  # the TestClient's response (httpx2's, or httpx's)
    """POST the order as `CALLER`, with an Idempotency-Key: `key`, else its own."""
    sent = {
        "Authorization": f"Bearer {CALLER}",
        "Idempotency-Key": key or f"key-{order['order_id']}",
        **(headers or {}),
    }
    return client.post("/orders", json=order, headers=sent)


def test_an_order_is_placed_reserved_and_read_back(
    client: TestClient, stock: Stock
) -> None:
    placed = place(client, ORDER)
    assert (placed.status_code, placed.json()) == (201, ORDER)
    assert client.get("/orders/o-1").json() == ORDER
    assert stock.levels == {"widget": 3}
    # The inventory's key is derived from the caller's: one per order.
    [reserved] = stock.reserved
    assert reserved.startswith("d-")


def test_an_order_sent_again_with_its_key_is_replayed(
    tmp_path: Path, client: TestClient, stock: Stock
) -> None:
    first = place(client, ORDER, key="k-1")
    again = place(client, ORDER, key="k-1")
    assert (first.status_code, again.status_code) == (201, 201)
    assert again.content == first.content
    assert again.headers["Idempotent-Replayed"] == "true"
    assert "Idempotent-Replayed" not in first.headers
    assert (stock.requests, len(stock.reserved), stock.levels) == (1, 1, {"widget": 3})
    database = sqlalchemy.create_engine(f"sqlite:///{tmp_path}/orders.db")
    try:
        with database.connect() as connection:
            rows = connection.execute(sqlalchemy.text("SELECT id FROM orders"))
            assert rows.scalars().all() == ["o-1"]
    finally:
        database.dispose()
    # The key with another order: refused, nothing reserved.
    other = place(client, {**ORDER, "order_id": "o-2"}, key="k-1")
    assert other.status_code == 422
    assert other.headers["content-type"] == "application/problem+json"
    assert stock.requests == 1


def test_an_order_without_a_key_is_refused(client: TestClient, stock: Stock) -> None:
    refused = client.post(
        "/orders", json=ORDER, headers={"Authorization": f"Bearer {CALLER}"}
    )
    assert refused.status_code == 400
    assert refused.json()["detail"] == "This request needs an Idempotency-Key header."
    assert stock.requests == 0


def test_errors_are_answered_as_problems_and_carry_the_request_id(
    client: TestClient, stock: Stock
) -> None:
    missing = client.get("/orders/none", headers={"X-Correlation-ID": "req-7"})
    assert (missing.status_code, missing.headers["X-Correlation-ID"]) == (404, "req-7")
    assert missing.headers["content-type"] == "application/problem+json"
    too_many = place(client, {**ORDER, "quantity": 6})
    assert too_many.status_code == 422  # a business rule: not enough stock
    assert stock.levels == {"widget": 5}


def test_the_inventory_call_carries_the_requests_correlation_id(
    tmp_path: Path, stock: Stock
) -> None:
    seen: list[str] = []
    inventory = create_inventory(stock, Faults())

    async def recording(scope: Any, receive: Any, send: Any) -> None:
        headers = dict(scope.get("headers", ()))
        seen.append(headers.get(b"x-correlation-id", b"").decode())
        await inventory(scope, receive, send)

    settings = Settings(
        inventory_url="http://inventory.local",
        database_url=f"sqlite+aiosqlite:///{tmp_path}/orders.db",
        inventory_transport=httpx.ASGITransport(app=recording),
    )
    with TestClient(create_app(settings)) as client:
        # No id from the caller: the service makes one, and the audit records,
        # the answer and the inventory call all carry it.
        placed = place(client, ORDER)
    assert placed.status_code == 201
    assert seen == [placed.headers["X-Correlation-ID"]]


def test_health_says_live_and_ready(client: TestClient) -> None:
    assert client.get("/health/live").json() == {"status": "ok"}
    ready = client.get("/health/ready")
    assert (ready.status_code, ready.json()) == (200, {"status": "ready"})


def test_a_bad_order_is_refused_before_any_call(
    client: TestClient, stock: Stock
) -> None:
    answer = place(client, {**ORDER, "quantity": 0})
    assert answer.status_code == 422
    assert stock.requests == 0


def test_a_flaky_inventory_is_retried_and_reserves_once(
    tmp_path: Path, stock: Stock
) -> None:
    # Every other request fails: the client retries, the Idempotency-Key
    # keeps the reservation single.
    for client in service(tmp_path, stock, Faults(ratio=0.5, seed=3)):
        for number in range(1, 3):
            order = {**ORDER, "order_id": f"o-{number}", "quantity": 1}
            assert place(client, order).status_code == 201
    assert stock.requests > 2
    assert stock.levels == {"widget": 3}


def test_the_service_runs_on_postgresql_too(
    request: pytest.FixtureRequest, tmp_path: Path, stock: Stock, postgres_url: str
) -> None:
    # The cluster is the session's: the sample's table goes when the test ends.
    cleanup = sqlalchemy.create_engine(postgres_url)
    request.addfinalizer(cleanup.dispose)
    request.addfinalizer(lambda: Base.metadata.drop_all(cleanup))
    request.addfinalizer(lambda: idempotency_table.drop(cleanup, checkfirst=True))
    for client in service(tmp_path, stock, database_url=postgres_url):
        assert place(client, {**ORDER, "order_id": "pg-1"}).status_code == 201
        assert client.get("/orders/pg-1").json()["order_id"] == "pg-1"


@pytest.mark.chaos  # load: the demo run, orders a second (make chaos)
def test_the_demo_runs_for_real_and_writes_its_plot(tmp_path: Path) -> None:
    env = {**os.environ, "WEBAPI_DURATION": "2", "TMPDIR": str(tmp_path)}
    result = subprocess.run(
        [sys.executable, "-W", "error", str(DEMO)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    lines = result.stdout.splitlines()
    assert lines[0] == "The orders and inventory services are up on 127.0.0.1."
    assert "Orders placed: 20 (logical requests, 10 a second)" in lines
    assert any(line.startswith("Inventory requests: ") for line in lines)
    assert any(line.startswith("Latency: p50 ") for line in lines)
    # The orders sent again with their keys: each one replayed, none reserved.
    [resent] = [line for line in lines if line.startswith("Sent again with ")]
    found = re.fullmatch(
        r"Sent again with their Idempotency-Key: (\d+) placed orders, "
        r"(\d+) replayed, 0 inventory requests",
        resent,
    )
    assert found is not None, resent
    assert found[1] == found[2] != "0"
    # The shopper's stock reads, 2 a second; 2 s ends before the outage.
    [reads] = [line for line in lines if line.startswith("Stock reads ")]
    assert reads.startswith("Stock reads (the browsing route, 2 a second): 4; "), reads
    assert (tmp_path / "webapi-demo.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# --- The caller, the two 422s, an outage ----------------------------------------------


@pytest.mark.parametrize(
    "authorization",
    [None, "Bearer", "Basic YWxpY2U6c2VjcmV0", f"Bearer {'x' * 65}"],
    ids=["none", "no token", "not a bearer", "too long"],
)
def test_an_order_without_a_caller_is_refused_401(
    tmp_path: Path, client: TestClient, stock: Stock, authorization: str | None
) -> None:
    headers = {"Idempotency-Key": "k-1", "X-Correlation-ID": "req-9"}
    if authorization is not None:
        headers["Authorization"] = authorization
    refused = client.post("/orders", json=ORDER, headers=headers)
    assert refused.status_code == 401
    assert refused.headers["content-type"] == "application/problem+json"
    assert refused.headers["WWW-Authenticate"] == 'Bearer realm="orders"'
    assert refused.headers["X-Correlation-ID"] == "req-9"
    assert refused.json()["title"] == "Unauthorized"
    # Nothing ran and nothing was kept: the key is still free for its caller.
    assert stock.requests == 0
    assert place(client, ORDER, key="k-1").status_code == 201


def test_each_caller_keeps_its_own_keys(client: TestClient, stock: Stock) -> None:
    alice = place(client, ORDER, key="k-1")
    # The same key from another caller is another order, not a mismatch of
    # alice's: the idempotency records are scoped by the caller.
    bob = client.post(
        "/orders",
        json={**ORDER, "order_id": "o-2", "quantity": 1},
        headers={"Authorization": "Bearer bob", "Idempotency-Key": "k-1"},
    )
    assert (alice.status_code, bob.status_code) == (201, 201)
    assert "Idempotent-Replayed" not in bob.headers
    assert (len(stock.reserved), stock.levels) == (2, {"widget": 2})


async def _mediators_422(errors: list[FieldError]) -> httpx.Response:
    """What DomainErrorMiddleware answers for a ValidationError of `errors`."""

    async def app(scope: Any, receive: Any, send: Any) -> None:
        raise ValidationError("PlaceOrder is invalid", errors)

    transport = httpx.ASGITransport(app=DomainErrorMiddleware(app))
    async with httpx.AsyncClient(transport=transport) as client:
        return await client.post("http://orders/orders")


def test_fastapis_422_has_the_shape_of_the_mediators(
    client: TestClient, stock: Stock
) -> None:
    bad = {**ORDER, "quantity": 0, "sku": ""}
    fastapis = place(client, bad)
    # The same fields refused by the mediator (its ValidationBehavior turns a
    # pydantic error into these field errors: the path and the message).
    with pytest.raises(pydantic.ValidationError) as refused:
        PlaceOrder.model_validate(bad)
    errors = [FieldError(tuple(e["loc"]), e["msg"]) for e in refused.value.errors()]
    mediators = asyncio.run(_mediators_422(errors))
    assert fastapis.status_code == mediators.status_code == 422
    assert (
        fastapis.headers["content-type"]
        == mediators.headers["content-type"]
        == "application/problem+json"
    )
    assert fastapis.json() == mediators.json()
    assert [error["field"] for error in fastapis.json()["errors"]] == [
        "sku",
        "quantity",
    ]
    assert stock.requests == 0


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"{not json", "JSON decode error"),
        (b"[1]", "Input should be a valid dictionary or object to extract fields from"),
        (b"", "Field required"),
    ],
    ids=["not json", "no object", "empty"],
)
def test_a_body_that_is_no_order_is_a_422_about_the_request_as_a_whole(
    client: TestClient, stock: Stock, body: bytes, message: str
) -> None:
    answer = client.post(
        "/orders",
        content=body,
        headers={
            "Authorization": f"Bearer {CALLER}",
            "Idempotency-Key": "k-1",
            "Content-Type": "application/json",
        },
    )
    assert answer.status_code == 422
    assert answer.headers["content-type"] == "application/problem+json"
    assert answer.json() == {
        "type": "about:blank",
        "title": "Unprocessable Content",
        "status": 422,
        "detail": "The request has invalid fields: see errors.",
        "errors": [{"field": None, "message": message}],
    }
    assert stock.requests == 0


def _no_tracebacks(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        f"{record.name}: {record.getMessage()}"
        for record in caplog.records
        if record.exc_info is not None or record.levelno >= logging.ERROR
    ]


def test_an_inventory_outage_is_a_503_problem_without_a_traceback(
    tmp_path: Path, stock: Stock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    # TestClient raises what escapes the app: an answer here means nothing did.
    for client in service(tmp_path, stock, Faults(ratio=1.0)):
        down = place(client, ORDER, headers={"X-Correlation-ID": "req-5"})
        assert down.status_code == 503
        assert down.headers["content-type"] == "application/problem+json"
        assert down.headers["X-Correlation-ID"] == "req-5"
        assert down.json()["status"] == 503
        assert "Traceback" not in down.text
        assert "inventory" not in down.text.lower()  # no internal details
    assert stock.requests == 4  # the first attempt and its three retries
    assert stock.levels == {"widget": 5}
    assert _no_tracebacks(caplog) == []


def _signalling(app: Any, ready: threading.Event) -> Any:
    """`app`, setting `ready` once its lifespan started (for `serve_app`)."""

    async def wrapped(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "lifespan":
            await app(scope, receive, send)
            return

        async def signalled(message: Any) -> None:
            await send(message)
            if message["type"] == "lifespan.startup.complete":
                ready.set()

        await app(scope, receive, signalled)

    return wrapped


def test_an_outage_under_uvicorn_logs_no_traceback_and_keeps_the_connection(
    tmp_path: Path, stock: Stock, caplog: pytest.LogCaptureFixture
) -> None:
    inventory = create_inventory(stock, Faults(ratio=1.0))
    settings = Settings(
        inventory_url="http://inventory.local",
        database_url=f"sqlite+aiosqlite:///{tmp_path}/orders.db",
        inventory=HttpResilienceOptions(base_delay="1ms"),
        inventory_transport=httpx.ASGITransport(app=inventory),
    )
    ready = threading.Event()
    caplog.set_level(logging.INFO)
    served = _signalling(create_app(settings), ready)
    answers: list[httpx.Response] = []
    with (
        serve_app(served, ready, name="orders") as url,
        httpx.Client(base_url=url, timeout=30) as client,
    ):
        for number in range(3):
            answers.append(
                client.post(
                    "/orders",
                    json={**ORDER, "order_id": f"o-{number}"},
                    headers={
                        "Authorization": f"Bearer {CALLER}",
                        "Idempotency-Key": f"k-{number}",
                    },
                )
            )
    # The answers hold their streams, so no id below is reused.
    streams = {id(answer.extensions["network_stream"]) for answer in answers}
    assert [answer.status_code for answer in answers] == [503, 503, 503]
    assert {answer.headers["content-type"] for answer in answers} == {
        "application/problem+json"
    }
    assert all("connection" not in answer.headers for answer in answers)
    assert len(streams) == 1  # one connection served all three: none was dropped
    assert stock.levels == {"widget": 5}
    assert _no_tracebacks(caplog) == []


def test_browsing_degrades_to_the_stock_last_seen_and_says_so(
    tmp_path: Path, stock: Stock
) -> None:
    now = [0.0]
    faults = Faults(outage=(10.0, 20.0), now=lambda: now[0])
    for client in service(tmp_path, stock, faults):
        fresh = client.get("/stock/widget")
        assert fresh.status_code == 200
        assert fresh.json() == {"sku": "widget", "available": 5}
        assert "Degraded" not in fresh.headers
        assert client.get("/stock/gadget").status_code == 404  # not an outage
        # A sku goes into the inventory's URL: nothing but its characters.
        for hostile in ("a%3Fb", "a%20b", "x" * 33):
            refused = client.get(f"/stock/{hostile}")
            assert refused.status_code == 422
            assert refused.headers["content-type"] == "application/problem+json"
        # A slash, even encoded, is another path: no route, no call.
        assert client.get("/stock/..%2Freservations").status_code == 404
        assert stock.reads == 2

        now[0] = 15.0  # the inventory is down
        reads = stock.reads
        stale = client.get("/stock/widget")
        assert stale.status_code == 200
        assert stale.json() == {"sku": "widget", "available": 5}
        # The source and its age in whole seconds: the read just before.
        assert re.fullmatch(r'"stock-cache";age=\d+', stale.headers["Degraded"])
        assert stock.reads > reads  # asked, and retried, before degrading
        # Never seen before the outage: nothing to degrade to.
        unseen = client.get("/stock/sprocket")
        assert unseen.status_code == 503
        assert "Degraded" not in unseen.headers
        # An order never degrades: its failure is the outage.
        down = place(client, ORDER)
        assert down.status_code == 503
        assert "Degraded" not in down.headers
        assert stock.levels == {"widget": 5}

        now[0] = 25.0  # back
        again = client.get("/stock/widget")
        assert again.status_code == 200
        assert "Degraded" not in again.headers
