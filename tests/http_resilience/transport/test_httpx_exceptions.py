"""httpx's own exceptions stay httpx's; ours that come from the network are httpx's too.

An httpx timeout the wrapped transport raises before a deadline of the
pipeline passed reaches the caller as it was raised (``pytest.raises
(httpx.ConnectTimeout)`` holds), after the retries, each attempt's line noted
on it. A deadline of ours that cuts is `AttemptTimeoutError` or
`TotalTimeoutError`: `httpx.TimeoutException` and `ResilienceError` both, with
the call's request, and a message stating the time the attempt took.
"""

from __future__ import annotations

import httpx
import pytest

from http_resilience import (
    AsyncResilientTransport,
    AttemptStalledError,
    AttemptTimeoutError,
    BrokenCircuitError,
    RateLimitedError,
    ResilienceError,
    ResilienceLayerError,
    ResilientTransport,
    ResponseTooLargeError,
    TotalTimeoutError,
)
from http_resilience.testing import FakeClock
from tests.http_resilience._support.scripted import (
    URL,
    async_transport,
    options,
    script,
    sync_transport,
)
from tests.support.fault_server import FaultServer

pytestmark = pytest.mark.anyio


def test_which_of_our_errors_an_except_httpx_http_error_catches() -> None:
    # From the network: httpx's too. Refused in this process: ours alone.
    assert issubclass(AttemptTimeoutError, httpx.TimeoutException)
    assert issubclass(TotalTimeoutError, httpx.TimeoutException)
    assert issubclass(AttemptStalledError, httpx.ReadTimeout)
    local = (
        BrokenCircuitError,
        RateLimitedError,
        ResponseTooLargeError,
        ResilienceLayerError,
    )
    assert [issubclass(kind, httpx.HTTPError) for kind in local] == [False] * 4
    every = (AttemptTimeoutError, TotalTimeoutError, AttemptStalledError, *local)
    assert all(issubclass(kind, ResilienceError) for kind in every)


def test_request_is_kept_when_given_and_unset_otherwise() -> None:
    request = httpx.Request("GET", URL)
    error = AttemptTimeoutError("late", request=request, elapsed=0.3, timeout=0.25)
    assert (error.request, error.elapsed, error.timeout) == (request, 0.3, 0.25)
    with pytest.raises(RuntimeError):
        _ = TotalTimeoutError("late").request
    assert AttemptStalledError("stalled", request=request).request is request


def test_an_instant_connect_timeout_stays_one_after_the_retries() -> None:
    failure = httpx.ConnectTimeout("connect timed out")
    server = script(failure)
    with (
        httpx.Client(transport=sync_transport(server, FakeClock())) as client,
        pytest.raises(httpx.ConnectTimeout) as raised,
    ):
        client.get(URL)
    assert raised.value is failure
    assert server.hits == 4  # retried as a transport failure: 1 + 3 retries
    # The attempts' story, one line each; no claim of a 10 s wait.
    notes = failure.__notes__
    assert [note.split(": ", 1)[0] for note in notes] == [
        "GET http://api.example:80 (client 'orders')"
    ] * 4
    assert notes[3].endswith(
        "attempt 4 raised it after 0 s, before its attempt timeout of 10 s "
        "passed (the wrapped transport's own timeout)"
    )
    assert "timed out after 10 s" not in str(raised.value)
    assert raised.value.request.url == URL


async def test_the_async_client_keeps_an_instant_timeout_as_httpx_raised_it() -> None:
    failure = httpx.WriteTimeout("write timed out")
    server = script(failure)
    transport = async_transport(server, FakeClock(), max_retry_attempts=1)
    async with httpx.AsyncClient(transport=transport) as client:
        with pytest.raises(httpx.WriteTimeout) as raised:
            await client.get(URL)
    assert raised.value is failure
    assert server.hits == 2
    assert len(failure.__notes__) == 2


