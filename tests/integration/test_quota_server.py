"""Published quota against a real server: uvicorn on 127.0.0.1, real httpx.

The fault server's ``/quota`` and ``/legacy-quota`` routes publish a quota of
`LIMIT` a window on every answer. With the default reserve (a tenth), the
client stops itself once two are left: the server never sees the rest, and
never has to answer 429.
"""

from __future__ import annotations

import uuid

import pytest

from http_resilience import (
    HttpResilienceOptions,
    RateLimitedError,
    RejectionEvent,
    create_async_client,
    create_client,
)
from http_resilience.testing import FakeClock
from tests.support.fault_server import FaultServer

pytestmark = pytest.mark.anyio

LIMIT = 20
RESET = 30
# Refused once remaining <= 0.1 x 20: after the 18th answer (2 left).
SENT = 18


@pytest.mark.parametrize("route", ["quota", "legacy-quota"])
def test_the_client_stops_within_the_reserve_and_the_server_sees_no_more(
    fault_server: FaultServer, route: str
) -> None:
    key = f"{route}-{uuid.uuid4().hex}"
    url = f"{fault_server.url}/{route}/{LIMIT}/{RESET}?key={key}"
    refused: list[RejectionEvent] = []
    # No retries: a retry would wait out the 30 s reset, then find its deadline
    # gone (the next test waits for a reset, on a fake clock).
    with create_client(
        "partner",
        HttpResilienceOptions(max_retry_attempts=0),
        listeners=[
            lambda e: refused.append(e) if isinstance(e, RejectionEvent) else None
        ],
    ) as client:
        for _ in range(SENT):
            assert client.get(url).status_code == 200
        for _ in range(5):
            with pytest.raises(RateLimitedError) as error:
                client.get(url)
            assert error.value.reason == "quota"
            assert error.value.retry_after is not None
            assert 0 < error.value.retry_after <= RESET
    fault_server.wait_idle_sync(key)
    assert fault_server.hits(key) == SENT
    assert [event.reason for event in refused] == ["quota"] * 5


async def test_a_retry_waits_for_the_reset_on_its_clock_and_then_sends(
    fault_server: FaultServer,
) -> None:
    key = f"reset-{uuid.uuid4().hex}"
    url = f"{fault_server.url}/quota/{LIMIT}/{RESET}?key={key}"
    clock = FakeClock()
    options = HttpResilienceOptions(
        total_request_timeout=120, sampling_duration=240, attempt_timeout=10
    )
    async with create_async_client("partner", options, clock=clock) as client:
        for _ in range(SENT):
            assert (await client.get(url)).status_code == 200
        # Refused, then waited 30 s on the fake clock, then sent: the server,
        # whose quota never resets, answers the 19th with 200 (1 left).
        response = await client.get(url)
    assert response.status_code == 200
    assert clock.sleeps == [float(RESET)]
    await fault_server.wait_idle(key)
    assert fault_server.hits(key) == SENT + 1
