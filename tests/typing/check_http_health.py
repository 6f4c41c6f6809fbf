"""Type-checked only (mypy --strict and pyright strict), never run.

Health snapshots are typed to their fields, the control takes a client or a
transport, and the health apps mount where any ASGI app does.
"""

from __future__ import annotations

from typing import Literal, assert_type

import httpx
from starlette.applications import Starlette
from starlette.routing import Mount, Route

from http_resilience import (
    AsyncResilientTransport,
    BudgetHealth,
    CircuitControl,
    ClientHealth,
    HostHealth,
    HttpClientFactory,
    LimiterHealth,
    create_async_client,
    create_client,
    health,
)
from http_resilience.asgi import liveness, readiness


def read(client: httpx.Client, transport: AsyncResilientTransport) -> None:
    report = health(client)
    assert_type(report, ClientHealth)
    assert_type(health(transport), ClientHealth)
    assert_type(report.hosts, tuple[HostHealth, ...])
    assert_type(report.refusing, tuple[HostHealth, ...])
    assert_type(report.limiters, tuple[LimiterHealth, ...])
    assert_type(report.budgets, tuple[BudgetHealth, ...])
    host = report.hosts[0]
    assert_type(host.state, Literal["closed", "open", "half_open", "isolated"])
    assert_type(host.retry_after, float | None)
    assert_type(HttpClientFactory().health(), tuple[ClientHealth, ...])


def control() -> None:
    circuits = CircuitControl(create_async_client())
    circuits.isolate("https://api.example.com")
    circuits.reset("https://api.example.com")
    assert_type(circuits.isolated, tuple[str, ...])
    CircuitControl(create_client())


def mount(factory: HttpClientFactory, client: httpx.AsyncClient) -> Starlette:
    return Starlette(
        routes=[
            Route("/health/live", liveness()),
            Mount("/health/ready", app=readiness(factory, client)),
        ]
    )
