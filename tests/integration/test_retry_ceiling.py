"""One attempt ceiling across layers: a `@retryable` command over a resilient client.

The scenario a new user met: a `@retryable` command whose handler calls a dead
downstream through a resilient HTTP client made 4 x 4 = 16 downstream requests
and waited 46 s before failing. The HTTP layer now marks what it gives up on
after its own retries (`resilience_final`), and the mediator's default
`is_transient_failure` reads the mark: the command makes the HTTP layer's 4
requests, no more, and fails in the time the HTTP policy allows. Both layers
run on fake clocks; the downstream is a real server on 127.0.0.1.
"""

from __future__ import annotations

import uuid
from typing import ClassVar

import httpx
import pytest
from injector import Injector

from http_resilience import (
    AttemptEvent,
    HttpEvent,
    create_async_client,
    deadline_scope,
    remaining_time,
)
from http_resilience._core.classify import FINAL_MARK as WRITTEN_BY_HTTP
from http_resilience.testing import FakeClock as HttpClock
from mediator import Command, CommandHandler, Mediator, MediatorModule
from mediator_resilience import (
    ResilienceMediatorModule,
    ResilienceMediatorOptions,
    retryable,
)
from mediator_resilience._transient import FINAL_MARK as READ_BY_THE_MEDIATOR
from mediator_resilience.testing import FakeClock as MediatorClock
from tests.support.fault_server import FaultServer

pytestmark = pytest.mark.anyio


class Downstream:
    """The client and the URL the handler calls; set by each test."""

    client: ClassVar[httpx.AsyncClient]
    url: ClassVar[str]


@retryable
class ReserveStock(Command[int]):
    sku: str


class ReserveStockHandler(CommandHandler[ReserveStock, int]):
    async def handle(self, request: ReserveStock) -> int:
        response = await Downstream.client.get(Downstream.url)
        response.raise_for_status()
        return int(response.status_code)


def test_both_packages_spell_the_mark_alike() -> None:
    # A convention, never an import: each package holds its own copy.
    assert WRITTEN_BY_HTTP == READ_BY_THE_MEDIATOR == "resilience_final"


def mediator(clock: MediatorClock) -> Mediator:
    return Injector(
        [
            MediatorModule(lambda m: m.add_handler(ReserveStockHandler).use_defaults()),
            ResilienceMediatorModule(clock=clock),
        ]
    ).get(Mediator)


async def test_a_dead_downstream_gets_the_http_layers_four_requests_not_sixteen(
    fault_server: FaultServer,
) -> None:
    key = f"ceiling-{uuid.uuid4().hex}"
    http_clock, mediator_clock = HttpClock(), MediatorClock()
    async with create_async_client("stock", clock=http_clock) as client:
        Downstream.client = client
        Downstream.url = f"{fault_server.url}/status/503?key={key}"
        with pytest.raises(httpx.HTTPStatusError) as failed:
            await mediator(mediator_clock).send(ReserveStock(sku="A-1"))
    assert failed.value.response.extensions["resilience_final"] is True
    await fault_server.wait_idle(key)
    assert fault_server.hits(key) == 4
    assert mediator_clock.sleeps == []  # the mediator did not retry
    # The time spent is the HTTP policy's three backoffs, within 1-2, 2-4, 4-8 s.
    assert len(http_clock.sleeps) == 3
    assert 7.0 <= sum(http_clock.sleeps) < 14.0


async def test_a_refused_connection_is_final_after_the_http_layers_retries(
    fault_server: FaultServer,
) -> None:
    attempts: list[HttpEvent] = []
    mediator_clock = MediatorClock()
    async with create_async_client(
        "stock", clock=HttpClock(), listeners=[attempts.append]
    ) as client:
        Downstream.client = client
        Downstream.url = f"{fault_server.refused_url}/stock"
        with pytest.raises(httpx.ConnectError) as failed:
            await mediator(mediator_clock).send(ReserveStock(sku="A-1"))
    assert getattr(failed.value, "resilience_final", False) is True
    assert len([e for e in attempts if isinstance(e, AttemptEvent)]) == 4
    assert mediator_clock.sleeps == []


async def test_a_failure_the_http_layer_did_not_retry_is_still_retried_outside(
    fault_server: FaultServer,
) -> None:
    # A POST without an Idempotency-Key is never retried by the HTTP layer, so
    # its failure is not marked: the @retryable command (which the user made
    # idempotent) is retried by the mediator, one request per attempt.
    key = f"post-{uuid.uuid4().hex}"
    mediator_clock = MediatorClock()

    class Poster(CommandHandler[ReserveStock, int]):
        async def handle(self, request: ReserveStock) -> int:
            response = await Downstream.client.post(Downstream.url, json={})
            response.raise_for_status()
            return int(response.status_code)

    async with create_async_client("stock", clock=HttpClock()) as client:
        Downstream.client = client
        Downstream.url = f"{fault_server.url}/flaky/2/503?key={key}"
        sender = Injector(
            [
                MediatorModule(lambda m: m.add_handler(Poster).use_defaults()),
                ResilienceMediatorModule(clock=mediator_clock),
            ]
        ).get(Mediator)
        assert await sender.send(ReserveStock(sku="A-1")) == 200
    await fault_server.wait_idle(key)
    assert fault_server.hits(key) == 3
    assert len(mediator_clock.sleeps) == 2


@retryable
class CheckStock(Command[int]):
    pass


class CheckStockHandler(CommandHandler[CheckStock, int]):
    attempts: ClassVar[int] = 0

    async def handle(self, request: CheckStock) -> int:
        CheckStockHandler.attempts += 1
        raise ConnectionError("the stock service is down")


async def test_the_mediator_retry_keeps_the_deadline_of_the_work_in_hand() -> None:
    # The one line of wiring: remaining_time=http_resilience.remaining_time.
    clock = MediatorClock()
    sender = Injector(
        [
            MediatorModule(lambda m: m.add_handler(CheckStockHandler).use_defaults()),
            ResilienceMediatorModule(
                ResilienceMediatorOptions(use_jitter=False),
                clock=clock,
                remaining_time=remaining_time,
            ),
        ]
    ).get(Mediator)
    CheckStockHandler.attempts = 0
    with deadline_scope(0.5, clock=clock), pytest.raises(ConnectionError):
        await sender.send(CheckStock())
    # Waits of 0.2 s, then 0.4 s: only the first fits in the half second.
    assert (CheckStockHandler.attempts, clock.sleeps) == (2, [0.2])
    CheckStockHandler.attempts = 0
    with pytest.raises(ConnectionError):
        await sender.send(CheckStock())  # no scope: the attempts alone bound it
    assert CheckStockHandler.attempts == 4
