"""Every entry point that takes a URL names its target by scheme, host and port only.

Credentials are planted in each URL a public entry point takes (the userinfo's
user and password, a token in the path, ``?token=`` and ``#fragment``), and in
URLs that do not parse or name no host; then every exception (with its whole
chain), every log record (its message, arguments and extras), every event and
every health report is searched for them. Each search also finds the host, so
it is known to look at the right text.
"""

from __future__ import annotations

import logging
import traceback
from collections.abc import Callable, Iterator
from typing import Any

import anyio
import httpx
import pytest

from http_resilience import (
    AsyncResilientTransport,
    BrokenCircuitError,
    CircuitControl,
    HttpClientFactory,
    HttpEvent,
    HttpResilienceOptions,
    RateLimitedError,
    SharedState,
    create_async_client,
    create_client,
    health,
    resumable_bytes,
)
from http_resilience._core.hosts import safe_target
from http_resilience.asgi import readiness
from http_resilience.testing import EventRecorder, FakeClock
from tests.http_resilience._support.scripted import script
from tests.support.fault_server import FaultServer, free_port
from tests.support.redis_server import RedisServer

pytestmark = pytest.mark.anyio

SECRETS = {
    "user": "sentinel-user-0b7e",
    "password": "sentinel-password-5d1a",
    "path": "sentinel-path-2e6d",
    "query": "sentinel-token-8c42",
    "fragment": "sentinel-fragment-a9f3",
}
PASSWORD = SECRETS["password"]
TAIL = f"/v1/{SECRETS['path']}/orders?token={SECRETS['query']}#{SECRETS['fragment']}"


def planted(base: str) -> str:
    """`base` (``scheme://host[:port]``) with every secret a URL can carry."""
    scheme, _, authority = base.partition("://")
    return f"{scheme}://{SECRETS['user']}:{PASSWORD}@{authority}{TAIL}"


# No host in any of these: each holds the password, and names no host to show.
NOT_A_HOST = [
    pytest.param(f"https://admin:{PASSWORD}@[::1{TAIL}", id="unparseable IPv6"),
    pytest.param(f"https://admin:{PASSWORD}@api.example\x00{TAIL}", id="NUL"),
    pytest.param(f"admin:{PASSWORD}@api.example{TAIL}", id="no scheme"),
    pytest.param(f"https://{TAIL}", id="no host"),
]
UNPARSEABLE = [
    pytest.param(f"https://admin:{PASSWORD}@[::1{TAIL}", id="IPv6"),
    pytest.param(f"https://admin:{PASSWORD}@api.example\x00{TAIL}", id="NUL"),
    pytest.param(f"https://admin:{PASSWORD}@api.example:12ab{TAIL}", id="port"),
]


def clean(*texts: str) -> None:
    """No secret in any of `texts`."""
    joined = "\n".join(texts)
    for name, secret in SECRETS.items():
        assert secret not in joined, name


def chain(failure: BaseException) -> str:
    """`failure` as a log handler or a traceback would render it, chain and all."""
    return "".join(traceback.format_exception(failure)) + repr(failure)


def records(caplog: pytest.LogCaptureFixture) -> str:
    """Every log record: its text, its arguments, and every extra it carries."""
    parts = [caplog.text]
    for record in caplog.records:
        parts += [record.getMessage(), repr(record.args)]
        parts += [f"{key}={value!r}" for key, value in vars(record).items()]
    return "\n".join(parts)


def options(**values: Any) -> HttpResilienceOptions:
    return HttpResilienceOptions.model_validate({"base_delay": 0, **values})


BREAKS: dict[str, Any] = {
    "max_retry_attempts": 0,
    "minimum_throughput": 3,
    "failure_ratio": 0.5,
}


# --- the one renderer ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        (planted("https://API.example.:8443"), "https://api.example:8443"),
        (planted("http://api.example"), "http://api.example:80"),
        (planted("http://[::1]:9"), "http://[::1]:9"),
        (httpx.URL(planted("https://api.example")), "https://api.example:443"),
        (planted("redis://cache.example:6380"), "redis://cache.example:6380"),
        (f"unix://admin:{PASSWORD}@{TAIL}", "<URL without a scheme or host>"),
        (f"https://admin:{PASSWORD}@[::1{TAIL}", "<unparseable URL>"),
        (f"https://admin:{PASSWORD}@api.example\x00{TAIL}", "<unparseable URL>"),
        (f"admin:{PASSWORD}@api.example{TAIL}", "<URL without a scheme or host>"),
        (f"api.example{TAIL}", "<URL without a scheme or host>"),
        (planted("https://api.example").encode(), "<bytes>"),
        (None, "<NoneType>"),
    ],
)
def test_a_target_is_shown_by_scheme_host_and_port_only(
    value: object, shown: str
) -> None:
    assert safe_target(value) == shown


# --- CircuitControl -----------------------------------------------------------------


def controls() -> Iterator[CircuitControl]:
    handler = httpx.MockTransport(script(200))
    yield CircuitControl(AsyncResilientTransport(handler, name="billing"))
    yield CircuitControl(create_client("billing", transport=handler))
    factory = HttpClientFactory().add("billing", transport=handler)
    yield CircuitControl(factory.async_client("billing"))