def test_our_deadline_is_an_httpx_timeout_that_states_the_time_it_took() -> None:
    clock = FakeClock()
    hits = script(200)

    def slow(request: httpx.Request) -> httpx.Response:
        clock.sleep_sync(0.3)  # past the 0.25 s attempt timeout, on the clock
        return hits(request)

    transport = sync_transport(slow, clock, attempt_timeout=0.25, max_retry_attempts=0)
    with httpx.Client(transport=transport) as client:
        try:
            client.get(URL)
        except httpx.TimeoutException as caught:
            error = caught
        else:  # pragma: no cover - the assertion below names it
            raise AssertionError("no timeout")
    assert isinstance(error, AttemptTimeoutError)
    assert str(error) == (
        "GET http://api.example:80 (client 'orders'): attempt 1 timed out after "
        "0.3 s (attempt timeout 0.25 s)"
    )
    assert error.elapsed == pytest.approx(0.3)
    assert error.timeout == 0.25
    assert error.request.url == URL


async def test_a_total_timeout_is_an_httpx_timeout_and_not_retried() -> None:
    clock = FakeClock()

    async def slow(request: httpx.Request) -> httpx.Response:
        await clock.sleep(0.6)
        return httpx.Response(503)

    transport = async_transport(
        slow,
        clock,
        attempt_timeout=0.5,
        total_request_timeout=1,
        sampling_duration=1,
        base_delay=0,
    )
    request = httpx.Request("GET", URL)
    with pytest.raises(httpx.TimeoutException) as raised:
        await transport.handle_async_request(request)
    error = raised.value
    assert isinstance(error, TotalTimeoutError)
    # Attempt 1 ran 0.6 s, past its 0.5 s, and was retried; the second, bound
    # by the total's 1 s, ended at 1.2 s on the clock, which the message says.
    assert str(error).endswith("no response, timed out after 1.2 s (total timeout 1 s)")
    # Set by the transport itself, without httpx's client around it.
    assert error.request is request


def test_a_timeout_of_ours_from_the_transport_directly_carries_the_request() -> None:
    clock = FakeClock()

    def slow(request: httpx.Request) -> httpx.Response:
        clock.sleep_sync(11)
        return httpx.Response(200)

    request = httpx.Request("GET", URL)
    transport = sync_transport(slow, clock, max_retry_attempts=0)
    with pytest.raises(AttemptTimeoutError) as raised:
        transport.handle_request(request)
    assert raised.value.request is request
    assert "timed out after 11 s (attempt timeout 10 s)" in str(raised.value)


# --- against a real server ---------------------------------------------------


async def test_a_real_cut_is_ours_and_the_client_s_shorter_timeout_is_httpx_s(
    fault_server: FaultServer,
) -> None:
    url = f"{fault_server.url}/sleep/5?key=httpx-exceptions-cut"
    ours = AsyncResilientTransport(
        options=options(attempt_timeout=0.25, max_retry_attempts=0)
    )
    async with httpx.AsyncClient(transport=ours) as client:
        with pytest.raises(httpx.TimeoutException) as cut:
            await client.get(url)
    assert isinstance(cut.value, AttemptTimeoutError)
    assert cut.value.elapsed is not None
    assert cut.value.elapsed >= 0.25
    assert str(cut.value).endswith(
        f"attempt 1 timed out after {round(cut.value.elapsed, 3):g} s "
        "(attempt timeout 0.25 s)"
    )

    # The client's own 0.1 s read timeout, kept: it passes long before ours.
    theirs = AsyncResilientTransport(
        options=options(
            attempt_timeout=2, max_retry_attempts=0, own_transport_timeout=False
        )
    )
    async with httpx.AsyncClient(transport=theirs, timeout=0.1) as client:
        with pytest.raises(httpx.ReadTimeout) as early:
            await client.get(url)
    assert not isinstance(early.value, ResilienceError)
    assert "before its attempt timeout of 2 s passed" in early.value.__notes__[0]


def test_the_sync_client_s_real_cut_is_ours_too(fault_server: FaultServer) -> None:
    url = f"{fault_server.url}/sleep/5?key=httpx-exceptions-sync-cut"
    transport = ResilientTransport(
        options=options(attempt_timeout=0.25, max_retry_attempts=0)
    )
    with (
        httpx.Client(transport=transport) as client,
        pytest.raises(AttemptTimeoutError) as cut,
    ):
        client.get(url)
    assert cut.value.elapsed is not None
    assert cut.value.elapsed >= 0.25  # never before its time
    assert isinstance(cut.value.__cause__, httpx.ReadTimeout)
