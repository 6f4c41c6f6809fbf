"""What the HTTP layer gives up on after its own retries carries `resilience_final`.

The mark tells a retry outside (the mediator's) that this failure was already
retried as far as the client's policy goes. Only such failures carry it: an
answer that is no failure, or a failure of a request the client may not send
again, does not.
"""

from __future__ import annotations

import httpx
import pytest

from http_resilience import TotalTimeoutError
from http_resilience._core.classify import FINAL_MARK
from http_resilience._core.nested import caller_attempt_scope
from http_resilience.testing import FakeClock
from tests.http_resilience._support.scripted import URL, script, sync_transport


def get(transport: httpx.BaseTransport, method: str = "GET") -> httpx.Response:
    return transport.handle_request(httpx.Request(method, URL))


def test_the_last_answer_of_an_exhausted_call_is_marked() -> None:
    response = get(sync_transport(script(503), FakeClock()))
    assert response.extensions[FINAL_MARK] is True


def test_the_last_error_of_an_exhausted_call_is_marked() -> None:
    with pytest.raises(httpx.ConnectError) as raised:
        get(sync_transport(script(httpx.ConnectError("refused")), FakeClock()))
    assert getattr(raised.value, FINAL_MARK) is True


def test_a_retry_the_budget_refuses_leaves_the_answer_marked() -> None:
    transport = sync_transport(
        script(503), FakeClock(), retry_budget_ratio=0, retry_budget_min_per_second=0
    )
    assert get(transport).extensions[FINAL_MARK] is True


def test_a_total_timeout_is_marked() -> None:
    clock = FakeClock()

    def slow(request: httpx.Request) -> httpx.Response:
        clock.advance(11)
        return httpx.Response(200)

    with pytest.raises(TotalTimeoutError) as raised:
        get(sync_transport(slow, clock))
    assert getattr(raised.value, FINAL_MARK) is True


def test_what_was_not_retried_here_is_not_marked() -> None:
    ok = get(sync_transport(script(200), FakeClock()))
    assert FINAL_MARK not in ok.extensions
    # A POST without an Idempotency-Key is sent once: its 503 is not final for
    # a layer outside that knows the command is safe to repeat.
    posted = get(sync_transport(script(503), FakeClock()), "POST")
    assert FINAL_MARK not in posted.extensions
    not_found = get(sync_transport(script(404), FakeClock()))
    assert FINAL_MARK not in not_found.extensions


def test_a_failure_while_the_caller_retries_is_marked() -> None:
    # One attempt here, the caller's retry being the one: final for the
    # layers outside this call as well.
    with caller_attempt_scope(2):
        response = get(sync_transport(script(503), FakeClock()))
        with pytest.raises(httpx.ConnectError) as raised:
            get(sync_transport(script(httpx.ConnectError("refused")), FakeClock()))
    assert response.extensions[FINAL_MARK] is True
    assert getattr(raised.value, FINAL_MARK) is True
