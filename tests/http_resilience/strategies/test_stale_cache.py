"""The stale cache: the last good answer to a read, served when the host fails.

A host (`Host`) that answers, then goes down in one of several ways, on a
`FakeClock`: within `max_stale` the stale answer with its ``Age``, past it the
failure; an open breaker and a limiter that refuses; what is never stored
(no-store, private, POST, ...); two credentials never share an entry; the
bounds in entries and bytes; streamed bodies; the options; sync and async.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field

import httpx
import pydantic
import pytest

from http_resilience import (
    AsyncResilientTransport,
    BrokenCircuitError,
    Degradation,
    HttpEvent,
    RateLimitedError,
    RequestEvent,
    ResiliencePipeline,
    ResilientTransport,
    StaleCacheOptions,
    degradation,
)
from http_resilience._strategies.stale_cache.store import Entry, StaleStore
from http_resilience._strategies.stale_cache.strategy import (
    AsyncStaleCache,
    StaleCacheStrategy,
    SyncStaleCache,
)
from http_resilience.testing import EventRecorder, FakeClock

pytestmark = pytest.mark.anyio

URL = "http://inventory.example/items/1"


class Chunks(httpx.AsyncByteStream, httpx.SyncByteStream):
    """A body sent in chunks, never read in advance (a real host's)."""

    def __init__(self, *chunks: bytes) -> None:
        self.chunks = chunks
        self.closed = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for chunk in self.chunks:
            yield chunk

    def __iter__(self) -> Iterator[bytes]:
        yield from self.chunks

    async def aclose(self) -> None:
        self.closed = True

    def close(self) -> None:
        self.closed = True


@dataclass
class Host:
    """Answers `status` with a body naming the path and the hit, until it is down.

    `down` is None (up), ``"refused"`` (a `ConnectError`) or a status code.
    """

    status: int = 200
    headers: dict[str, str] = field(default_factory=dict[str, str])
    down: str | int | None = None
    body: bytes | None = None
    hits: int = 0
    failing: list[Chunks] = field(default_factory=list[Chunks])

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.hits += 1
        if self.down == "refused":
            raise httpx.ConnectError("refused", request=request)
        if isinstance(self.down, int):
            stream = Chunks(b"down")
            self.failing.append(stream)
            return httpx.Response(self.down, stream=stream)
        body = (
            self.body
            if self.body is not None
            else (f"{request.url.path} #{self.hits}".encode())
        )
        return httpx.Response(self.status, headers=self.headers, stream=Chunks(body))


def cache(**fields: object) -> ResiliencePipeline:
    return ResiliencePipeline().add_stale_cache(max_stale=60, **fields)


def async_transport(
    host: Host,
    clock: FakeClock,
    pipeline: ResiliencePipeline | None = None,
    events: EventRecorder[HttpEvent] | None = None,
) -> AsyncResilientTransport:
    return AsyncResilientTransport(
        httpx.MockTransport(host),
        pipeline=pipeline or cache(),
        name="inventory",
        clock=clock,
        listeners=[events] if events is not None else [],
        random=lambda: 0.0,
    )


def sync_transport(
    host: Host,
    clock: FakeClock,
    pipeline: ResiliencePipeline | None = None,
    events: EventRecorder[HttpEvent] | None = None,
) -> ResilientTransport:
    return ResilientTransport(
        httpx.MockTransport(host),
        pipeline=pipeline or cache(),
        name="inventory",
        clock=clock,
        listeners=[events] if events is not None else [],
        random=lambda: 0.0,
    )


def strategy_of(
    transport: AsyncResilientTransport | ResilientTransport,
) -> StaleCacheStrategy:
    for link in transport.strategies:
        if isinstance(link, AsyncStaleCache | SyncStaleCache):
            return link.strategy
    raise AssertionError("no stale cache in the pipeline")


# --- the host goes down after a good answer -------------------------------------------


async def test_within_max_stale_the_last_answer_comes_back_with_its_age() -> None:
    host, clock = Host(), FakeClock()
    events: EventRecorder[HttpEvent] = EventRecorder()
    pipeline = cache().add_retry(max_retry_attempts=2, base_delay=0.1)
    transport = async_transport(host, clock, pipeline, events)
    async with httpx.AsyncClient(transport=transport) as client:
        fresh = await client.get(URL)
        assert fresh.text == "/items/1 #1"
        assert "age" not in fresh.headers
        assert degradation(fresh) is None

        host.down = "refused"
        clock.advance(30)
        stale = await client.get(URL)
    assert host.hits == 4  # the retries came first: three attempts, all refused
    assert stale.status_code == 200
    assert stale.text == "/items/1 #1"
    assert stale.headers["age"] == "30"
    found = degradation(stale)
    assert found is not None
    assert found.source == "stale-cache"
    assert found.reason == "ConnectError"
    assert found.age == pytest.approx(30.15)  # the retries waited 0.05 s, 0.1 s
    ends = events.of(RequestEvent)
    assert [(end.outcome, end.degraded) for end in ends] == [
        ("200", None),
        ("200", "stale-cache"),
    ]


async def test_past_max_stale_the_failure_goes_through() -> None:
    host, clock = Host(), FakeClock()
    async with httpx.AsyncClient(transport=async_transport(host, clock)) as client:
        await client.get(URL)
        host.down = "refused"
        clock.advance(59)
        assert (await client.get(URL)).headers["age"] == "59"
        clock.advance(2)
        with pytest.raises(httpx.ConnectError):
            await client.get(URL)


async def test_a_failure_status_is_replaced_and_its_response_closed() -> None:
    host, clock = Host(), FakeClock()
    async with httpx.AsyncClient(transport=async_transport(host, clock)) as client:
        await client.get(URL)
        host.down = 503
        stale = await client.get(URL)
    assert (stale.status_code, stale.text) == (200, "/items/1 #1")
    assert degradation(stale) == Degradation("stale-cache", "503", 0.0)
    assert [stream.closed for stream in host.failing] == [True]


async def test_a_status_that_is_no_outage_is_returned_as_it_is() -> None:
    host, clock = Host(), FakeClock()
    async with httpx.AsyncClient(transport=async_transport(host, clock)) as client:
        await client.get(URL)
        host.down = 501  # not implemented: no other attempt or answer changes it
        answer = await client.get(URL)
    assert answer.status_code == 501
    assert degradation(answer) is None


async def test_an_open_breaker_is_answered_stale() -> None:
    host, clock = Host(), FakeClock()
    pipeline = cache().add_breaker(
        failure_ratio=0.5, minimum_throughput=2, break_duration=30
    )
    async with httpx.AsyncClient(
        transport=async_transport(host, clock, pipeline)
    ) as client:
        await client.get(URL)
        host.down = "refused"
        reasons: list[str] = []
        for _ in range(3):
            found = degradation(await client.get(URL))
            assert found is not None
            reasons.append(found.reason)
    assert reasons[0] == "ConnectError"
    assert reasons[-1] == "BrokenCircuitError"
    assert host.hits < 4  # the open breaker sent nothing


async def test_a_limiter_that_refuses_is_answered_stale() -> None:
    host, clock = Host(), FakeClock()
    pipeline = cache().add_rate_limiter(permits_per_second=1)
    async with httpx.AsyncClient(
        transport=async_transport(host, clock, pipeline)
    ) as client:
        await client.get(URL)
        stale = await client.get(URL)  # no permit left this second
    assert host.hits == 1
    assert degradation(stale) == Degradation("stale-cache", "RateLimitedError", 0.0)


async def test_a_refusal_with_nothing_stored_is_raised() -> None:
    host, clock = Host(), FakeClock()
    pipeline = cache().add_rate_limiter(permits_per_second=1)
    async with httpx.AsyncClient(
        transport=async_transport(host, clock, pipeline)
    ) as client:
        await client.get(URL)
        with pytest.raises(RateLimitedError):
            await client.get("http://inventory.example/items/2")


async def test_a_newer_answer_that_is_not_stored_replaces_the_entry() -> None:
    host, clock = Host(), FakeClock()
    async with httpx.AsyncClient(transport=async_transport(host, clock)) as client:
        await client.get(URL)
        host.status = 403  # the host is fine, and its answer changed
        assert (await client.get(URL)).status_code == 403
        host.down = "refused"
        with pytest.raises(httpx.ConnectError):
            await client.get(URL)  # never the 200 from before the 403


async def test_a_not_found_is_the_last_answer_too() -> None:
    host, clock = Host(), FakeClock()
    async with httpx.AsyncClient(transport=async_transport(host, clock)) as client:
        await client.get(URL)
        host.status = 404
        await client.get(URL)
        host.down = 503
        stale = await client.get(URL)
    assert (stale.status_code, stale.text) == (404, "/items/1 #2")


async def test_the_age_the_host_gave_is_added_to() -> None:
    host, clock = Host(headers={"Age": "100"}), FakeClock()
    async with httpx.AsyncClient(transport=async_transport(host, clock)) as client:
        await client.get(URL)
        host.down = 503
        clock.advance(5)
        stale = await client.get(URL)
    assert stale.headers.get_list("age") == ["105"]


@pytest.mark.parametrize(
    ("header", "age"),
    [
        ((b"Age", "\u00b2".encode()), "5"),  # a superscript two: str.isdigit says yes
        ((b"Age", b"9" * 5_000), str(2**31 + 5)),  # past int()'s digit limit
        ((b"Cache-Control", b"max-age=" + b"7" * 5_000), "5"),
        ((b"Cache-Control", "stale-if-error=\u0663".encode()), "5"),  # arabic-indic 3
    ],
    ids=["superscript age", "huge age", "huge max-age", "arabic-indic digit"],
)
async def test_a_host_s_odd_numbers_are_numbers_or_nothing_never_an_error(
    header: tuple[bytes, bytes], age: str
) -> None:
    clock, down = FakeClock(), [False]

    def host(request: httpx.Request) -> httpx.Response:
        if down[0]:
            return httpx.Response(503)
        return httpx.Response(200, headers=[header], content=b"stock")

    transport = AsyncResilientTransport(
        httpx.MockTransport(host), pipeline=cache(), clock=clock
    )
    async with httpx.AsyncClient(transport=transport) as client:
        assert (await client.get(URL)).status_code == 200
        down[0] = True
        clock.advance(5)
        stale = await client.get(URL)
    assert stale.status_code == 200
    assert stale.headers.get_list("age") == [age]


async def test_stale_if_error_shortens_the_window() -> None:
    host = Host(headers={"Cache-Control": "max-age=10, stale-if-error=20"})
    clock = FakeClock()
    async with httpx.AsyncClient(transport=async_transport(host, clock)) as client:
        await client.get(URL)
        host.down = 503
        clock.advance(30)
        assert degradation(await client.get(URL)) is not None
        clock.advance(1)
        assert (await client.get(URL)).status_code == 503


# --- what is never stored or served ---------------------------------------------------


@pytest.mark.parametrize(
    "headers",
    [
        {"Cache-Control": "no-store"},
        {"Cache-Control": "private, max-age=60"},
        {"Cache-Control": "no-cache"},
        {"Cache-Control": "max-age=60, must-revalidate"},
        {"Set-Cookie": "session=abc"},
        {"Vary": "*"},
    ],
)
async def test_an_answer_that_forbids_it_is_never_stored(
    headers: dict[str, str],
) -> None:
    host, clock = Host(headers=headers), FakeClock()
    async with httpx.AsyncClient(transport=async_transport(host, clock)) as client:
        await client.get(URL)
        host.down = "refused"
        with pytest.raises(httpx.ConnectError):
            await client.get(URL)
    assert strategy_of(async_transport(host, clock)).store.size == (0, 0)


async def test_a_private_answer_is_stored_when_asked() -> None:
    host, clock = Host(headers={"Cache-Control": "private"}), FakeClock()
    transport = async_transport(host, clock, cache(store_private=True))
    async with httpx.AsyncClient(transport=transport) as client:
        await client.get(URL)
        host.down = "refused"
        assert degradation(await client.get(URL)) is not None


async def test_a_request_that_says_no_store_is_left_alone() -> None:
    host, clock = Host(), FakeClock()
    no_store = {"Cache-Control": "no-store"}
    transport = async_transport(host, clock)
    async with httpx.AsyncClient(transport=transport) as client:
        await client.get(URL, headers=no_store)
        assert strategy_of(transport).store.size == (0, 0)
        await client.get(URL)
        host.down = "refused"
        with pytest.raises(httpx.ConnectError):
            await client.get(URL, headers=no_store)  # nor served
        # One that asks for a fresh answer is not served a stale one either.
        with pytest.raises(httpx.ConnectError):
            await client.get(URL, headers={"Cache-Control": "no-cache"})
        assert degradation(await client.get(URL)) is not None


async def test_a_post_is_never_cached() -> None:
    host, clock = Host(), FakeClock()
    transport = async_transport(host, clock)
    async with httpx.AsyncClient(transport=transport) as client:
        await client.post(URL, content=b"{}")
        assert strategy_of(transport).store.size == (0, 0)
        await client.get(URL)
        host.down = 503
        assert (await client.post(URL, content=b"{}")).status_code == 503


async def test_a_range_request_is_left_alone() -> None:
    host, clock = Host(), FakeClock()
    transport = async_transport(host, clock)
    async with httpx.AsyncClient(transport=transport) as client:
        await client.get(URL)
        host.down = 503
        answer = await client.get(URL, headers={"Range": "bytes=0-3"})
    assert answer.status_code == 503


async def test_head_has_an_entry_of_its_own() -> None:
    host, clock = Host(), FakeClock()
    async with httpx.AsyncClient(transport=async_transport(host, clock)) as client:
        await client.get(URL)
        host.down = 503
        assert (await client.head(URL)).status_code == 503
        host.down = None
        await client.head(URL)
        host.down = 503
        assert degradation(await client.head(URL)) is not None


async def test_a_bug_is_never_hidden() -> None:
    clock = FakeClock()
    good = Host()

    def broken(request: httpx.Request) -> httpx.Response:
        if good.hits:
            raise ValueError("a bug")
        return good(request)

    transport = AsyncResilientTransport(
        httpx.MockTransport(broken), pipeline=cache(), clock=clock
    )
    async with httpx.AsyncClient(transport=transport) as client:
        await client.get(URL)
        with pytest.raises(ValueError, match="a bug"):
            await client.get(URL)


# --- keys: credentials and Vary -------------------------------------------------------


async def test_two_credentials_never_share_an_entry() -> None:
    host, clock = Host(), FakeClock()
    alice = {"Authorization": "Bearer alice-token"}
    bob = {"Authorization": "Bearer bob-token"}
    async with httpx.AsyncClient(transport=async_transport(host, clock)) as client:
        assert (await client.get(URL, headers=alice)).text == "/items/1 #1"
        assert (await client.get(URL, headers=bob)).text == "/items/1 #2"
        await client.get("http://inventory.example/items/2", headers=alice)
        host.down = "refused"
        assert (await client.get(URL, headers=alice)).text == "/items/1 #1"
        assert (await client.get(URL, headers=bob)).text == "/items/1 #2"
        with pytest.raises(httpx.ConnectError):
            await client.get(URL)  # no credential: neither entry
        with pytest.raises(httpx.ConnectError):
            await client.get(
                "http://inventory.example/items/2",
                headers={"Authorization": "Bearer mallory-token"},
            )


async def test_two_cookies_never_share_an_entry() -> None:
    host, clock = Host(), FakeClock()
    async with httpx.AsyncClient(transport=async_transport(host, clock)) as client:
        await client.get(URL, headers={"Cookie": "session=alice"})
        host.down = "refused"
        with pytest.raises(httpx.ConnectError):
            await client.get(URL, headers={"Cookie": "session=bob"})
        assert (
            degradation(await client.get(URL, headers={"Cookie": "session=alice"}))
            is not None
        )


def test_the_keys_held_reveal_neither_credential_nor_url() -> None:
    request = httpx.Request(
        "GET", URL + "?key=k", headers={"Authorization": "Bearer secret-token"}
    )
    one = StaleStore(max_entries=10, max_bytes=1000)
    other = StaleStore(max_entries=10, max_bytes=1000)
    key = one.key(request)
    assert b"secret-token" not in key
    assert b"inventory" not in key
    assert key == one.key(request)
    assert key != other.key(request)  # each cache hashes with a key of its own


async def test_vary_names_the_request_headers_that_must_match() -> None:
    host = Host(headers={"Vary": "Accept-Language"})
    clock = FakeClock()
    english = {"Accept-Language": "en"}
    async with httpx.AsyncClient(transport=async_transport(host, clock)) as client:
        await client.get(URL, headers=english)
        host.down = 503
        assert (
            await client.get(URL, headers={"Accept-Language": "fr"})
        ).status_code == 503
        assert degradation(await client.get(URL, headers=english)) is not None


# --- bounds and streams ---------------------------------------------------------------


async def test_a_thousand_urls_stay_within_max_entries() -> None:
    host, clock = Host(), FakeClock()
    transport = async_transport(host, clock, cache(max_entries=100))
    async with httpx.AsyncClient(transport=transport) as client:
        for number in range(1000):
            await client.get(f"http://inventory.example/items/{number}")
        entries, _ = strategy_of(transport).store.size
        assert entries == 100
        host.down = 503
        # The most recent are kept, the least recently used dropped.
        assert degradation(await client.get("http://inventory.example/items/999"))
        answer = await client.get("http://inventory.example/items/0")
        assert answer.status_code == 503


async def test_large_bodies_stay_within_max_bytes() -> None:
    host, clock = Host(body=b"x" * 3000), FakeClock()
    transport = async_transport(host, clock, cache(max_bytes=10_000))
    strategy = strategy_of(transport)
    async with httpx.AsyncClient(transport=transport) as client:
        for number in range(20):
            await client.get(f"http://inventory.example/items/{number}")
            assert strategy.store.size[1] <= 10_000
        assert strategy.store.size[0] == 3
        host.body = b"y" * 20_000  # larger than the whole cache: never stored
        await client.get(URL)
        host.down = 503
        assert (await client.get(URL)).status_code == 503
    assert strategy.store.size[1] <= 10_000


async def test_a_streamed_body_is_stored_once_read_to_its_end() -> None:
    host, clock = Host(), FakeClock()
    host.body = b"chunk one, chunk two"
    transport = async_transport(host, clock)
    async with httpx.AsyncClient(transport=transport) as client:
        async with client.stream("GET", URL) as response:
            assert strategy_of(transport).store.size[0] == 0  # not read yet
            await response.aread()
        assert strategy_of(transport).store.size[0] == 1
        async with client.stream("GET", "http://inventory.example/items/2"):
            pass  # closed unread: not stored
        assert strategy_of(transport).store.size[0] == 1
        host.down = 503
        assert (await client.get(URL)).text == "chunk one, chunk two"
        other = await client.get("http://inventory.example/items/2")
        assert other.status_code == 503


async def test_a_body_over_the_bound_is_not_stored_while_read() -> None:
    clock = FakeClock()

    def chunked(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, stream=Chunks(b"a" * 600, b"b" * 600, b"c" * 10))

    transport = AsyncResilientTransport(
        httpx.MockTransport(chunked), pipeline=cache(max_bytes=1000), clock=clock
    )
    async with httpx.AsyncClient(transport=transport) as client:
        assert len((await client.get(URL)).content) == 1210  # the caller gets it all
    assert strategy_of(transport).store.size == (0, 0)


async def test_an_encoded_body_is_served_as_the_host_sent_it() -> None:
    import gzip

    clock = FakeClock()
    down = False

    def gzipped(request: httpx.Request) -> httpx.Response:
        if down:
            return httpx.Response(503)
        return httpx.Response(
            200,
            headers={"Content-Encoding": "gzip"},
            content=gzip.compress(b"unzipped"),
        )

    transport = AsyncResilientTransport(
        httpx.MockTransport(gzipped), pipeline=cache(), clock=clock
    )
    async with httpx.AsyncClient(transport=transport) as client:
        assert (await client.get(URL)).text == "unzipped"
        down = True
        stale = await client.get(URL)
    assert stale.text == "unzipped"
    assert degradation(stale) is not None


# --- sync -----------------------------------------------------------------------------


def test_sync_the_last_answer_comes_back_within_max_stale() -> None:
    host, clock = Host(), FakeClock()
    events: EventRecorder[HttpEvent] = EventRecorder()
    transport = sync_transport(host, clock, events=events)
    with httpx.Client(transport=transport) as client:
        client.get(URL)
        host.down = "refused"
        clock.advance(12)
        stale = client.get(URL)
        assert (stale.text, stale.headers["age"]) == ("/items/1 #1", "12")
        assert degradation(stale) == Degradation("stale-cache", "ConnectError", 12.0)
        clock.advance(50)
        with pytest.raises(httpx.ConnectError):
            client.get(URL)
    assert [end.degraded for end in events.of(RequestEvent)] == [
        None,
        "stale-cache",
        None,
    ]


def test_sync_two_credentials_never_share_an_entry() -> None:
    host, clock = Host(), FakeClock()
    with httpx.Client(transport=sync_transport(host, clock)) as client:
        client.get(URL, headers={"Authorization": "Basic YWxpY2U6eA=="})
        host.down = 503
        assert (
            client.get(URL, headers={"Authorization": "Basic Ym9iOng="}).status_code
            == 503
        )
        assert (
            degradation(
                client.get(URL, headers={"Authorization": "Basic YWxpY2U6eA=="})
            )
            is not None
        )


def test_sync_an_open_breaker_is_answered_stale() -> None:
    host, clock = Host(), FakeClock()
    pipeline = cache().add_breaker(
        failure_ratio=0.5, minimum_throughput=2, break_duration=30
    )
    with httpx.Client(transport=sync_transport(host, clock, pipeline)) as client:
        client.get(URL)
        host.down = 503
        found = [degradation(client.get(URL)) for _ in range(3)]
    assert [None if one is None else one.reason for one in found][-1] == (
        "BrokenCircuitError"
    )


def test_sync_streams_stay_within_the_bounds() -> None:
    host, clock = Host(body=b"z" * 400), FakeClock()
    transport = sync_transport(host, clock, cache(max_entries=5, max_bytes=1500))
    with httpx.Client(transport=transport) as client:
        for number in range(50):
            client.get(f"http://inventory.example/items/{number}")
    entries, held = strategy_of(transport).store.size
    assert entries <= 5
    assert held <= 1500
    assert entries == 3  # 400-byte bodies with their headers: three fit


# --- the options and the pipeline -----------------------------------------------------


def test_the_defaults() -> None:
    options = StaleCacheOptions(max_stale="5m")
    assert options.max_stale.total_seconds() == 300
    assert (options.max_entries, options.max_bytes) == (1000, 16 * 1024 * 1024)
    assert options.store_private is False


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({}, "max_stale\n  Field required"),
        ({"max_stale": 0}, "max_stale"),
        ({"max_stale": "30d"}, "at most 24 days"),
        ({"max_stale": 60, "max_entries": 0}, "max_entries"),
        ({"max_stale": 60, "max_bytes": True}, "not true or false"),
        ({"max_stale": 60, "max_age": 5}, "max_age\n  Extra inputs are not permitted"),
    ],
)
def test_bad_options_are_refused_when_given(
    fields: dict[str, object], message: str
) -> None:
    with pytest.raises(pydantic.ValidationError, match=message):
        StaleCacheOptions.model_validate(fields)
    with pytest.raises(pydantic.ValidationError, match=message):
        ResiliencePipeline().add_stale_cache(**fields)


