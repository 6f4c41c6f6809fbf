"""The chaos server's seeded plan, and each fate through the fault proxy's `Mix`."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from email.utils import parsedate_to_datetime

import anyio.to_thread
import httpx
import pytest

from tests.support.chaos_server import (
    FATES,
    INVALID_RETRY_AFTER,
    STANDARD_MIX,
    VALID_RETRY_AFTER,
    ChaosPlan,
    ChaosServer,
    Fate,
    serve_chaos,
)
from tests.support.fault_proxy import FaultProxy, MakeProxy, Mix, PassThrough

pytestmark = pytest.mark.anyio

SECRET = "planted-3f9a"
# A short client timeout for the fates that never answer (or answer late), and a
# generous one for every answer that comes: a busy machine may take a second.
SHORT = httpx.Timeout(5.0, read=0.3)
GENEROUS = httpx.Timeout(30.0)


@pytest.fixture(scope="module")
def server() -> Iterator[ChaosServer]:
    plan = ChaosPlan(seed=11, latency=1.5, slow_close=(0.2, 0.2), secret=SECRET)
    with serve_chaos(plan) as running:
        yield running


@pytest.fixture
def proxy(fault_proxy: MakeProxy, server: ChaosServer) -> FaultProxy:
    proxy = fault_proxy(server.url)
    proxy.set_fault(Mix())
    return proxy


class Calls:
    """Call ids no other test of the module uses (the server is shared)."""

    def __init__(self) -> None:
        self.next = 0

    def __call__(self) -> int:
        self.next += 1
        return self.next


_CALLS = Calls()


def fated(fate: Fate) -> tuple[int, str]:
    call = _CALLS() + 1000
    return call, f"/chaos?call={call}&fate={fate}"


# --- the plan -----------------------------------------------------------------


def test_the_same_seed_decides_the_same_and_another_seed_differently() -> None:
    plan, same, other = ChaosPlan(seed=3), ChaosPlan(seed=3), ChaosPlan(seed=4)
    keys = [(call, hit) for call in range(200) for hit in (1, 2, 3)]
    decided = [plan.decide(call, hit) for call, hit in keys]
    assert decided == [same.decide(call, hit) for call, hit in keys]
    assert decided != [other.decide(call, hit) for call, hit in keys]


def test_the_fates_come_in_the_proportions_of_the_mix() -> None:
    plan = ChaosPlan(seed=5)
    draws = 20_000
    counts = Counter(plan.decide(call, 1).fate for call in range(draws))
    assert set(counts) == set(FATES)
    for fate, percent in STANDARD_MIX.items():
        assert abs(counts[fate] / draws * 100 - percent) < 1.2, fate


def test_retry_after_values_come_from_their_sets() -> None:
    plan = ChaosPlan(seed=6, mix={"503-retry-after": 1, "503-bad-retry-after": 1})
    seen: dict[Fate, set[str | None]] = {}
    for call in range(400):
        decision = plan.decide(call, 1)
        seen.setdefault(decision.fate, set()).add(decision.retry_after)
    assert seen["503-retry-after"] == set(VALID_RETRY_AFTER)
    assert seen["503-bad-retry-after"] == set(INVALID_RETRY_AFTER)
    assert plan.decide(1, 1, fate="cut").fate == "cut"
    delays = {plan.decide(call, 1, fate="slow-close").close_delay for call in range(50)}
    assert len(delays) == 50
    assert all(delay is not None and 0.05 <= delay <= 0.2 for delay in delays)


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"mix": {"nope": 1}}, "unknown fates"),
        ({"mix": {"ok": -1}}, "weights must be finite"),
        ({"mix": {"ok": 0}}, "weights must be finite"),
        ({"latency": float("inf")}, "ChaosPlan.latency must be finite"),
        ({"slow_close": (-0.1, 0.1)}, "ChaosPlan.slow_close must be a range"),
        ({"slow_close": (0.2, 0.1)}, "ChaosPlan.slow_close must be a range"),
    ],
)
def test_a_plan_checks_its_arguments(values: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ChaosPlan(seed=1, **values)  # type: ignore[arg-type]


def test_mix_checks_its_header_name() -> None:
    with pytest.raises(ValueError, match=r"Mix\.header must be a lowercase header"):
        Mix("X-Chaos")
    with pytest.raises(ValueError, match=r"Mix\.header must be"):
        Mix("x chaos")


# --- the fates through the proxy ----------------------------------------------------


async def test_an_ok_answer_passes_and_is_counted(
    server: ChaosServer, proxy: FaultProxy
) -> None:
    call, path = fated("ok")
    async with httpx.AsyncClient(base_url=proxy.url, timeout=GENEROUS) as client:
        response = await client.post(path, json={}, headers={"Idempotency-Key": "k-1"})
    assert response.status_code == 200
    assert response.json() == {"call": call, "hit": 1}
    assert "x-chaos" not in response.headers
    (hit,) = server.hits()[call]
    assert (hit.number, hit.fate, hit.method, hit.keyed) == (1, "ok", "POST", True)


async def test_503_carries_a_valid_or_an_invalid_retry_after_and_the_secret(
    server: ChaosServer, proxy: FaultProxy
) -> None:
    async with httpx.AsyncClient(base_url=proxy.url, timeout=GENEROUS) as client:
        valid, invalid = set[str](), set[str]()
        for _ in range(30):
            response = await client.get(fated("503-retry-after")[1])
            assert response.status_code == 503
            value = response.headers["retry-after"]
            if value not in VALID_RETRY_AFTER:
                asked = parsedate_to_datetime(value)
                sent = parsedate_to_datetime(response.headers["date"])
                assert (asked - sent).total_seconds() == 1
                value = "date"
            valid.add(value)
            response = await client.get(fated("503-bad-retry-after")[1])
            assert response.status_code == 503
            invalid.add(response.headers["retry-after"])
            assert SECRET in response.text
        response = await client.get(fated("429")[1])
    assert valid == set(VALID_RETRY_AFTER)
    assert invalid <= set(INVALID_RETRY_AFTER)
    assert len(invalid) >= 3
    assert (response.status_code, "retry-after" in response.headers) == (429, False)


async def test_latency_holds_the_answer_and_sees_the_client_leave(
    server: ChaosServer, proxy: FaultProxy
) -> None:
    call, path = fated("latency")
    aborted = server.aborted()["latency"]
    async with httpx.AsyncClient(base_url=proxy.url, timeout=SHORT) as client:
        with pytest.raises(httpx.ReadTimeout):
            await client.get(path)
    await server.wait_idle()
    assert server.aborted()["latency"] == aborted + 1
    async with httpx.AsyncClient(base_url=proxy.url, timeout=GENEROUS) as client:
        started = time.perf_counter()
        response = await client.get(path)
        elapsed = time.perf_counter() - started
    assert response.json() == {"call": call, "hit": 2}
    assert elapsed >= 1.45


async def test_reset_resets_the_client_after_the_server_answered(
    server: ChaosServer, proxy: FaultProxy
) -> None:
    call, path = fated("reset")
    async with httpx.AsyncClient(base_url=proxy.url, timeout=GENEROUS) as client:
        with pytest.raises((httpx.ReadError, httpx.RemoteProtocolError)):
            await client.get(path)
    assert [hit.fate for hit in server.hits()[call]] == ["reset"]


async def test_blackhole_swallows_the_answer_the_server_gave(
    server: ChaosServer, proxy: FaultProxy
) -> None:
    call, path = fated("blackhole")
    aborted = server.aborted()["blackhole"]
    async with httpx.AsyncClient(base_url=proxy.url, timeout=SHORT) as client:
        with pytest.raises(httpx.ReadTimeout):
            await client.get(path)
    await server.wait_idle()
    assert len(server.hits()[call]) == 1
    assert server.aborted()["blackhole"] == aborted  # answered, then swallowed
    await anyio.to_thread.run_sync(proxy.wait_idle)


async def test_cut_delivers_half_an_answer_then_closes(
    server: ChaosServer, proxy: FaultProxy
) -> None:
    async with httpx.AsyncClient(base_url=proxy.url, timeout=GENEROUS) as client:
        with pytest.raises(
            httpx.RemoteProtocolError, match="without sending complete message body"
        ):
            await client.get(fated("cut")[1])


async def test_slow_close_frames_the_answer_by_a_late_close(
    server: ChaosServer, proxy: FaultProxy
) -> None:
    call, path = fated("slow-close")
    async with httpx.AsyncClient(base_url=proxy.url, timeout=GENEROUS) as client:
        started = time.perf_counter()
        response = await client.get(path)
        elapsed = time.perf_counter() - started
    assert response.json() == {"call": call, "hit": 1}
    assert "content-length" not in response.headers
    assert response.headers["connection"] == "close"
    assert elapsed >= 0.18


async def test_one_connection_carries_passing_answers_until_one_is_cut(
    server: ChaosServer, proxy: FaultProxy
) -> None:
    async with httpx.AsyncClient(base_url=proxy.url, timeout=GENEROUS) as client:
        for fate in ("ok", "503-bad-retry-after", "429", "ok"):
            response = await client.get(fated(fate)[1])
            assert response.status_code in (200, 503, 429)
        assert proxy.stats().accepted == 1
        with pytest.raises(httpx.RemoteProtocolError):
            await client.get(fated("cut")[1])
        assert (await client.get(fated("ok")[1])).status_code == 200
    assert proxy.stats().accepted == 2


async def test_without_mix_the_marks_pass_through_untouched(
    server: ChaosServer, proxy: FaultProxy
) -> None:
    async with httpx.AsyncClient(base_url=proxy.url, timeout=GENEROUS) as client:
        assert (await client.get(fated("ok")[1])).status_code == 200
        proxy.set_fault(PassThrough())
        response = await client.get(fated("cut")[1])
        assert (response.status_code, response.headers["x-chaos"]) == (200, "cut")
        proxy.set_fault(Mix())
        with pytest.raises(httpx.RemoteProtocolError):
            await client.get(fated("cut")[1])


async def test_a_route_it_does_not_know_is_404_and_not_counted(
    server: ChaosServer, proxy: FaultProxy
) -> None:
    before = server.hits()
    async with httpx.AsyncClient(base_url=proxy.url, timeout=GENEROUS) as client:
        for path in (
            "/other?call=1",
            "/chaos",
            "/chaos?call=x",
            "/chaos?call=1&fate=x",
        ):
            assert (await client.get(path)).status_code == 404
    assert server.hits() == before


async def test_an_outage_meets_every_request_with_its_fate_then_the_plan_again(
    server: ChaosServer,
) -> None:
    async with httpx.AsyncClient(base_url=server.url, timeout=GENEROUS) as client:
        with server.outage() as down:
            assert down.ended is None
            during = [fated("ok") for _ in range(5)]
            statuses = [(await client.get(path)).status_code for _, path in during]
        assert down.ended is not None
        assert down.began < down.ended
        after, path = fated("ok")
        assert (await client.get(path)).status_code == 200
    assert statuses == [503] * 5
    hits = server.hits()
    for call, _ in during:
        (hit,) = hits[call]
        assert hit.fate == "503-retry-after"
        assert down.began <= hit.received <= down.ended
    assert [hit.fate for hit in hits[after]] == ["ok"]
