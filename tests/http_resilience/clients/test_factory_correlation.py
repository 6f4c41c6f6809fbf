"""A factory given a source of correlation ids: its id first, the own rule after."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from injector import Injector

from http_resilience import HttpClientFactory, ResiliencePipeline, correlation_id
from http_resilience.injector import HttpClientsModule
from http_resilience.testing import FakeClock

pytestmark = pytest.mark.anyio

HEADER = "X-Correlation-ID"
RETRY_TWICE = ResiliencePipeline().add_retry(max_retry_attempts=2, base_delay=0)


class Recorder:
    """A `MockTransport` handler: 503 twice, then 200; records each id sent."""

    def __init__(self) -> None:
        self.ids: list[str | None] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.ids.append(request.headers.get(HEADER))
        return httpx.Response(503 if len(self.ids) % 3 else 200)


class Source:
    """A correlation source that answers from a script and counts its calls."""

    def __init__(self, *answers: Any) -> None:
        self.answers: list[Any] = list(answers)
        self.calls = 0

    def __call__(self) -> str | None:
        self.calls += 1
        given: str | None = self.answers.pop(0)
        return given


def factory_with(
    source: Callable[[], str | None] | None, recorder: Recorder
) -> HttpClientFactory:
    return HttpClientFactory(clock=FakeClock(), correlation=source).add(
        "orders",
        pipeline=RETRY_TWICE,
        base_url="http://orders.local",
        transport=httpx.MockTransport(recorder),
    )


async def test_the_sources_id_is_on_every_attempt_and_asked_once_per_call() -> None:
    recorder, source = Recorder(), Source("req-7", "req-8")
    async with factory_with(source, recorder) as factory:
        client = factory.async_client("orders")
        assert (await client.get("/a")).status_code == 200
        assert (await client.get("/b")).status_code == 200
    assert recorder.ids == ["req-7"] * 3 + ["req-8"] * 3
    assert source.calls == 2


def test_a_sync_client_takes_the_sources_id_too() -> None:
    recorder = Recorder()
    with factory_with(lambda: "sync-7", recorder) as factory:
        assert factory.client("orders").get("/a").status_code == 200
    assert recorder.ids == ["sync-7"] * 3


async def test_the_source_wins_over_the_packages_own_block() -> None:
    recorder = Recorder()
    async with factory_with(lambda: "from-source", recorder) as factory:
        with correlation_id("from-block"):
            await factory.async_client("orders").get("/a")
    assert set(recorder.ids) == {"from-source"}


@pytest.mark.parametrize(
    "given",
    [None, "", "has space", "x" * 201, "caf\u00e9", "line\nbreak", 42],
    ids=["none", "empty", "space", "too-long", "non-ascii", "newline", "not-a-str"],
)
async def test_no_valid_id_from_the_source_falls_back_to_the_block(
    given: object,
) -> None:
    recorder = Recorder()
    async with factory_with(Source(given), recorder) as factory:
        with correlation_id("from-block"):
            await factory.async_client("orders").get("/a")
    assert recorder.ids == ["from-block"] * 3


async def test_no_valid_id_and_no_block_makes_one_new_id_per_call() -> None:
    recorder = Recorder()
    async with factory_with(Source(None, "bad id"), recorder) as factory:
        await factory.async_client("orders").get("/a")
        await factory.async_client("orders").get("/b")
    first, second = recorder.ids[0], recorder.ids[3]
    assert first is not None
    assert second is not None
    assert recorder.ids == [first] * 3 + [second] * 3
    assert first != second
    assert uuid.UUID(first).version == 8


async def test_a_header_the_request_carries_is_left_alone() -> None:
    recorder, source = Recorder(), Source("req-7")
    async with factory_with(source, recorder) as factory:
        await factory.async_client("orders").get("/a", headers={HEADER: "mine"})
    assert recorder.ids == ["mine"] * 3
    assert source.calls == 0


async def test_without_a_header_the_source_is_never_asked() -> None:
    source = Source()
    factory = HttpClientFactory(correlation=source, correlation_header=None).add(
        "orders", transport=httpx.MockTransport(lambda request: httpx.Response(200))
    )
    async with factory:
        response = await factory.async_client("orders").get("http://orders.local/")
    assert HEADER not in response.request.headers
    assert source.calls == 0


async def test_an_error_the_source_raises_fails_the_call() -> None:
    def broken() -> str | None:
        raise LookupError("no context")

    async with factory_with(broken, Recorder()) as factory:
        with pytest.raises(LookupError, match="no context"):
            await factory.async_client("orders").get("/a")


@pytest.mark.parametrize("bad", ["req-7", 42])
def test_a_source_that_is_not_callable_is_refused_naming_the_argument(
    bad: object,
) -> None:
    with pytest.raises(TypeError, match=r"^correlation must be a callable"):
        HttpClientFactory(correlation=bad)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"^correlation must be a callable"):
        HttpClientsModule(correlation=bad)  # type: ignore[arg-type]


async def test_the_injector_module_passes_the_source_to_its_factory() -> None:
    recorder = Recorder()
    module = HttpClientsModule(
        lambda clients: clients.add(
            "orders",
            pipeline=RETRY_TWICE,
            base_url="http://orders.local",
            transport=httpx.MockTransport(recorder),
        ),
        clock=FakeClock(),
        correlation=lambda: "from-module",
    )
    factory = Injector([module]).get(HttpClientFactory)
    async with factory:
        await factory.async_client("orders").get("/a")
    assert recorder.ids == ["from-module"] * 3
