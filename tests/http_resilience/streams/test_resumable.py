"""`resumable_bytes` over `httpx.MockTransport`: every way a resume can go."""

from __future__ import annotations

from contextlib import aclosing
from typing import Any

import httpx
import pytest

from http_resilience import (
    PartialStreamPolicy,
    StreamRetryOptions,
    resumable_bytes,
    resumable_bytes_sync,
)
from http_resilience.testing import FakeClock

from .ranged import BODY, CutStream, RangeServer, Respond, drain

pytestmark = pytest.mark.anyio

URL = "http://files.test/big.bin"
RESTART = PartialStreamPolicy.RESTART_FROM_START


def options(clock: FakeClock | None = None, **overrides: Any) -> StreamRetryOptions:
    return StreamRetryOptions.model_validate(
        {"clock": clock or FakeClock(), "use_jitter": False, **overrides}
    )


async def download(
    server: RangeServer, chosen: StreamRetryOptions | None = None, **kwargs: Any
) -> list[bytes]:
    chunks: list[bytes] = []
    async with httpx.AsyncClient(transport=httpx.MockTransport(server)) as client:
        stream = resumable_bytes(client, URL, chosen or options(), **kwargs)
        async with aclosing(stream):
            async for chunk in stream:
                chunks.append(chunk)
    return chunks


async def test_an_unbroken_body_is_one_request() -> None:
    server = RangeServer()
    assert b"".join(await download(server)) == BODY
    assert server.ranges == [(None, None)]
    assert server.requests[0].headers["Accept-Encoding"] == "identity"
    assert server.all_closed


async def test_a_broken_body_resumes_with_range_and_if_range() -> None:
    clock = FakeClock()
    server = RangeServer(cuts=[12_345])
    assert b"".join(await download(server, options(clock))) == BODY
    assert server.ranges == [(None, None), ("bytes=12345-", '"v1"')]
    assert clock.sleeps == [0.2]
    assert server.all_closed


async def test_several_breaks_resume_each_from_the_bytes_passed_on() -> None:
    server = RangeServer(cuts=[5000, 7000, 0, 3000])
    chosen = options(max_retry_attempts=4)
    assert b"".join(await download(server, chosen)) == BODY
    assert [asked for asked, _ in server.ranges] == [
        None,
        "bytes=5000-",
        "bytes=12000-",
        "bytes=12000-",
        "bytes=15000-",
    ]


async def test_the_budget_is_for_the_whole_download() -> None:
    server = RangeServer(cuts=[1000, 1000, 1000])
    chunks: list[bytes] = []
    with pytest.raises(httpx.RemoteProtocolError):
        chunks.extend(await download(server, options(max_retry_attempts=2)))
    assert len(server.requests) == 3
    assert server.all_closed


async def test_a_break_before_any_byte_asks_again_from_the_start() -> None:
    server = RangeServer(cuts=[0])
    assert b"".join(await download(server)) == BODY
    assert server.ranges == [(None, None), (None, None)]


async def test_chunks_are_raw_bytes_of_the_size_asked() -> None:
    server = RangeServer(cuts=[2500])
    chunks = await download(server, chunk_size=4096)
    assert b"".join(chunks) == BODY
    assert {len(chunk) for chunk in chunks[1:-1]} == {4096}


async def test_a_break_after_the_last_byte_needs_no_second_request() -> None:
    server = RangeServer(cuts=[len(BODY)])
    assert b"".join(await download(server)) == BODY
    assert len(server.requests) == 1


async def test_without_a_strong_etag_if_range_carries_last_modified() -> None:
    modified = "Tue, 15 Nov 1994 12:45:26 GMT"
    server = RangeServer(etag='W/"weak"', last_modified=modified, cuts=[100])
    assert b"".join(await download(server)) == BODY
    assert server.ranges[1] == ("bytes=100-", modified)


# --- when the bytes cannot be stitched ------------------------------------------


async def rethrown(server: RangeServer) -> tuple[httpx.TransportError, bytes]:
    """Download under the default policy, expecting the break to be re-raised."""
    received: list[bytes] = []
    async with httpx.AsyncClient(transport=httpx.MockTransport(server)) as client:
        with pytest.raises(httpx.RemoteProtocolError) as raised:
            await drain(resumable_bytes(client, URL, options()), received)
    assert server.all_closed
    return raised.value, b"".join(received)


async def test_a_server_ignoring_range_reraises_the_break_by_default() -> None:
    server = RangeServer(cuts=[6000], honours_range=False)
    failure, received = await rethrown(server)
    assert received == BODY[:6000]
    assert failure.__notes__ == [
        "resumable_bytes could not resume at byte 6000: the server sent the whole "
        "body (200) instead of the range; RESTART_FROM_START would start the body over"
    ]
    assert len(server.requests) == 2


async def test_a_server_ignoring_range_starts_over_under_restart_from_start() -> None:
    server = RangeServer(cuts=[6000, 9000], honours_range=False)
    chunks = await download(server, options(partial_stream_policy=RESTART))
    # The consumer is handed bytes from zero again after each restart.
    assert b"".join(chunks) == BODY[:6000] + BODY[:9000] + BODY
    assert [asked for asked, _ in server.ranges] == [None, "bytes=6000-", "bytes=9000-"]
    assert server.all_closed