@pytest.mark.parametrize(
    ("host", "message"),
    [
        (
            planted("https://api.example"),
            r"^'https://api.example:443' was given with a path, query or credentials",
        ),
        (
            f"https://admin:{PASSWORD}@api.example:99999{TAIL}",
            r"^'https://api.example:99999' is not a host: port 99999 is not 1-65535$",
        ),
        (
            f"https://admin:{PASSWORD}@api.example#{SECRETS['fragment']}",
            r"^'https://api.example:443' was given with a path, query or credentials",
        ),
        *(
            pytest.param(value.values[0], r"^<unparseable URL> is not a host: give ")
            for value in UNPARSEABLE
        ),
        (
            f"admin:{PASSWORD}@api.example{TAIL}",
            r"^<URL without a scheme or host> is not a host: give scheme://host",
        ),
        (
            f"https://{TAIL}",
            r"^<URL without a scheme or host> is not a host: give scheme://host",
        ),
    ],
)
def test_circuit_control_never_quotes_what_it_refuses(
    host: str, message: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="http_resilience")
    for control in controls():
        for order in (control.isolate, control.reset):
            with pytest.raises(ValueError, match=message) as caught:
                order(host)
            clean(chain(caught.value))
        assert control.isolated == ()
    clean(records(caplog))


async def test_an_isolated_host_called_with_secrets_is_named_by_host_only(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="http_resilience")
    events = EventRecorder[HttpEvent]()
    client = create_async_client(
        "billing",
        base_url=planted("https://api.example"),
        transport=httpx.MockTransport(script(200)),
        listeners=[events],
    )
    async with client:
        control = CircuitControl(client)
        control.isolate("https://api.example")
        with pytest.raises(BrokenCircuitError) as caught:
            await client.get("/more?token=" + SECRETS["query"])
        assert str(caught.value).startswith(
            "GET https://api.example:443 (client 'billing'): circuit isolated"
        )
        report = health(client)
        control.reset("https://api.example")
    assert [type(event).__name__ for event in events.events] == [
        "RejectionEvent",
        "RequestEvent",
    ]
    text = "\n".join(
        [chain(caught.value), repr(events.events), repr(report), records(caplog)]
    )
    assert "https://api.example:443" in text
    clean(text)


# --- clients: base_url and proxy ----------------------------------------------------


def builders() -> list[Callable[..., object]]:
    def sync_client(**kwargs: Any) -> object:
        return create_client("billing", **kwargs)

    def async_client(**kwargs: Any) -> object:
        return create_async_client("billing", **kwargs)

    def factory_add(**kwargs: Any) -> object:
        return HttpClientFactory().add("billing", **kwargs)

    return [sync_client, async_client, factory_add]


@pytest.mark.parametrize("base_url", UNPARSEABLE)
def test_a_base_url_that_does_not_parse_is_refused_without_quoting_it(
    base_url: str,
) -> None:
    for build in builders():
        with pytest.raises(httpx.InvalidURL) as caught:
            build(base_url=base_url)
        assert str(caught.value) == (
            "HTTP client 'billing': base_url= is an <unparseable URL>"
        )
        clean(chain(caught.value))


@pytest.mark.parametrize("proxy", UNPARSEABLE)
def test_a_proxy_that_does_not_parse_is_refused_without_quoting_it(
    proxy: str,
) -> None:
    for build in builders():
        with pytest.raises(httpx.InvalidURL) as caught:
            build(proxy=proxy)
        assert str(caught.value) == (
            "HTTP client 'billing': proxy= is an <unparseable URL>"
        )
        clean(chain(caught.value))


def test_a_proxy_of_a_scheme_httpx_cannot_use_is_named_by_host_only() -> None:
    for build in builders():
        with pytest.raises(ValueError, match="no proxy") as caught:
            build(proxy=planted("ftp://proxy.example"))
        assert str(caught.value) == (
            "HTTP client 'billing': proxy= ftp://proxy.example is no proxy: "
            "give an http, https, socks5 or socks5h URL"
        )
        clean(chain(caught.value))


def test_a_base_url_and_a_proxy_that_parse_are_taken() -> None:
    with create_client(
        "billing",
        base_url=planted("https://api.example"),
        proxy=planted("http://proxy.example:3128"),
    ) as client:
        assert client.base_url.host == "api.example"


