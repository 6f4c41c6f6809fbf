"""Named clients through `http_resilience.injector`, and the correlation id."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import uuid
import warnings
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from injector import Injector
from pydantic import ValidationError

from http_resilience import (
    AsyncResilientTransport,
    HttpResilienceOptions,
    ResilienceLayerError,
)
from http_resilience._core.correlation import new_correlation_id
from http_resilience.injector import (
    HttpClientFactory,
    HttpClientsModule,
    correlation_id,
    current_correlation_id,
)
from http_resilience.testing import FakeClock

pytestmark = pytest.mark.anyio

HEADER = "X-Correlation-ID"


class Server:
    """A `MockTransport` handler: answers from a script, records every request."""

    def __init__(self, *statuses: int) -> None:
        self.statuses = statuses or (200,)
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        index = min(len(self.requests), len(self.statuses)) - 1
        return httpx.Response(self.statuses[index])

    @property
    def hits(self) -> int:
        return len(self.requests)

    def ids(self, header: str = HEADER) -> list[str | None]:
        return [request.headers.get(header) for request in self.requests]


def quick(**values: Any) -> HttpResilienceOptions:
    return HttpResilienceOptions.model_validate({"base_delay": 0, **values})


def factory_with(
    configure: Callable[[HttpClientFactory], object], **arguments: Any
) -> HttpClientFactory:
    module = HttpClientsModule(configure, clock=FakeClock(), **arguments)
    return Injector([module]).get(HttpClientFactory)


# --- named clients ------------------------------------------------------------------


async def test_two_named_clients_keep_their_own_options() -> None:
    inventory, payments = Server(503), Server(503)
    config = {
        "resilience": {
            "http": {
                "base_delay": 0,
                "clients": {"payments": {"max_retry_attempts": 0}},
            }
        }
    }
    factory = factory_with(
        lambda clients: clients.add(
            "inventory", transport=httpx.MockTransport(inventory)
        ).add("payments", transport=httpx.MockTransport(payments)),
        config=config,
    )
    async with factory:
        first = await factory.async_client("inventory").get("http://inventory.local/")
        second = await factory.async_client("payments").get("http://payments.local/")
    assert (first.status_code, second.status_code) == (503, 503)
    assert (inventory.hits, payments.hits) == (4, 1)


def test_options_given_to_add_win_over_the_configuration() -> None:
    server = Server(503)
    config = {"resilience": {"http": {"clients": {"stock": {"max_retry_attempts": 3}}}}}
    factory = factory_with(
        lambda clients: clients.add(
            "stock",
            quick(max_retry_attempts=1),
            transport=httpx.MockTransport(server),
        ),
        config=config,
    )
    with factory:
        assert factory.client("stock").get("http://stock.local/").status_code == 503
    assert server.hits == 2


async def test_the_same_name_gives_the_same_client() -> None:
    factory = factory_with(
        lambda clients: clients.add("a", transport=httpx.MockTransport(Server())).add(
            "b", transport=httpx.MockTransport(Server())
        )
    )
    async with factory:
        assert factory.async_client("a") is factory.async_client("a")
        assert factory.async_client("a") is not factory.async_client("b")
        assert factory.client("a") is factory.client("a")


def test_the_injector_hands_out_one_factory() -> None:
    injector = Injector([HttpClientsModule()])
    factory = injector.get(HttpClientFactory)
    assert injector.get(HttpClientFactory) is factory
    assert factory.names == ("default",)


def test_the_factory_knows_default_and_the_added_clients() -> None:
    # A configuration section configures a client; it does not add one.
    config: dict[str, Any] = {"resilience": {"http": {"clients": {"stock": {}}}}}
    factory = HttpClientFactory(config=config).add("orders").add("stock")
    assert factory.names == ("default", "orders", "stock")
    with pytest.raises(LookupError) as raised:
        factory.client("ordrs")
    assert str(raised.value) == (
        "no HTTP client named 'ordrs'; the factory knows 'default', 'orders', 'stock'"
    )


async def test_httpx_arguments_are_the_clients_own() -> None:
    server = Server()
    factory = factory_with(
        lambda clients: clients.add(
            "stock",
            base_url="http://stock.local/v2",
            headers={"Accept": "application/json"},
            transport=httpx.MockTransport(server),
        )
    )
    async with factory:
        await factory.async_client("stock").get("/items")
    (request,) = server.requests
    assert str(request.url) == "http://stock.local/v2/items"
    assert request.headers["Accept"] == "application/json"


async def test_without_a_transport_the_client_builds_its_own_from_httpx_arguments() -> (
    None
):
    factory = HttpClientFactory().add(
        "stock", verify=False, http2=False, proxy="http://proxy.local:3128"
    )
    async with factory:
        client = factory.async_client("stock")
        # The proxy belongs to the transport under the pipeline: no mount around it.
        assert client._mounts == {}  # pyright: ignore[reportPrivateUsage]
        assert factory.client("stock")._mounts == {}  # pyright: ignore[reportPrivateUsage]


async def test_mounted_transports_are_stamped_and_retried() -> None:
    main, legacy = Server(), Server(503, 200)
    factory = factory_with(
        lambda clients: clients.add(
            "stock",
            quick(),
            transport=httpx.MockTransport(main),
            mounts={
                "http://legacy.local": httpx.MockTransport(legacy),
                "http://blocked.local": None,
            },
        )
    )
    async with factory:
        response = await factory.async_client("stock").get("http://legacy.local/")
    assert (response.status_code, main.hits, legacy.hits) == (200, 0, 2)
    first, second = legacy.ids()
    assert first is not None
    assert first == second


# --- errors at registration ---------------------------------------------------------


def test_an_invalid_configured_field_names_the_client() -> None:
    config = {"resilience": {"http": {"clients": {"billing": {"base_delay": "soon"}}}}}
    with pytest.raises(ValidationError) as raised:
        HttpClientsModule(lambda clients: clients.add("billing"), config=config)
    assert raised.value.title == "HttpResilienceOptions of HTTP client 'billing'"
    assert "base_delay" in str(raised.value)
    assert "HTTP client 'billing'" in str(raised.value)


def test_an_invalid_pair_of_timeouts_names_the_client() -> None:
    config = {"resilience": {"http": {"clients": {"billing": {"attempt_timeout": 40}}}}}
    with pytest.raises(ValidationError) as raised:
        HttpClientsModule(lambda clients: clients.add("billing"), config=config)
    assert "attempt_timeout (40 s) must be less than" in str(raised.value)
    assert raised.value.title == "HttpResilienceOptions of HTTP client 'billing'"


def test_an_invalid_environment_override_names_the_client(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("RESILIENCE__HTTP__CLIENTS__LEDGER__MAX_RETRY_ATTEMPTS", "-1")
    HttpClientsModule()  # another client's override is not read
    with pytest.raises(ValidationError) as raised:
        HttpClientsModule(lambda clients: clients.add("ledger"))
    assert raised.value.title == (
        "HttpResilienceOptions of HTTP client 'ledger' (from environment variable "
        "RESILIENCE__HTTP__CLIENTS__LEDGER__MAX_RETRY_ATTEMPTS)"
    )
    assert "max_retry_attempts" in str(raised.value)


def test_options_of_the_wrong_type_are_refused() -> None:
    with pytest.raises(TypeError) as raised:
        HttpClientFactory().add("billing", {"max_retry_attempts": 0})  # type: ignore[arg-type]
    assert str(raised.value) == (
        "HTTP client 'billing': options must be HttpResilienceOptions or None, got dict"
    )


def test_a_resilient_transport_is_refused_when_added() -> None:
    with pytest.raises(ResilienceLayerError, match="HTTP client 'billing'"):
        HttpClientFactory().add("billing", transport=AsyncResilientTransport())
    with pytest.raises(ResilienceLayerError, match="already resilient"):
        HttpClientFactory().add(
            "billing", mounts={"http://x": AsyncResilientTransport()}
        )


def test_a_name_is_added_once_and_before_use() -> None:
    factory = HttpClientFactory().add("billing")
    with pytest.raises(ValueError, match="HTTP client 'billing' is added already"):
        factory.add("billing")
    with pytest.raises(ValueError, match="non-empty"):
        factory.add("")
    factory.client()
    with pytest.raises(
        RuntimeError, match="'default': the factory's clients are fixed"
    ):
        factory.add("default")
    factory.close()


def test_a_transport_of_the_wrong_kind_names_the_client() -> None:
    factory = (
        HttpClientFactory()
        .add("billing", transport=httpx.HTTPTransport())
        .add("ledger", transport=httpx.AsyncHTTPTransport())
    )
    with pytest.raises(TypeError) as raised:
        factory.async_client("billing")
    assert str(raised.value) == (
        "HTTP client 'billing': an async client needs async transports, "
        "got HTTPTransport"
    )
    with pytest.raises(TypeError, match="HTTP client 'ledger': a sync client"):
        factory.client("ledger")


def test_the_correlation_header_must_be_a_header_name() -> None:
    with pytest.raises(ValueError, match="must be an HTTP header name") as raised:
        HttpClientsModule(correlation_header="X Correlation")
    assert str(raised.value) == (
        "correlation_header must be an HTTP header name, got 'X Correlation'"
    )


# --- correlation ids ----------------------------------------------------------------


async def test_every_attempt_of_one_call_carries_the_same_new_id() -> None:
    server = Server(503, 503, 200, 503, 200)
    factory = factory_with(
        lambda clients: clients.add(
            "stock", quick(), transport=httpx.MockTransport(server)
        )
    )
    async with factory:
        client = factory.async_client("stock")
        assert (await client.get("http://stock.local/a")).status_code == 200
        assert (await client.get("http://stock.local/b")).status_code == 200
    first, second = server.ids()[:3], server.ids()[3:]
    assert len(set(first)) == len(set(second)) == 1
    assert first[0] != second[0]
    assert all(value is not None and len(value) == 36 for value in server.ids())


def test_the_sync_client_stamps_every_attempt_too() -> None:
    server = Server(503, 200)
    factory = factory_with(
        lambda clients: clients.add(
            "stock", quick(), transport=httpx.MockTransport(server)
        )
    )
    with factory:
        factory.client("stock").get("http://stock.local/")
        with correlation_id("sync-7"):
            factory.client("stock").get("http://stock.local/")
    first, second, third = server.ids()
    assert first == second
    assert first != "sync-7"
    assert third == "sync-7"


async def test_the_id_set_around_the_call_is_used() -> None:
    server = Server(503, 200)
    factory = factory_with(
        lambda clients: clients.add(
            "stock", quick(), transport=httpx.MockTransport(server)
        )
    )
    async with factory:
        with correlation_id("order-42") as chosen:
            assert chosen == current_correlation_id() == "order-42"
            await factory.async_client("stock").get("http://stock.local/")
    assert server.ids() == ["order-42", "order-42"]
    assert current_correlation_id() is None


@pytest.mark.asyncio_only("the test itself uses asyncio.create_task")
async def test_correlation_blocks_nest_and_follow_into_tasks() -> None:
    server = Server()
    factory = factory_with(
        lambda clients: clients.add("stock", transport=httpx.MockTransport(server))
    )
    async with factory:
        client = factory.async_client("stock")
        with correlation_id("outer"):
            with correlation_id() as inner:
                await asyncio.create_task(client.get("http://stock.local/1"))
            await client.get("http://stock.local/2")
    assert server.ids() == [inner, "outer"]
    assert inner != "outer"


async def test_a_header_the_request_carries_is_left_alone() -> None:
    server = Server(503, 200)
    factory = factory_with(
        lambda clients: clients.add(
            "stock", quick(), transport=httpx.MockTransport(server)
        )
    )
    async with factory:
        with correlation_id("from-context"):
            await factory.async_client("stock").get(
                "http://stock.local/", headers={HEADER: "mine"}
            )
    assert server.ids() == ["mine", "mine"]


async def test_a_redirect_keeps_the_calls_id() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers.get(HEADER))
        if request.url.path == "/old":
            return httpx.Response(301, headers={"Location": "/new"})
        return httpx.Response(200)

    seen: list[str | None] = []
    factory = factory_with(
        lambda clients: clients.add(
            "stock", transport=httpx.MockTransport(handler), follow_redirects=True
        )
    )
    async with factory:
        response = await factory.async_client("stock").get("http://stock.local/old")
    assert response.status_code == 200
    assert len(seen) == 2
    assert seen[0] is not None
    assert seen[0] == seen[1]


async def test_the_header_name_is_configurable_or_off() -> None:
    server = Server()
    factory = factory_with(
        lambda clients: clients.add("stock", transport=httpx.MockTransport(server)),
        correlation_header="Request-Id",
    )
    silent = factory_with(
        lambda clients: clients.add("stock", transport=httpx.MockTransport(server)),
        correlation_header=None,
    )
    async with factory, silent:
        with correlation_id("abc"):
            await factory.async_client("stock").get("http://stock.local/")
            await silent.async_client("stock").get("http://stock.local/")
    assert server.ids("Request-Id") == ["abc", None]
    assert server.ids() == [None, None]


async def test_the_clients_own_request_hooks_run_and_may_be_replaced() -> None:
    # The id is chosen by the transport, not by a request hook of the
    # factory's: the client's own hooks run, and a list of hooks given in
    # full (replacing any) costs the call nothing of its id.
    seen: list[str] = []
    server = Server(503, 200)

    async def hook(request: httpx.Request) -> None:
        seen.append(request.url.path)

    factory = factory_with(
        lambda clients: clients.add(
            "stock",
            transport=httpx.MockTransport(server),
            event_hooks={"request": [hook]},
        )
    )
    async with factory:
        client = factory.async_client("stock")
        with correlation_id("hooked"):
            await client.get("http://stock.local/a")
        client.event_hooks = {"request": [], "response": []}
        await client.get("http://stock.local/b")
    assert seen == ["/a"]
    ids = server.ids()
    assert ids[:2] == ["hooked", "hooked"]
    assert ids[2] is not None
    assert ids[2] != "hooked"


def test_a_new_id_is_a_version_8_uuid_unique_among_many() -> None:
    made = [new_correlation_id() for _ in range(10_000)]
    assert len(set(made)) == len(made)
    for value in made[:100]:
        parsed = uuid.UUID(value)
        assert (str(parsed), parsed.version) == (value, 8)
        assert parsed.variant == uuid.RFC_4122


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_makes_ids_of_its_own() -> None:
    parent = new_correlation_id()
    reading, writing = os.pipe()
    with warnings.catch_warnings():
        # Python 3.12+ warns when a process with threads forks; the child only
        # writes one id and exits.
        warnings.simplefilter("ignore", DeprecationWarning)
        child = os.fork()
    if child == 0:  # pragma: no cover - the child's coverage is not collected
        os.write(writing, new_correlation_id().encode())
        os._exit(0)
    os.close(writing)
    with os.fdopen(reading) as pipe:
        from_child = pipe.read()
    os.waitpid(child, 0)
    after = new_correlation_id()
    assert len(from_child) == 36
    assert from_child[:24] != parent[:24]
    assert after[:24] == parent[:24]
    assert from_child not in (parent, after)


@pytest.mark.parametrize(
    "value",
    ["", "has space", "x" * 201, "caf\u00e9", "line\r\nbreak", "nul\x00", "a,b"],
)
def test_an_invalid_correlation_id_is_refused_without_repeating_it(value: str) -> None:
    with (
        pytest.raises(ValueError, match="visible ASCII") as raised,
        correlation_id(value),
    ):
        pass  # pragma: no cover
    assert str(raised.value) == (
        "a correlation id is 1 to 200 visible ASCII characters without spaces or commas"
    )
    assert current_correlation_id() is None


# --- closing ------------------------------------------------------------------------


class ClosingTransport(httpx.MockTransport):
    def __init__(self) -> None:
        super().__init__(Server())
        self.closed = False

    def close(self) -> None:
        self.closed = True

    async def aclose(self) -> None:
        self.closed = True


async def test_the_factory_closes_every_client_it_built() -> None:
    async_transport, sync_transport = ClosingTransport(), ClosingTransport()
    factory = factory_with(
        lambda clients: clients.add("a", transport=async_transport).add(
            "b", transport=sync_transport
        )
    )
    a, b = factory.async_client("a"), factory.client("b")
    await factory.aclose()
    assert [a.is_closed, b.is_closed] == [True, True]
    assert [async_transport.closed, sync_transport.closed] == [True, True]
    await factory.aclose()  # idempotent
    with pytest.raises(RuntimeError, match="the HTTP client factory is closed"):
        factory.async_client("a")
    with pytest.raises(RuntimeError, match="closed"):
        factory.add("c")


def test_close_closes_the_sync_clients_and_refuses_when_async_ones_exist() -> None:
    factory = HttpClientFactory().add("a", transport=ClosingTransport())
    factory.async_client("a")
    with pytest.raises(RuntimeError) as raised:
        factory.close()
    assert str(raised.value) == (
        "HTTP clients 'a' are async: close the factory with aclose()"
    )
    assert not factory.async_client("a").is_closed  # nothing was closed
    asyncio.run(factory.aclose())

    sync_only = HttpClientFactory()
    client = sync_only.client()
    with sync_only:
        pass
    assert client.is_closed
    with pytest.raises(RuntimeError, match="closed"):
        sync_only.client()


def test_the_rest_of_the_package_never_imports_injector() -> None:
    code = (
        "import sys, importlib, pkgutil, http_resilience as package\n"
        "for info in pkgutil.walk_packages(package.__path__, 'http_resilience.'):\n"
        "    if info.name != 'http_resilience.injector':\n"
        "        importlib.import_module(info.name)\n"
        "assert 'injector' not in sys.modules, 'injector was imported'\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr


# --- edges --------------------------------------------------------------------------


def test_replaced_request_hooks_fall_back_to_the_context() -> None:
    server = Server(503, 200)
    factory = factory_with(
        lambda clients: clients.add(
            "stock", quick(), transport=httpx.MockTransport(server)
        )
    )
    with factory:
        client = factory.client("stock")
        client.event_hooks = {"request": []}  # drops the hook that picks the id
        with correlation_id("from-context"):
            client.get("http://stock.local/")
        client.get("http://stock.local/")
    assert server.ids()[:2] == ["from-context", "from-context"]
    assert server.ids()[2] is not None


def test_a_sync_client_without_correlation_sends_no_header() -> None:
    server = Server()
    factory = factory_with(
        lambda clients: clients.add("stock", transport=httpx.MockTransport(server)),
        correlation_header=None,
    )
    with factory:
        factory.client("stock").get("http://stock.local/")
    assert server.ids() == [None]


def test_a_sync_client_builds_its_own_transport_with_trust_env() -> None:
    factory = HttpClientFactory().add("stock", trust_env=False, http1=True)
    with factory:
        assert factory.client("stock").trust_env is False
    assert repr(factory) == "HttpClientFactory(names=['default', 'stock'])"


@pytest.mark.parametrize(
    ("config", "section"),
    [
        ({"resilience": "nope"}, "resilience"),
        ({"resilience": {"http": {"clients": 3}}}, "resilience.http.clients"),
    ],
)
def test_a_section_that_is_not_a_mapping_is_named(
    config: dict[str, Any], section: str
) -> None:
    with pytest.raises(TypeError, match=f"configuration section '{section}'"):
        HttpClientFactory(config=config)


def test_an_error_pydantic_cannot_retitle_gets_a_note_naming_the_client() -> None:
    from pydantic import BaseModel, field_validator
    from pydantic_core import PydanticCustomError

    from http_resilience._pipelines.config import _naming  # pyright: ignore[reportPrivateUsage]

    class Custom(BaseModel):
        value: int

        @field_validator("value")
        @classmethod
        def refuse(cls, value: int) -> int:
            raise PydanticCustomError("custom_kind", "refused")

    with pytest.raises(ValidationError) as raised:
        Custom(value=1)
    named = _naming(raised.value, "billing")
    assert named is raised.value
    assert named.__notes__ == ["in the options of HTTP client 'billing'"]


@pytest.mark.parametrize("name", ["Host", "content-length", "User-Agent"])
def test_the_correlation_header_may_not_be_one_httpx_sets_itself(name: str) -> None:
    with pytest.raises(ValueError, match="httpx sets it") as raised:
        HttpClientsModule(correlation_header=name)
    assert str(raised.value) == (
        f"correlation_header may not be {name!r}: httpx sets it on requests itself"
    )