async def test_a_changed_etag_is_answered_with_200_and_not_stitched() -> None:
    server = RangeServer(cuts=[6000])
    server.instead[1] = lambda request: server.respond(
        200, {"ETag": '"v2"', "Content-Length": str(len(BODY))}, BODY
    )
    failure, received = await rethrown(server)
    assert received == BODY[:6000]
    assert "the server sent the whole body (200)" in failure.__notes__[0]


def partial(start: int, **headers: str) -> httpx.Response:
    return httpx.Response(
        206,
        headers={
            "Content-Range": f"bytes {start}-{len(BODY) - 1}/{len(BODY)}",
            **headers,
        },
        stream=CutStream(BODY[start:], None, httpx.ReadError),
    )


def wrong_start(request: httpx.Request) -> httpx.Response:
    return partial(5000)


def unreadable_range(request: httpx.Request) -> httpx.Response:
    return httpx.Response(206, headers={"Content-Range": "lines 1-2/3"})


def other_etag(request: httpx.Request) -> httpx.Response:
    return partial(6000, ETag='"v2"')


def other_length(request: httpx.Request) -> httpx.Response:
    return httpx.Response(206, headers={"Content-Range": "bytes 6000-6999/7000"})


def short_range(request: httpx.Request) -> httpx.Response:
    return httpx.Response(
        206, headers={"Content-Range": f"bytes 6000-6999/{len(BODY)}"}
    )


def short_length(request: httpx.Request) -> httpx.Response:
    response = partial(6000)
    response.headers["Content-Length"] = "1000"
    return response


def unsatisfiable(request: httpx.Request) -> httpx.Response:
    return httpx.Response(416)


def no_content(request: httpx.Request) -> httpx.Response:
    return httpx.Response(204)


@pytest.mark.parametrize(
    ("answer", "problem"),
    [
        (wrong_start, "did not start at byte 6000"),
        (unreadable_range, "no readable Content-Range"),
        (other_etag, "the body's ETag changed"),
        (other_length, "the body's length changed"),
        (short_range, "stopped short of the end"),
        (short_length, "Content-Length did not match its range"),
        (unsatisfiable, "could not satisfy the range (416)"),
        (no_content, "the server answered 204 to a range request"),
    ],
)
async def test_a_partial_answer_that_does_not_fit_is_not_stitched(
    answer: Respond, problem: str
) -> None:
    server = RangeServer(cuts=[6000])
    server.instead[1] = answer
    failure, received = await rethrown(server)
    assert received == BODY[:6000]
    assert problem in failure.__notes__[0]
    assert len(server.requests) == 2


async def test_a_206_repeating_the_same_etag_is_stitched() -> None:
    server = RangeServer(cuts=[6000])
    server.instead[1] = lambda _: partial(6000, ETag='"v1"')
    assert b"".join(await download(server)) == BODY


async def test_a_206_of_unknown_total_length_is_stitched() -> None:
    server = RangeServer(cuts=[6000])
    server.instead[1] = lambda _: httpx.Response(
        206,
        headers={"Content-Range": f"bytes 6000-{len(BODY) - 1}/*"},
        stream=CutStream(BODY[6000:], None, httpx.ReadError),
    )
    assert b"".join(await download(server)) == BODY


async def test_an_unfit_partial_answer_starts_over_with_a_fresh_request() -> None:
    server = RangeServer(cuts=[6000])
    server.instead[1] = unsatisfiable
    chunks = await download(server, options(partial_stream_policy=RESTART))
    assert b"".join(chunks) == BODY[:6000] + BODY
    assert server.ranges == [(None, None), ("bytes=6000-", '"v1"'), (None, None)]


async def test_without_any_validator_a_break_is_not_resumed() -> None:
    server = RangeServer(etag=None, cuts=[6000])
    failure, received = await rethrown(server)
    assert received == BODY[:6000]
    assert "no strong ETag or Last-Modified" in failure.__notes__[0]
    assert len(server.requests) == 1
    restarted = RangeServer(etag=None, cuts=[6000])
    chunks = await download(restarted, options(partial_stream_policy=RESTART))
    assert b"".join(chunks) == BODY[:6000] + BODY
    assert restarted.ranges == [(None, None), (None, None)]


# --- statuses and the classifier --------------------------------------------------


async def test_a_failing_status_is_classified_and_retried_by_default() -> None:
    server = RangeServer()
    server.instead[0] = lambda _: httpx.Response(503)
    assert b"".join(await download(server)) == BODY
    assert len(server.requests) == 2


def is_transport_error(failure: Exception) -> bool:
    return isinstance(failure, httpx.TransportError)


async def test_a_narrow_classifier_lets_a_failing_status_through() -> None:
    server = RangeServer(cuts=[None, 4000])
    server.instead[0] = lambda _: httpx.Response(503)
    only_breaks = options(should_retry=is_transport_error)
    with pytest.raises(httpx.HTTPStatusError):
        await download(server, only_breaks)
    assert len(server.requests) == 1


