"""Each attempt copies the caller's request: the body, its own headers and extensions.

The copy is made attribute by attribute while `httpx.Request` holds the
attributes it knows; an httpx that adds one gets the generic copy. Both are
held to the same rules here.
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from http_resilience import ResiliencePipeline, ResilientTransport
from http_resilience._core import send

URL = "http://attempts.invalid/items"


@pytest.fixture(params=["attribute by attribute", "generic"])
def copy_mode(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "generic":
        monkeypatch.setattr(send, "_PLAIN_REQUEST", False)
    return str(request.param)


def send_recorded(request: httpx.Request) -> httpx.Request:
    """Send `request` through an empty pipeline; the attempt the transport got."""
    seen: list[httpx.Request] = []

    def answer(attempt: httpx.Request) -> httpx.Response:
        seen.append(attempt)
        attempt.headers["x-added-by-the-transport"] = "1"
        attempt.extensions["added"] = True
        return httpx.Response(200, content=attempt.read())

    transport = ResilientTransport(
        httpx.MockTransport(answer), pipeline=ResiliencePipeline()
    )
    response = transport.handle_request(request)
    assert response.status_code == 200
    assert len(seen) == 1
    return seen[0]


def test_the_attempt_carries_the_callers_request_and_changes_none_of_it(
    copy_mode: str,
) -> None:
    request = httpx.Request(
        "PUT",
        URL + "?q=1",
        headers={"X-Caller": "yes"},
        content=b"payload",
        extensions={"trace": "kept"},
    )
    attempt = send_recorded(request)

    assert attempt is not request
    assert (attempt.method, attempt.url, attempt.content) == (
        "PUT",
        httpx.URL(URL + "?q=1"),
        b"payload",
    )
    assert attempt.stream is request.stream
    assert attempt.headers["x-caller"] == "yes"
    assert attempt.extensions["trace"] == "kept"
    assert send.LAYER_MARK in attempt.extensions
    # What the transport wrote went into the attempt alone.
    assert "x-added-by-the-transport" not in request.headers
    assert set(request.extensions) == {"trace"}
    assert set(vars(attempt)) == set(vars(request))


def test_a_body_not_read_yet_stays_unread_in_the_copy(copy_mode: str) -> None:
    def chunks() -> Iterator[bytes]:
        yield b"streamed "
        yield b"body"

    request = httpx.Request("POST", URL, content=chunks())
    assert not hasattr(request, "_content")

    attempt = send_recorded(request)

    assert attempt.content == b"streamed body"  # the transport read it
    assert not hasattr(request, "_content")  # into the attempt, not the caller's


def test_the_attribute_copy_is_used_with_the_httpx_under_test() -> None:
    # Should httpx add a request attribute, the generic copy takes over and
    # this says so: the figures in docs/performance.md assume the other.
    assert send._PLAIN_REQUEST  # pyright: ignore[reportPrivateUsage]
