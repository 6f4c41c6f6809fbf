"""The fault server's routes, driven with plain httpx over loopback."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import ExitStack
from datetime import UTC, datetime
from email.utils import format_datetime

import anyio
import anyio.to_thread
import httpx
import pytest

from tests.support.fault_server import FaultServer, free_port, serve_faults

pytestmark = pytest.mark.anyio

METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")


@pytest.fixture
def key() -> str:
    return uuid.uuid4().hex


@pytest.fixture
async def client(fault_server: FaultServer) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=fault_server.url) as client:
        yield client


async def test_healthy_answers_200_with_its_hit_number(
    fault_server: FaultServer, client: httpx.AsyncClient, key: str
) -> None:
    first = await client.get("/healthy", params={"key": key})
    second = await client.post("/healthy", params={"key": key}, content=b"x" * 100)
    assert (first.status_code, second.status_code) == (200, 200)
    assert first.json() == {"key": key, "hit": 1, "status": 200}
    assert second.headers["x-fault-hit"] == "2"
    assert first.headers["content-type"] == "application/json"
    assert fault_server.hits(key) == 2
    assert fault_server.aborted(key) == 0


@pytest.mark.parametrize("code", [500, 503, 429, 408, 404, 200])
async def test_status_always_answers_its_code_to_every_method(
    fault_server: FaultServer, client: httpx.AsyncClient, key: str, code: int
) -> None:
    for method in METHODS:
        response = await client.request(method, f"/status/{code}?key={key}")
        assert response.status_code == code, method
        if method == "HEAD":
            assert response.content == b""
        else:
            assert response.json() == {
                "key": key,
                "hit": 1 + METHODS.index(method),
                "status": code,
            }
    assert fault_server.hits(key) == len(METHODS)


async def test_a_bodiless_status_has_no_body(client: httpx.AsyncClient) -> None:
    for code in (204, 304):
        response = await client.get(f"/status/{code}")
        assert response.status_code == code
        assert response.content == b""


async def test_keys_count_apart_and_the_path_is_the_default_key(
    fault_server: FaultServer, client: httpx.AsyncClient, key: str
) -> None:
    other = key + "-other"
    await client.get("/status/500", params={"key": key})
    await client.get("/status/500", params={"key": other})
    await client.get("/status/500", params={"key": other})
    assert (fault_server.hits(key), fault_server.hits(other)) == (1, 2)
    path = "/status/502"
    before = fault_server.hits(path)
    await client.get(path)
    assert fault_server.hits(path) == before + 1


async def test_flaky_fails_its_first_hits_then_answers_200(
    fault_server: FaultServer, client: httpx.AsyncClient, key: str
) -> None:
    codes = [
        (await client.post(f"/flaky/2/503?key={key}", json={"n": n})).status_code
        for n in range(4)
    ]
    assert codes == [503, 503, 200, 200]
    assert fault_server.hits(key) == 4


async def test_flaky_with_no_failures_answers_200_at_once(
    client: httpx.AsyncClient, key: str
) -> None:
    response = await client.get(f"/flaky/0/500?key={key}")
    assert response.status_code == 200


async def test_retry_after_is_sent_on_the_first_hit_only(
    fault_server: FaultServer, client: httpx.AsyncClient, key: str
) -> None:
    first = await client.get(f"/retry-after/429/2?key={key}")
    second = await client.get(f"/retry-after/429/2?key={key}")
    assert (first.status_code, first.headers["retry-after"]) == (429, "2")
    assert second.status_code == 200
    assert "retry-after" not in second.headers
    assert fault_server.hits(key) == 2


async def test_retry_after_carries_an_http_date(
    client: httpx.AsyncClient, key: str
) -> None:
    date = format_datetime(datetime(2015, 10, 21, 7, 28, tzinfo=UTC), usegmt=True)
    response = await client.get(f"/retry-after/503/{date}", params={"key": key})
    assert response.status_code == 503
    assert response.headers["retry-after"] == "Wed, 21 Oct 2015 07:28:00 GMT"


@pytest.mark.parametrize(
    "value", ["-1", "+5", "1.5", "nan", "\u0661\u0662", "9" * 5000]
)
async def test_retry_after_carries_malformed_values_as_they_are(
    client: httpx.AsyncClient, key: str, value: str
) -> None:
    response = await client.get(f"/retry-after/503/{value}", params={"key": key})
    assert response.status_code == 503
    assert response.headers.get_list("retry-after") == [value]


async def test_sleep_answers_after_its_delay(
    fault_server: FaultServer, client: httpx.AsyncClient, key: str
) -> None:
    started = time.perf_counter()
    response = await client.get(f"/sleep/0.2?key={key}")
    assert response.status_code == 200
    assert time.perf_counter() - started >= 0.2
    assert fault_server.aborted(key) == 0


async def test_a_client_that_times_out_is_counted_as_aborted(
    fault_server: FaultServer, client: httpx.AsyncClient, key: str
) -> None:
    started = time.perf_counter()
    with pytest.raises(httpx.ReadTimeout):
        await client.get(f"/sleep/30?key={key}", timeout=0.2)
    await fault_server.wait_idle(key)
    assert time.perf_counter() - started < 5
    assert (fault_server.hits(key), fault_server.aborted(key)) == (1, 1)


async def test_a_cancelled_request_is_counted_as_aborted(
    fault_server: FaultServer, client: httpx.AsyncClient, key: str
) -> None:
    with anyio.move_on_after(0.2) as scope:
        await client.get(f"/sleep/30?key={key}")
    assert scope.cancelled_caught
    await fault_server.wait_idle(key)
    assert fault_server.aborted(key) == 1


async def test_max_in_flight_counts_concurrent_requests(
    fault_server: FaultServer, client: httpx.AsyncClient, key: str
) -> None:
    statuses: list[int] = []

    async def call() -> None:
        statuses.append((await client.get(f"/sleep/0.5?key={key}")).status_code)

    async with anyio.create_task_group() as group:
        for _ in range(5):
            group.start_soon(call)
    assert statuses == [200] * 5
    assert fault_server.max_in_flight(key) == 5
    await client.get(f"/sleep/0?key={key}")
    assert fault_server.max_in_flight(key) == 5


async def test_hedge_sleeps_on_the_first_hit_and_answers_later_ones_at_once(
    fault_server: FaultServer, client: httpx.AsyncClient, key: str
) -> None:
    answered: list[int] = []
    started = time.perf_counter()

    async with anyio.create_task_group() as group:

        async def call() -> None:
            response = await client.get(f"/hedge/30?key={key}")
            answered.append(response.json()["hit"])
            group.cancel_scope.cancel()

        group.start_soon(call)
        group.start_soon(call)
    await fault_server.wait_idle(key)
    assert answered == [2]
    assert time.perf_counter() - started < 5
    assert (fault_server.hits(key), fault_server.aborted(key)) == (2, 1)
    third = await client.get(f"/hedge/30?key={key}")
    assert third.json()["hit"] == 3


async def test_routes_that_do_not_parse_answer_404_and_count_nothing(
    fault_server: FaultServer, client: httpx.AsyncClient
) -> None:
    paths = [
        "/",
        "/nowhere",
        "/healthy/extra",
        "/status/99",
        "/status/600",
        "/status/abc",
        "/status/5%C2%B2",
        "/flaky/x/503",
        "/flaky/-1/503",
        "/flaky/2",
        "/retry-after/503",
        "/retry-after/503/",
        "/retry-after/503/%205",
        "/retry-after/503/5%0D%0AX-Injected:%201",
        "/sleep/nan",
        "/sleep/-1",
        "/sleep/1e9",
        "/hedge/inf",
    ]
    for path in paths:
        response = await client.get(path)
        assert response.status_code == 404, path
        assert response.text == f"fault server: no route {response.url.path}"
        assert fault_server.hits(response.url.path) == 0


async def test_reset_forgets_every_count(
    fault_server: FaultServer, client: httpx.AsyncClient, key: str
) -> None:
    await client.get(f"/status/503?key={key}")
    fault_server.reset()
    assert fault_server.hits(key) == 0
    assert fault_server.max_in_flight(key) == 0
    # A flaky key starts over after a reset.
    await client.get(f"/flaky/1/503?key={key}")
    assert (await client.get(f"/flaky/1/503?key={key}")).status_code == 200


async def test_the_refused_url_refuses_connections(
    fault_server: FaultServer, client: httpx.AsyncClient
) -> None:
    with pytest.raises(httpx.ConnectError):
        await client.get(f"{fault_server.refused_url}/healthy")
    with pytest.raises(httpx.ConnectError):
        await client.get(f"http://127.0.0.1:{free_port()}/healthy")


def test_a_sync_client_sees_the_same_routes(fault_server: FaultServer) -> None:
    key = uuid.uuid4().hex
    with httpx.Client(base_url=fault_server.url) as client:
        assert client.get(f"/flaky/1/500?key={key}").status_code == 500
        assert client.get(f"/flaky/1/500?key={key}").status_code == 200
        with pytest.raises(httpx.ReadTimeout):
            client.get(f"/sleep/30?key={key}-slow", timeout=0.2)
    fault_server.wait_idle_sync(f"{key}-slow")
    assert fault_server.aborted(f"{key}-slow") == 1


async def test_a_server_stops_within_bounds_with_a_request_in_flight() -> None:
    def running() -> int:
        return sum(thread.name == "fault-server" for thread in threading.enumerate())

    before = running()
    outcome: list[object] = []
    stopped = float("inf")
    with ExitStack() as stack:
        server = stack.enter_context(serve_faults(graceful_shutdown=0))
        counts = server.app.counts
        assert running() == before + 1

        def wait_for_the_request() -> None:
            with counts.changed:
                assert counts.changed.wait_for(lambda: counts.hits["/sleep/60"], 5)

        async def call() -> None:
            async with httpx.AsyncClient(base_url=server.url) as client:
                try:
                    outcome.append((await client.get("/sleep/60")).status_code)
                except httpx.TransportError as error:
                    outcome.append(type(error))

        async with anyio.create_task_group() as group:
            group.start_soon(call)
            await anyio.to_thread.run_sync(wait_for_the_request)
            started = time.perf_counter()
            # Stopping blocks, and the client must keep running meanwhile.
            await anyio.to_thread.run_sync(stack.close)
            stopped = time.perf_counter() - started
    assert running() == before
    assert stopped < 5
    assert counts.aborted["/sleep/60"] == 1
    # uvicorn answers a cancelled request with a 500, or drops the connection.
    assert outcome in ([500], [httpx.RemoteProtocolError], [httpx.ReadError])


async def test_answers_on_a_kept_alive_connection_are_not_held_back(
    client: httpx.AsyncClient, key: str
) -> None:
    # Without TCP_NODELAY on the server's sockets each of these takes ~40 ms
    # (Nagle against delayed ACK): 20 would take 0.8 s, against ~20 ms.
    started = time.perf_counter()
    for _ in range(20):
        await client.get(f"/healthy?key={key}")
    assert time.perf_counter() - started < 0.5