def test_the_cache_goes_outside_every_step_but_the_fallbacks() -> None:
    def nothing(request: httpx.Request, failure: object) -> None:
        return None

    pipeline = (
        ResiliencePipeline()
        .add_retry()
        .add_stale_cache(max_stale=60)
        .add_breaker()
        .add_fallback(nothing)
    )
    assert repr(pipeline) == "ResiliencePipeline(fallback, stale cache, retry, breaker)"


def test_one_stale_cache_is_enough() -> None:
    with pytest.raises(ValueError, match="has a stale cache already"):
        cache().add_stale_cache(max_stale=10)


def test_options_or_fields_not_both() -> None:
    with pytest.raises(TypeError, match="not both"):
        ResiliencePipeline().add_stale_cache(
            StaleCacheOptions(max_stale=1), max_entries=3
        )


async def test_an_entry_past_its_window_is_dropped_when_asked_for() -> None:
    host, clock = Host(), FakeClock()
    transport = async_transport(host, clock)
    async with httpx.AsyncClient(transport=transport) as client:
        await client.get(URL)
        host.down = "refused"
        clock.advance(61)
        with pytest.raises(httpx.ConnectError):
            await client.get(URL)
    assert strategy_of(transport).store.size == (0, 0)


def test_an_open_breaker_alone_is_refused_without_an_entry() -> None:
    host, clock = Host(down=503), FakeClock()
    pipeline = cache().add_breaker(
        failure_ratio=0.5, minimum_throughput=2, break_duration=30
    )
    with httpx.Client(transport=sync_transport(host, clock, pipeline)) as client:
        client.get(URL)
        client.get(URL)
        with pytest.raises(BrokenCircuitError):
            client.get(URL)


