"""The web sample (samples/webapi): its service in process, and its demo for real.

In process, FastAPI's `TestClient` drives the orders service, whose inventory
client reaches the inventory app through `httpx.ASGITransport` (no socket).
Its outbox relay does not run in the lifespan here: each test delivers with
``relay.run_once()`` on the app's loop, and moves the relay's clock instead of
waiting out a backoff. Under uvicorn, the relay runs in the lifespan as the
service runs it. For real, the demo runs as a user runs it, two uvicorn
servers on 127.0.0.1 for a 2 s load, and must end well, print its report and
write its plot.
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
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pydantic
import pytest
import sqlalchemy
from fastapi.testclient import TestClient

from http_resilience import HttpResilienceOptions
from mediator import FieldError, SystemWallClock, ValidationError
from mediator.asgi import DomainErrorMiddleware
from mediator.sqlalchemy import OutboxRelay, idempotency_table, outbox_table
from tests.support.fault_server import serve_app
from webapi.app import RelaySettings, Settings, create_app
from webapi.domain import Base, PlaceOrder
from webapi.inventory import Faults, Stock, create_inventory

DEMO = Path(__file__).resolve().parents[2] / "samples" / "webapi" / "demo.py"


class Later:
    """The relay's wall clock: the system's, moved ahead by `ahead` (a backoff)."""

    def __init__(self) -> None:
        self.ahead = timedelta(0)
        self._system = SystemWallClock()

    def now(self) -> datetime:
        return self._system.now() + self.ahead


def service(
    tmp_path: Path,
    stock: Stock,
    faults: Faults | None = None,
    *,
    database_url: str | None = None,
    clock: Later | None = None,
    max_attempts: int = 10,
) -> Generator[TestClient]:
    inventory = create_inventory(stock, faults or Faults())
    settings = Settings(
        inventory_url="http://inventory.local",
        database_url=database_url or f"sqlite+aiosqlite:///{tmp_path}/orders.db",
        inventory=HttpResilienceOptions(base_delay="1ms"),
        inventory_transport=httpx.ASGITransport(app=inventory),
        relay=RelaySettings(
            in_process=False, clock=clock or Later(), max_attempts=max_attempts
        ),
    )
    with TestClient(create_app(settings)) as client:
        yield client


def relay_of(client: TestClient) -> OutboxRelay:
    app: Any = client.app  # the FastAPI app, typed as any ASGI app
    relay: OutboxRelay = app.state.relay
    return relay


def deliver(client: TestClient) -> int:
    """One round of the app's relay, on the app's loop: messages claimed."""
    portal = client.portal
    assert portal is not None  # inside the client's `with`
    return portal.call(relay_of(client).run_once)


def outbox_health(client: TestClient) -> dict[str, Any]:
    answer = client.get("/health/outbox")
    assert answer.status_code == 200
    found: dict[str, Any] = answer.json()
    return found


def read(client: TestClient, order_id: str, caller: str = "alice") -> Any:
    return client.get(
        f"/orders/{order_id}", headers={"Authorization": f"Bearer {caller}"}
    )


@pytest.fixture
def stock() -> Stock:
    return Stock(levels={"widget": 5})


@pytest.fixture
def clock() -> Later:
    return Later()


@pytest.fixture
def client(tmp_path: Path, stock: Stock, clock: Later) -> Generator[TestClient]:
    yield from service(tmp_path, stock, clock=clock)


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


def _order(answer: Any) -> dict[str, Any]:
    """The order an answer holds, without its times."""
    found: dict[str, Any] = answer.json()
    return {name: found[name] for name in (*ORDER, "state")}


def test_an_order_is_accepted_then_reserved_by_the_relay(
    client: TestClient, stock: Stock
) -> None:
    placed = place(client, ORDER)
    # Accepted: recorded with its reservation in the outbox, nothing called.
    assert placed.status_code == 202
    assert placed.headers["Location"] == "/orders/o-1"
    assert _order(placed) == {**ORDER, "state": "reserving"}
    assert placed.json()["settled_at"] is None
    assert stock.requests == 0
    assert _order(read(client, "o-1")) == {**ORDER, "state": "reserving"}
    assert outbox_health(client)["pending"] == 1

    assert deliver(client) == 1
    settled = read(client, "o-1")
    assert settled.status_code == 200
    assert _order(settled) == {**ORDER, "state": "reserved"}
    body = settled.json()
    assert body["placed_at"] == placed.json()["placed_at"]
    assert datetime.fromisoformat(body["settled_at"]) >= datetime.fromisoformat(
        body["placed_at"]
    )
    assert (stock.requests, stock.levels) == (1, {"widget": 3})
    # The inventory's key is derived from the message id: one per message.
    [reserved] = stock.reserved
    assert reserved.startswith("d-")
    assert deliver(client) == 0  # delivered: nothing is due any more
    health = outbox_health(client)
    assert (health["pending"], health["dead"]) == (0, 0)


def test_an_order_sent_again_with_its_key_is_replayed(
    tmp_path: Path, client: TestClient, stock: Stock
) -> None:
    first = place(client, ORDER, key="k-1")
    again = place(client, ORDER, key="k-1")
    assert (first.status_code, again.status_code) == (202, 202)
    assert again.content == first.content
    assert again.headers["Location"] == first.headers["Location"] == "/orders/o-1"
    assert again.headers["Idempotent-Replayed"] == "true"
    assert "Idempotent-Replayed" not in first.headers
    database = sqlalchemy.create_engine(f"sqlite:///{tmp_path}/orders.db")
    try:
        with database.connect() as connection:
            rows = connection.execute(sqlalchemy.text("SELECT id FROM orders"))
            assert rows.scalars().all() == ["o-1"]
            # One reservation recorded: the replay ran nothing.
            messages = connection.execute(
                sqlalchemy.select(outbox_table.c.message_type)
            ).scalars()
            assert messages.all() == ["webapi.domain:ReserveStock"]
    finally:
        database.dispose()
    assert deliver(client) == 1
    assert (stock.requests, len(stock.reserved), stock.levels) == (1, 1, {"widget": 3})
    # The key with another order: refused, nothing recorded.
    other = place(client, {**ORDER, "order_id": "o-2"}, key="k-1")
    assert other.status_code == 422
    assert other.headers["content-type"] == "application/problem+json"
    assert deliver(client) == 0
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
    missing = client.get(
        "/orders/none",
        headers={"X-Correlation-ID": "req-7", "Authorization": f"Bearer {CALLER}"},
    )
    assert (missing.status_code, missing.headers["X-Correlation-ID"]) == (404, "req-7")
    assert missing.headers["content-type"] == "application/problem+json"


def test_an_order_the_stock_cannot_cover_is_rejected_once(
    client: TestClient, stock: Stock
) -> None:
    too_many = place(client, {**ORDER, "quantity": 6})
    assert too_many.status_code == 202  # accepted: the inventory decides
    assert deliver(client) == 1
    # Not enough stock is an answer: the order is settled, the message
    # delivered, and nothing tried again.
    assert read(client, "o-1").json()["state"] == "rejected"
    assert (stock.requests, stock.levels) == (1, {"widget": 5})
    health = outbox_health(client)
    assert (health["pending"], health["dead"]) == (0, 0)
    assert deliver(client) == 0


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
        relay=RelaySettings(in_process=False),
    )
    with TestClient(create_app(settings)) as client:
        # No id from the caller: the service makes one, and the audit records,
        # the answer and the inventory call all carry it: the outbox keeps it
        # with the message, and the relay delivers under it.
        placed = place(client, ORDER)
        assert seen == []
        assert deliver(client) == 1
    assert placed.status_code == 202
    assert seen == [placed.headers["X-Correlation-ID"]]


def test_health_says_live_and_ready(client: TestClient) -> None:
    assert client.get("/health/live").json() == {"status": "ok"}
    ready = client.get("/health/ready")
    assert (ready.status_code, ready.json()) == (200, {"status": "ready"})


def test_the_outbox_health_has_counts_and_the_lag_and_no_content(
    client: TestClient, clock: Later
) -> None:
    empty = outbox_health(client)
    assert set(empty) == {
        "pending",
        "in_flight",
        "dead",
        "oldest_pending_age_seconds",
        "read_at",
    }
    assert (empty["pending"], empty["oldest_pending_age_seconds"]) == (0, None)
    place(client, ORDER)
    clock.ahead = timedelta(seconds=30)  # the message waits, on the relay's clock
    waiting = outbox_health(client)
    assert waiting["pending"] == 1
    assert 30 <= waiting["oldest_pending_age_seconds"] < 90
    # Nothing the message holds: no sku, no order id, no caller.
    answer = client.get("/health/outbox").text
    assert all(word not in answer for word in ("widget", "o-1", CALLER))


def test_a_bad_order_is_refused_before_anything_is_recorded(
    client: TestClient, stock: Stock
) -> None:
    answer = place(client, {**ORDER, "quantity": 0})
    assert answer.status_code == 422
    assert outbox_health(client)["pending"] == 0
    assert deliver(client) == 0
    assert stock.requests == 0


def test_a_flaky_inventory_is_retried_and_reserves_once(
    tmp_path: Path, stock: Stock
) -> None:
    # Every other request fails: the client retries, the Idempotency-Key
    # keeps the reservation single.
    for client in service(tmp_path, stock, Faults(ratio=0.5, seed=3)):
        for number in range(1, 3):
            order = {**ORDER, "order_id": f"o-{number}", "quantity": 1}
            assert place(client, order).status_code == 202
        assert deliver(client) == 2
        states = [read(client, f"o-{number}").json()["state"] for number in (1, 2)]
        assert states == ["reserved", "reserved"]
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
    request.addfinalizer(lambda: outbox_table.drop(cleanup, checkfirst=True))
    for client in service(tmp_path, stock, database_url=postgres_url):
        assert place(client, {**ORDER, "order_id": "pg-1"}).status_code == 202
        assert deliver(client) == 1
        assert _order(read(client, "pg-1")) == {
            **ORDER,
            "order_id": "pg-1",
            "state": "reserved",
        }


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
    # Every order accepted, and reserved by the relay before the demo ended.
    [outcome] = [line for line in lines if line.startswith("Summary: ")]
    found = re.fullmatch(
        r"Summary: (\d+) orders placed \(202\), (\d+) reserved, 0 rejected, "
        r"0 still reserving; lag from 202 to reserved p50 \d+ ms, max \d+ ms; "
        r"\d+ redeliveries, 0 dead",
        outcome,
    )
    assert found is not None, outcome
    assert found[1] == found[2] != "0"
    assert any(line.startswith("Outbox, read every 0.5 s: ") for line in lines)
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
    assert place(client, ORDER, key="k-1").status_code == 202


def test_each_caller_keeps_its_own_keys(client: TestClient, stock: Stock) -> None:
    alice = place(client, ORDER, key="k-1")
    # The same key from another caller is another order, not a mismatch of
    # alice's: the idempotency records are scoped by the caller.
    bob = client.post(
        "/orders",
        json={**ORDER, "order_id": "o-2", "quantity": 1},
        headers={"Authorization": "Bearer bob", "Idempotency-Key": "k-1"},
    )
    assert (alice.status_code, bob.status_code) == (202, 202)
    assert "Idempotent-Replayed" not in bob.headers
    assert deliver(client) == 2
    assert (len(stock.reserved), stock.levels) == (2, {"widget": 2})


def test_a_caller_reads_its_own_orders_only(client: TestClient) -> None:
    assert place(client, ORDER).status_code == 202
    assert read(client, "o-1").status_code == 200
    # Another caller's order is no order of theirs: 404, as an unknown one.
    others = read(client, "o-1", caller="bob")
    assert (others.status_code, others.json()["detail"]) == (
        404,
        read(client, "o-2", caller="bob").json()["detail"].replace("o-2", "o-1"),
    )
    anonymous = client.get("/orders/o-1")
    assert anonymous.status_code == 401
    assert anonymous.headers["WWW-Authenticate"] == 'Bearer realm="orders"'


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


def test_an_inventory_outage_is_redelivered_after_its_backoff(
    tmp_path: Path, stock: Stock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    faults = Faults(ratio=1.0)
    clock = Later()
    # TestClient raises what escapes the app: an answer here means nothing did.
    for client in service(tmp_path, stock, faults, clock=clock):
        # The caller never meets the outage: the order is accepted.
        placed = place(client, ORDER, headers={"X-Correlation-ID": "req-5"})
        assert placed.status_code == 202
        assert deliver(client) == 1
        assert stock.requests == 4  # the first attempt and its three retries
        assert read(client, "o-1").json()["state"] == "reserving"
        health = outbox_health(client)
        assert (health["pending"], health["dead"]) == (1, 0)
        # Within its backoff (1 s, jittered to 0.5 to 1 s), it is not due.
        assert deliver(client) == 0
        assert stock.requests == 4
        faults.ratio = 0.0  # the inventory is back
        clock.ahead = timedelta(seconds=1)
        assert deliver(client) == 1
        assert read(client, "o-1").json()["state"] == "reserved"
    assert (stock.requests, stock.levels) == (5, {"widget": 3})
    # One line for the failed delivery, naming the message and its next try,
    # and nothing of the inventory's answer but its type.
    [failed] = [r for r in caplog.records if r.name == "mediator.outbox"]
    assert failed.levelno == logging.WARNING
    assert "webapi.domain:ReserveStock) failed (attempt 1 of 10)" in (
        failed.getMessage()
    )
    assert _no_tracebacks(caplog) == []


def test_an_outage_longer_than_the_budget_leaves_the_order_for_an_operator(
    tmp_path: Path, stock: Stock, caplog: pytest.LogCaptureFixture
) -> None:
    faults = Faults(ratio=1.0)
    clock = Later()
    for client in service(tmp_path, stock, faults, clock=clock, max_attempts=2):
        assert place(client, ORDER).status_code == 202
        assert deliver(client) == 1
        clock.ahead = timedelta(seconds=2)
        assert deliver(client) == 1
        # Two deliveries, both failed: dead, visible, never retried alone.
        health = outbox_health(client)
        assert (health["pending"], health["dead"]) == (0, 1)
        clock.ahead = timedelta(hours=1)
        assert deliver(client) == 0
        assert read(client, "o-1").json()["state"] == "reserving"
        relay = relay_of(client)
        portal = client.portal
        assert portal is not None
        [dead] = portal.call(relay.dead_messages)
        assert dead.last_error == "HTTPStatusError"  # the type, no URL
        faults.ratio = 0.0
        assert portal.call(relay.redeliver, dead.id)
        assert deliver(client) == 1
        assert read(client, "o-1").json()["state"] == "reserved"
        assert outbox_health(client)["dead"] == 0
    assert stock.levels == {"widget": 3}


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


def test_under_uvicorn_the_lifespans_relay_reserves_and_stops_with_the_app(
    tmp_path: Path, stock: Stock, caplog: pytest.LogCaptureFixture
) -> None:
    inventory = create_inventory(stock, Faults())
    settings = Settings(
        inventory_url="http://inventory.local",
        database_url=f"sqlite+aiosqlite:///{tmp_path}/orders.db",
        inventory=HttpResilienceOptions(base_delay="1ms"),
        inventory_transport=httpx.ASGITransport(app=inventory),
        # The relay as the service runs it, in the lifespan; an hour's poll,
        # so only the commit's doorbell can have woken it, and only the
        # stop can end its wait quickly.
        relay=RelaySettings(poll_interval=timedelta(hours=1)),
    )
    ready = threading.Event()
    caplog.set_level(logging.INFO)
    app = create_app(settings)
    served = _signalling(app, ready)
    answers: list[httpx.Response] = []
    waited = threading.Event()
    states: list[str] = []
    with (
        serve_app(served, ready, name="orders") as url,
        httpx.Client(
            base_url=url, timeout=30, headers={"Authorization": f"Bearer {CALLER}"}
        ) as client,
    ):
        assert app.state.relay_task.running
        for number in range(3):
            answers.append(
                client.post(
                    "/orders",
                    json={**ORDER, "order_id": f"o-{number}", "quantity": 1},
                    headers={"Idempotency-Key": f"k-{number}"},
                )
            )
        stats = None
        for _ in range(1000):  # at most 10 s for the relay to deliver
            states = [
                client.get(f"/orders/o-{number}").json()["state"] for number in range(3)
            ]
            # The order is settled by the receiver's commit; the relay records
            # the delivery and reads its stats just after.
            stats = app.state.relay.last_stats
            if states == ["reserved"] * 3 and stats is not None and not stats.pending:
                break
            waited.wait(0.01)
        assert states == ["reserved"] * 3
        assert stats is not None
        assert stats.pending == 0
    # serve_app waited for the lifespan's end: the relay stopped with it.
    assert not app.state.relay_task.running
    # The answers hold their streams, so no id below is reused.
    streams = {id(answer.extensions["network_stream"]) for answer in answers}
    assert [answer.status_code for answer in answers] == [202, 202, 202]
    assert len(streams) == 1  # one connection served all three: none was dropped
    assert stock.levels == {"widget": 2}
    assert _no_tracebacks(caplog) == []
    assert not [r for r in caplog.records if r.name == "webapi.relay"]


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
        # An order never degrades: it is accepted, and reserved once the
        # inventory is back (the relay's redelivery), never from the cache.
        accepted = place(client, ORDER)
        assert accepted.status_code == 202
        assert "Degraded" not in accepted.headers
        assert deliver(client) == 1
        assert read(client, "o-1").json()["state"] == "reserving"
        assert stock.levels == {"widget": 5}

        now[0] = 25.0  # back
        again = client.get("/stock/widget")
        assert again.status_code == 200
        assert "Degraded" not in again.headers
