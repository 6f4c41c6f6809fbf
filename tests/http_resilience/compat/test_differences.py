"""What differs from plain httpx on purpose, each with the switch that undoes it.

docs/httpx-compat.md explains each; these tests pin them both ways.
"""

from __future__ import annotations

from datetime import timedelta

import httpx
import pytest

from http_resilience import HttpResilienceOptions, ResilientTransport, create_client
from http_resilience.testing import FakeClock
from tests.http_resilience.compat.clients import (
    DEADLINE,
    QUICK,
    RESILIENT,
    RETRY_ATTEMPT,
    Kind,
    sync_client,
)

URL = "http://differences.test/items"


class Recorder:
    """Answers `statuses` in turn (the last repeats); keeps every request."""

    def __init__(self, *statuses: int) -> None:
        self.statuses = statuses
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        return httpx.Response(
            self.statuses[min(len(self.requests), len(self.statuses)) - 1]
        )


@pytest.mark.parametrize("kind", RESILIENT)
def test_each_attempt_carries_the_time_it_has_left(kind: Kind) -> None:
    recorder = Recorder(200)
    with sync_client(kind, httpx.MockTransport(recorder)) as client:
        client.get(URL)
    left = int(recorder.requests[0].headers[DEADLINE])
    assert 0 < left <= 30_000  # the total timeout's 30 s, in milliseconds


def test_deadline_header_none_sends_what_plain_httpx_sends() -> None:
    plain, ours = Recorder(200), Recorder(200)
    with httpx.Client(transport=httpx.MockTransport(plain)) as client:
        client.get(URL)
    with create_client(
        "compat", QUICK, transport=httpx.MockTransport(ours), deadline_header=None
    ) as client:
        client.get(URL)
    transport = ResilientTransport(httpx.MockTransport(ours), deadline_header=None)
    with httpx.Client(transport=transport) as client:
        client.get(URL)
    expected = plain.requests[0].headers.raw
    assert [request.headers.raw for request in ours.requests] == [expected, expected]


@pytest.mark.parametrize("kind", RESILIENT)
def test_a_retried_attempt_says_so_unless_told_not_to(kind: Kind) -> None:
    recorder = Recorder(503, 200)
    with sync_client(kind, httpx.MockTransport(recorder)) as client:
        client.get(URL)
    assert [r.headers.get(RETRY_ATTEMPT) for r in recorder.requests] == [None, "2"]
    quiet = HttpResilienceOptions(base_delay=timedelta(0), detect_nested_retries=False)
    recorder = Recorder(503, 200)
    with sync_client(kind, httpx.MockTransport(recorder), options=quiet) as client:
        client.get(URL)
    assert [r.headers.get(RETRY_ATTEMPT) for r in recorder.requests] == [None, None]


@pytest.mark.parametrize("kind", RESILIENT)
def test_the_policy_owns_the_httpx_timeouts_unless_told_not_to(kind: Kind) -> None:
    recorder = Recorder(200)
    with sync_client(kind, httpx.MockTransport(recorder), timeout=1.5) as client:
        client.get(URL)
        client.get(URL, timeout=0.5)
    owned = {"connect": 10.0, "read": 10.0, "write": 10.0, "pool": 9.9}
    assert [r.extensions["timeout"] for r in recorder.requests] == [owned, owned]
    callers = HttpResilienceOptions(own_transport_timeout=False)
    recorder = Recorder(200)
    with sync_client(
        kind, httpx.MockTransport(recorder), options=callers, timeout=1.5
    ) as client:
        client.get(URL)
        client.get(URL, timeout=0.5)
    assert [r.extensions["timeout"] for r in recorder.requests] == [
        httpx.Timeout(1.5).as_dict(),
        httpx.Timeout(0.5).as_dict(),
    ]


@pytest.mark.parametrize("kind", RESILIENT)
def test_a_post_is_sent_once_unless_it_may_be_repeated(kind: Kind) -> None:
    recorder = Recorder(503)
    with sync_client(kind, httpx.MockTransport(recorder)) as client:
        assert client.post(URL, json={}).status_code == 503
        assert len(recorder.requests) == 1  # as plain httpx: once
        keyed = client.post(URL, json={}, headers={"Idempotency-Key": "k-1"})
    assert (keyed.status_code, len(recorder.requests)) == (503, 1 + 4)
    unsafe = HttpResilienceOptions(base_delay=timedelta(0), retry_unsafe_methods=True)
    recorder = Recorder(503, 201)
    with sync_client(kind, httpx.MockTransport(recorder), options=unsafe) as client:
        assert client.post(URL, json={}).status_code == 201


@pytest.mark.parametrize("kind", RESILIENT)
def test_an_answer_a_retry_superseded_never_reaches_the_client(kind: Kind) -> None:
    def server(request: httpx.Request) -> httpx.Response:
        first = not request.headers.get(RETRY_ATTEMPT)
        cookie = "superseded=1" if first else "kept=1"
        return httpx.Response(503 if first else 200, headers={"set-cookie": cookie})

    seen: list[int] = []

    def on_response(response: httpx.Response) -> None:
        seen.append(response.status_code)

    with sync_client(
        kind,
        httpx.MockTransport(server),
        event_hooks={"response": [on_response]},
    ) as client:
        client.get(URL)
        assert dict(client.cookies) == {"kept": "1"}
    assert seen == [200]


def test_the_retries_wait_on_the_clock_they_are_given() -> None:
    # The waits a plain client never makes: one per retry, on the pipeline's clock.
    clock = FakeClock()
    recorder = Recorder(503, 503, 200)
    with create_client(
        "compat", transport=httpx.MockTransport(recorder), clock=clock
    ) as client:
        assert client.get(URL).status_code == 200
    assert len(clock.sleeps) == 2