async def test_every_failure_of_a_client_on_a_planted_base_url_names_hosts_only(
    fault_server: FaultServer, caplog: pytest.LogCaptureFixture
) -> None:
    """Over a real server: failing answers, a breaker opening, a timeout, a refusal."""
    caplog.set_level(logging.DEBUG, logger="http_resilience")
    events = EventRecorder[HttpEvent]()
    failures: list[BaseException] = []
    clock = FakeClock()

    async def attempt(client: httpx.AsyncClient, path: str) -> None:
        try:
            await client.get(path)
        except Exception as failure:
            failures.append(failure)

    factory = HttpClientFactory(listeners=[events], clock=clock)
    factory.add("billing", options(**BREAKS), base_url=planted(fault_server.url))
    factory.add(
        "refused", options(**BREAKS), base_url=planted(fault_server.refused_url)
    )
    factory.add(
        "slow",
        options(max_retry_attempts=0, attempt_timeout="1ms"),
        base_url=planted(fault_server.url),
        transport=httpx.MockTransport(_hanging),
    )
    async with factory:
        for _ in range(4):
            await attempt(factory.async_client("billing"), "/status/503?key=secrets")
            await attempt(factory.async_client("refused"), "/healthy")
        await attempt(factory.async_client("slow"), "/healthy")
        reports = factory.health()
        answer = await _probe(readiness(factory))
    kinds = {type(failure).__name__ for failure in failures}
    assert kinds >= {"ConnectError", "BrokenCircuitError", "AttemptTimeoutError"}
    assert answer.status_code == 503
    text = "\n".join(
        [
            *(chain(failure) for failure in failures),
            *(repr(event) for event in events.events),
            *(str(event) for event in events.events),
            repr(reports),
            answer.text,
            records(caplog),
        ]
    )
    assert "127.0.0.1" in text
    clean(text)


async def _hanging(request: httpx.Request) -> httpx.Response:
    await anyio.Event().wait()
    raise AssertionError("unreachable")  # pragma: no cover


async def _probe(app: Any) -> httpx.Response:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport) as client:
        return await client.get("http://service.local/health/ready")


async def test_a_refusal_by_the_limiter_names_the_host_only(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="http_resilience")
    events = EventRecorder[HttpEvent]()
    release = anyio.Event()

    async def held(request: httpx.Request) -> httpx.Response:
        await release.wait()
        return httpx.Response(200)

    client = create_async_client(
        "billing",
        options(concurrency_limit=1),
        base_url=planted("https://api.example"),
        transport=httpx.MockTransport(held),
        listeners=[events],
    )
    refused: list[BaseException] = []
    async with client, anyio.create_task_group() as group:
        group.start_soon(client.get, "/first")
        await anyio.wait_all_tasks_blocked()
        with pytest.raises(RateLimitedError) as caught:
            await client.get("/second")
        refused.append(caught.value)
        release.set()
    text = "\n".join([chain(refused[0]), repr(events.events), records(caplog)])
    assert "https://api.example:443" in text
    clean(text)


# --- resumable downloads ------------------------------------------------------------


async def test_a_failing_download_names_the_host_only() -> None:
    transport = httpx.MockTransport(lambda request: httpx.Response(404))
    async with httpx.AsyncClient(transport=transport) as client:
        with pytest.raises(httpx.HTTPStatusError) as caught:
            async for _ in resumable_bytes(client, planted("https://files.example")):
                pass  # pragma: no cover
    assert str(caught.value) == (
        "GET https://files.example:443: the server answered 404 Not Found"
    )
    assert caught.value.response.status_code == 404
    clean(chain(caught.value))


# --- SharedState --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        (planted("http://cache.example"), "http://cache.example:80"),
        (f"redis://admin:{PASSWORD}@[::1/0?token={SECRETS['query']}", None),
        (
            f"redis://admin:{PASSWORD}@cache.example/0?db={SECRETS['query']}",
            "redis://cache.example",
        ),
        (
            f"redis://admin:{PASSWORD}@cache.example:12ab/0?token={SECRETS['query']}",
            None,
        ),
    ],
)
def test_a_redis_url_redis_cannot_read_is_named_by_host_only(
    url: str, shown: str | None
) -> None:
    with pytest.raises(ValueError, match="is no Redis URL") as caught:
        SharedState(url)
    assert str(caught.value) == (
        f"SharedState: {shown or '<unparseable URL>'} is no Redis URL redis-py can "
        "read: give redis://host[:port][/db], rediss://... or unix://..., with a "
        "port, a database number and query options it knows"
    )
    clean(chain(caught.value))


@pytest.mark.parametrize("reachable", [True, False], ids=["wrong password", "down"])
def test_a_redis_that_refuses_is_logged_without_its_password(
    redis_server: RedisServer, caplog: pytest.LogCaptureFixture, reachable: bool
) -> None:
    caplog.set_level(logging.DEBUG, logger="http_resilience")
    port = redis_server.port if reachable else free_port()
    url = f"redis://{SECRETS['user']}:{PASSWORD}@127.0.0.1:{port}/0"
    with SharedState(url, sync_interval=60.0) as shared:
        shared.attach("billing")
        assert not shared.sync_now()
    text = records(caplog)
    assert "shared state unavailable" in text
    clean(text)


def test_a_redis_url_with_a_query_redis_does_not_know_is_logged_without_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="http_resilience")
    url = (
        f"redis://{SECRETS['user']}:{PASSWORD}@127.0.0.1:{free_port()}/0"
        f"?token={SECRETS['query']}#{SECRETS['fragment']}"
    )
    with SharedState(url, sync_interval=60.0) as shared:
        shared.attach("billing")
        assert not shared.sync_now()
    text = records(caplog)
    assert "shared state unavailable" in text
    clean(text)