async def test_a_failing_status_on_a_resume_is_a_failure_like_any_other() -> None:
    server = RangeServer(cuts=[6000])
    server.instead[1] = lambda _: httpx.Response(502)
    assert b"".join(await download(server)) == BODY
    assert [asked for asked, _ in server.ranges] == [None, "bytes=6000-", "bytes=6000-"]


async def test_a_connection_failure_on_a_resume_is_retried() -> None:
    server = RangeServer(cuts=[6000])

    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused", request=request)

    server.instead[1] = refuse
    assert b"".join(await download(server)) == BODY
    assert len(server.requests) == 3


# --- closing and the consumer stopping ------------------------------------------


@pytest.mark.asyncio_only(
    "httpx's nested async generators warn on trio when the consumer stops early"
)
async def test_a_consumer_that_stops_early_closes_the_response() -> None:
    server = RangeServer()
    async with (
        httpx.AsyncClient(transport=httpx.MockTransport(server)) as client,
        aclosing(resumable_bytes(client, URL)) as stream,
    ):
        async for _ in stream:
            break
    assert server.streams[0].closed >= 1
    assert len(server.requests) == 1


async def test_a_request_object_is_sent_as_given() -> None:
    server = RangeServer(cuts=[700])
    async with httpx.AsyncClient(transport=httpx.MockTransport(server)) as client:
        request = client.build_request("GET", URL, headers={"X-Trace": "abc"})
        body = b"".join([c async for c in resumable_bytes(client, request, options())])
    assert body == BODY
    assert [r.headers["X-Trace"] for r in server.requests] == ["abc", "abc"]


# --- the sync twin ----------------------------------------------------------------


def test_the_sync_twin_resumes_the_same_way() -> None:
    clock = FakeClock()
    server = RangeServer(cuts=[6000, 20_000])
    with httpx.Client(transport=httpx.MockTransport(server)) as client:
        body = b"".join(resumable_bytes_sync(client, URL, options(clock)))
    assert body == BODY
    assert server.ranges == [
        (None, None),
        ("bytes=6000-", '"v1"'),
        ("bytes=26000-", '"v1"'),
    ]
    assert clock.sleeps == [0.2, 0.4]
    assert server.all_closed


def test_the_sync_twin_restarts_or_rethrows_as_told() -> None:
    server = RangeServer(cuts=[6000], honours_range=False)
    with httpx.Client(transport=httpx.MockTransport(server)) as client:
        received: list[bytes] = []
        with pytest.raises(httpx.RemoteProtocolError):
            received.extend(resumable_bytes_sync(client, URL, options()))
        assert b"".join(received) == BODY[:6000]
        server.cuts += [None, 5000]  # the third response is cut too
        chosen = options(partial_stream_policy=RESTART)
        body = b"".join(resumable_bytes_sync(client, URL, chosen))
    assert body == BODY[:5000] + BODY
    assert server.all_closed


def test_the_sync_twin_fetches_a_fresh_body_after_a_416() -> None:
    server = RangeServer(cuts=[6000])
    server.instead[1] = unsatisfiable
    with httpx.Client(transport=httpx.MockTransport(server)) as client:
        chosen = options(partial_stream_policy=RESTART)
        body = b"".join(resumable_bytes_sync(client, URL, chosen))
    assert body == BODY[:6000] + BODY
    assert len(server.requests) == 3


def test_the_sync_twin_stops_after_the_last_byte() -> None:
    server = RangeServer(cuts=[len(BODY)])
    with httpx.Client(transport=httpx.MockTransport(server)) as client:
        assert b"".join(resumable_bytes_sync(client, URL)) == BODY
    assert len(server.requests) == 1


# --- validation on the call -------------------------------------------------------


async def test_wrong_arguments_fail_on_the_call() -> None:
    async with httpx.AsyncClient(
        transport=httpx.MockTransport(RangeServer())
    ) as client:
        with pytest.raises(
            TypeError,
            match=r"resumable_bytes\(\) needs an httpx.AsyncClient, got Client",
        ):
            resumable_bytes(httpx.Client(), URL)  # type: ignore[arg-type]
        with pytest.raises(
            TypeError, match=r"needs an httpx\.Request, an httpx\.URL or a str, got int"
        ):
            resumable_bytes(client, 42)  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="resumes GET requests only, got POST"):
            resumable_bytes(client, client.build_request("POST", URL))
        with pytest.raises(ValueError, match="sets Range itself"):
            resumable_bytes(
                client, client.build_request("GET", URL, headers={"Range": "bytes=0-"})
            )
        with pytest.raises(TypeError, match="options must be a StreamRetryOptions"):
            resumable_bytes(client, URL, {"max_retry_attempts": 1})  # type: ignore[arg-type]
    with pytest.raises(
        TypeError, match=r"resumable_bytes_sync\(\) needs an httpx.Client"
    ):
        resumable_bytes_sync(client, URL)  # type: ignore[arg-type]
