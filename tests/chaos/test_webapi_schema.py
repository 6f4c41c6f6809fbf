"""The web sample against its own OpenAPI: a bounded Schemathesis run.

The orders service (samples/webapi) runs under uvicorn on 127.0.0.1, its
inventory stubbed in process as the sample's own tests stub it, and its
outbox relay running in the lifespan as it does in production. Its OpenAPI,
read from the server, declares the ``Idempotency-Key`` a POST needs and the
problem+json answers the middlewares give; every operation then gets 25
generated requests (derandomized, so a run is repeatable), each held to the
schema: no 5xx, a documented status, content type, headers and body.
"""

# Schemathesis annotates its checks and operations only in part.
# pyright: reportUnknownMemberType=false, reportUnknownVariableType=false
# pyright: reportUnknownArgumentType=false

from __future__ import annotations

import threading
from collections.abc import Generator
from pathlib import Path
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis.checks import not_a_server_error
from schemathesis.core.result import Ok
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from http_resilience import HttpResilienceOptions
from tests.support.fault_server import serve_app
from webapi.app import Settings, create_app
from webapi.inventory import Faults, Stock, create_inventory

EXAMPLES = 25
CALLER = {"Authorization": "Bearer alice"}
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
]


class Plenty(dict[str, int]):
    """Stock levels with plenty of every SKU: a generated order can be placed."""

    def get(self, key: str, default: Any = None) -> int:
        return super().get(key, 10**9)


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


@pytest.fixture
def orders(tmp_path: Path) -> Generator[str]:
    inventory = create_inventory(Stock(levels=Plenty()), Faults())
    app = create_app(
        Settings(
            inventory_url="http://inventory.local",
            database_url=f"sqlite+aiosqlite:///{tmp_path}/orders.db",
            inventory=HttpResilienceOptions(base_delay="1ms"),
            inventory_transport=httpx.ASGITransport(app=inventory),
        )
    )
    ready = threading.Event()
    with serve_app(_signalling(app, ready), ready, name="orders") as url:
        yield url


def test_every_operation_holds_to_the_schema(orders: str) -> None:
    schema = schemathesis.openapi.from_url(f"{orders}/openapi.json")
    operations = []
    for result in schema.get_all_operations():
        assert isinstance(result, Ok), result
        operations.append(result.ok())
    assert sorted(f"{op.method.upper()} {op.path}" for op in operations) == [
        "GET /health/outbox",
        "GET /orders/{order_id}",
        "GET /stock/{sku}",
        "POST /orders",
    ]
    seen: dict[str, set[int]] = {}
    for operation in operations:
        label = f"{operation.method.upper()} {operation.path}"

        @given(case=operation.as_strategy())
        @settings(
            max_examples=EXAMPLES,
            derandomize=True,
            database=None,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
        )
        def holds(case: Any) -> None:
            response = case.call(headers=CALLER, base_url=orders)
            seen.setdefault(label, set()).add(response.status_code)  # noqa: B023
            case.validate_response(response, checks=CHECKS)

        holds()
    # The run reached the handlers and the middlewares' answers alike.
    assert 202 in seen["POST /orders"]
    assert seen["POST /orders"] - {202}
    assert 404 in seen["GET /orders/{order_id}"]
    assert seen["GET /health/outbox"] == {200}
