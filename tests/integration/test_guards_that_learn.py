"""The standard pipeline's adaptive guards against a real fault server (uvicorn).

A host that answers in milliseconds and then hangs is cut at a few times its
own 95th percentile, not at the configured attempt timeout; `health` shows
what the breaker learned. Only the hang waits for real, and it is bounded by
the adaptive cap (at most a few tenths of a second), the test by its count.
"""

from __future__ import annotations

import uuid

import httpx
import pytest

from http_resilience import (
    AttemptTimeoutError,
    HttpResilienceOptions,
    create_async_client,
    create_client,
    health,
)
from tests.support.fault_server import FaultServer

pytestmark = pytest.mark.anyio

LEARNED = 20
"""Fast calls before the hang: the baseline arms on the last of them."""

OPTIONS = HttpResilienceOptions(
    baseline_min_samples=LEARNED,
    max_retry_attempts=0,
    attempt_timeout="20s",
    total_request_timeout="40s",
    sampling_duration="60s",
)


def _host(url: str) -> str:
    parsed = httpx.URL(url)
    return f"http://{parsed.host}:{parsed.port}"


async def test_a_hang_is_cut_at_the_hosts_own_p95_not_the_configured_timeout(
    fault_server: FaultServer,
) -> None:
    key = uuid.uuid4().hex
    async with create_async_client("catalog", OPTIONS) as client:
        before = health(client).hosts
        for _ in range(LEARNED):
            response = await client.get(f"{fault_server.url}/healthy?key={key}")
            assert response.status_code == 200
        learned = health(client).hosts[0].baseline
        assert learned is not None
        assert learned.armed
        assert learned.samples == LEARNED
        assert learned.error_rate == 0.0
        assert learned.failure_threshold == OPTIONS.failure_ratio
        assert learned.attempt_timeout is not None
        assert learned.attempt_timeout == max(3 * learned.p95, 1.0)
        assert learned.attempt_timeout < 20.0
        with pytest.raises(AttemptTimeoutError) as raised:
            await client.get(f"{fault_server.url}/sleep/30?key={key}-hang")
    assert before == ()
    # The attempt's span is the adaptive cap, named in the message.
    assert f"{learned.attempt_timeout:g} s" in str(raised.value)


def test_the_sync_client_learns_and_cuts_the_same_way(
    fault_server: FaultServer,
) -> None:
    key = uuid.uuid4().hex
    with create_client("catalog", OPTIONS) as client:
        for _ in range(LEARNED):
            assert (
                client.get(f"{fault_server.url}/healthy?key={key}").status_code == 200
            )
        (host,) = health(client).hosts
        assert host.host == _host(fault_server.url)
        learned = host.baseline
        assert learned is not None
        assert learned.armed
        assert learned.attempt_timeout is not None
        with pytest.raises(AttemptTimeoutError) as raised:
            client.get(f"{fault_server.url}/sleep/30?key={key}-hang")
    assert f"{learned.attempt_timeout:g} s" in str(raised.value)


def test_with_the_adaptive_rules_off_there_is_no_baseline(
    fault_server: FaultServer,
) -> None:
    off = OPTIONS.model_copy(
        update={
            "adaptive_timeout_factor": None,
            "breaker_baseline_factor": None,
            "slow_call_factor": None,
        }
    )
    with create_client("catalog", off) as client:
        assert client.get(f"{fault_server.url}/healthy").status_code == 200
        (host,) = health(client).hosts
    assert host.baseline is None
