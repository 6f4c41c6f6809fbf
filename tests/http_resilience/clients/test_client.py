"""`create_async_client` / `create_client`, and one resilience layer per client."""

from __future__ import annotations

from datetime import timedelta

import httpx
import pytest

from http_resilience import (
    AsyncResilientTransport,
    HttpEvent,
    HttpResilienceOptions,
    ResilienceLayerError,
    ResilientTransport,
    create_async_client,
    create_client,
)
from http_resilience.testing import EventRecorder, FakeClock
from tests.http_resilience._support.scripted import script

pytestmark = pytest.mark.anyio

QUICK = HttpResilienceOptions(base_delay=timedelta(0))


async def test_an_async_client_retries_through_its_transport() -> None:
    server, events = script(503, 200), EventRecorder[HttpEvent]()
    async with create_async_client(
        "inventory",
        QUICK,
        clock=FakeClock(),
        listeners=[events],
        base_url="http://inventory.local",
        transport=httpx.MockTransport(server),
    ) as client:
        response = await client.get("/items")
    assert (response.status_code, server.hits) == (200, 2)
    assert {event.client for event in events.events} == {"inventory"}


def test_a_sync_client_retries_through_its_transport() -> None:
    server = script(503, 200)
    with create_client(
        "inventory", QUICK, clock=FakeClock(), transport=httpx.MockTransport(server)
    ) as client:
        assert client.get("http://inventory.local/items").status_code == 200
    assert server.hits == 2


async def test_an_async_client_reads_its_options_from_configuration() -> None:
    server = script(503)
    config = {
        "resilience": {"http": {"clients": {"inventory": {"max_retry_attempts": 1}}}}
    }
    async with create_async_client(
        "inventory",
        config=config,
        clock=FakeClock(),
        transport=httpx.MockTransport(server),
    ) as client:
        await client.get("http://inventory.local/")
    assert server.hits == 2


def test_a_sync_client_builds_its_own_transport_from_the_httpx_arguments() -> None:
    with create_client(
        "inventory", verify=False, http1=True, limits=httpx.Limits(max_connections=3)
    ) as client:
        assert client.base_url == httpx.URL("")
    with create_client("inventory", proxy="http://proxy.local:3128") as client:
        # The proxy is the inner transport's, not a mount around the pipeline.
        assert client._mounts == {}  # pyright: ignore[reportPrivateUsage]


async def test_an_async_client_builds_its_own_transport_too() -> None:
    async with create_async_client(
        "inventory", trust_env=False, proxy="http://proxy.local:3128"
    ) as client:
        assert client._mounts == {}  # pyright: ignore[reportPrivateUsage]
        assert client.trust_env is False


async def test_mounted_transports_get_a_pipeline_of_their_own() -> None:
    main, mounted = script(200), script(503, 200)
    async with create_async_client(
        "inventory",
        QUICK,
        clock=FakeClock(),
        transport=httpx.MockTransport(main),
        mounts={
            "http://legacy.local": httpx.MockTransport(mounted),
            "http://blocked.local": None,
        },
    ) as client:
        assert (await client.get("http://legacy.local/")).status_code == 200
        assert (await client.get("http://inventory.local/")).status_code == 200
    assert (main.hits, mounted.hits) == (1, 2)


def test_sync_mounts_are_wrapped_as_well() -> None:
    mounted = script(503, 200)
    with create_client(
        "inventory",
        QUICK,
        clock=FakeClock(),
        mounts={"http://legacy.local": httpx.MockTransport(mounted)},
    ) as client:
        assert client.get("http://legacy.local/").status_code == 200
    assert mounted.hits == 2


# --- one layer ----------------------------------------------------------------------


def test_a_resilient_transport_given_to_create_async_client_is_refused() -> None:
    with pytest.raises(ResilienceLayerError) as raised:
        create_async_client("billing", transport=AsyncResilientTransport(name="inner"))
    assert str(raised.value) == (
        "HTTP client 'billing': the transport is already resilient (client "
        "'inner'); one resilience layer per client, or retries multiply"
    )


def test_a_resilient_transport_given_to_create_client_is_refused() -> None:
    with pytest.raises(ResilienceLayerError, match="HTTP client 'billing'"):
        create_client("billing", transport=ResilientTransport())


def test_a_resilient_mount_is_refused() -> None:
    with pytest.raises(ResilienceLayerError):
        create_client("billing", mounts={"http://x": ResilientTransport()})


@pytest.mark.parametrize(
    "build",
    [
        lambda: AsyncResilientTransport(AsyncResilientTransport()),
        lambda: ResilientTransport(ResilientTransport()),
        lambda: ResilientTransport(AsyncResilientTransport()),  # type: ignore[arg-type]
        lambda: AsyncResilientTransport(ResilientTransport()),  # type: ignore[arg-type]
    ],
)
def test_wrapping_a_resilient_transport_is_refused(build: object) -> None:
    with pytest.raises(ResilienceLayerError, match="already resilient"):
        build()  # type: ignore[operator]


class Passing(httpx.AsyncBaseTransport):
    """A user's own wrapper: it hides what it wraps."""

    def __init__(self, inner: httpx.AsyncBaseTransport) -> None:
        self.inner = inner

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        return await self.inner.handle_async_request(request)


async def test_a_second_layer_hidden_behind_a_wrapper_is_refused_on_the_request() -> (
    None
):
    server = script(503)
    inner = AsyncResilientTransport(
        httpx.MockTransport(server), name="inner", clock=FakeClock()
    )
    outer = AsyncResilientTransport(Passing(inner), name="outer", clock=FakeClock())
    with pytest.raises(ResilienceLayerError) as raised:
        await outer.handle_async_request(httpx.Request("GET", "http://x/"))
    assert "HTTP client 'inner'" in str(raised.value)
    assert server.hits == 0


def test_a_transport_of_the_wrong_kind_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="wraps an async transport, got HTTPTransport"):
        AsyncResilientTransport(httpx.HTTPTransport())  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="wraps a sync transport, got AsyncHTTPT"):
        ResilientTransport(httpx.AsyncHTTPTransport())  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="an async client needs async transports"):
        create_async_client(transport=httpx.HTTPTransport())
    with pytest.raises(TypeError, match="a sync client needs sync transports"):
        create_client(transport=httpx.AsyncHTTPTransport())


def test_a_proxy_beside_a_given_transport_is_refused() -> None:
    # httpx would mount a proxy transport for it: requests would bypass the
    # pipeline.
    with pytest.raises(TypeError, match="proxy= goes to the transport you pass"):
        create_client(transport=httpx.HTTPTransport(), proxy="http://proxy.local:1")
    with pytest.raises(TypeError, match="proxy= goes to the transport you pass"):
        create_async_client(
            transport=httpx.AsyncHTTPTransport(), proxy="http://proxy.local:1"
        )


async def test_closing_the_transport_closes_what_it_wraps() -> None:
    class Closing(httpx.AsyncBaseTransport, httpx.BaseTransport):
        closed = 0

        async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
            return httpx.Response(200)

        def handle_request(self, request: httpx.Request) -> httpx.Response:
            return httpx.Response(200)

        async def aclose(self) -> None:
            self.closed += 1

        def close(self) -> None:
            self.closed += 1

    inner = Closing()
    async with AsyncResilientTransport(inner):
        pass
    with ResilientTransport(inner):
        pass
    assert inner.closed == 2


def test_the_transports_say_which_client_they_serve() -> None:
    assert repr(AsyncResilientTransport(name="billing")) == (
        "AsyncResilientTransport(name='billing')"
    )
    assert repr(ResilientTransport()) == "ResilientTransport(name='default')"