def entry_at(at: float, body: bytes = b"x") -> Entry:
    return Entry(200, (), body, (), at, 0.0, 60.0, (), b"")


def test_the_store_holds_the_last_answer_or_nothing() -> None:
    store = StaleStore(max_entries=5, max_bytes=100)
    assert store.put(b"k", entry_at(2.0))
    assert not store.put(b"k", entry_at(1.0))  # a body read late, of an older answer
    store.replace(b"k", 3.0)  # a newer answer arrived
    assert store.size == (0, 0)
    assert not store.put(b"k", entry_at(2.5))  # older than the answer that replaced it
    assert store.put(b"k", entry_at(3.0))
    assert not store.put(b"j", entry_at(4.0, b"x" * 101))  # larger than the store
    assert store.size == (1, 1)


async def test_headers_larger_than_the_store_are_not_stored() -> None:
    host, clock = Host(headers={"X-Padding": "p" * 2000}), FakeClock()
    transport = async_transport(host, clock, cache(max_bytes=1000))
    async with httpx.AsyncClient(transport=transport) as client:
        await client.get(URL)
    assert strategy_of(transport).store.size == (0, 0)


def test_sync_a_bug_or_nothing_stored_goes_through() -> None:
    clock = FakeClock()
    host = Host(down="refused")
    with (
        httpx.Client(transport=sync_transport(host, clock)) as client,
        pytest.raises(httpx.ConnectError),
    ):
        client.get(URL)

    def broken(request: httpx.Request) -> httpx.Response:
        raise ValueError("a bug")

    transport = ResilientTransport(
        httpx.MockTransport(broken), pipeline=cache(), clock=clock
    )
    with (
        httpx.Client(transport=transport) as client,
        pytest.raises(ValueError, match="a bug"),
    ):
        client.get(URL)
    host = Host()
    with httpx.Client(transport=sync_transport(host, clock)) as client:
        client.get(URL)
        host.down = 501
        assert client.get(URL).status_code == 501
        host.down = 503
        assert client.get("http://inventory.example/other").status_code == 503
