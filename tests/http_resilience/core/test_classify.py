"""What counts as a failure; which methods and bodies may be sent again."""

from __future__ import annotations

import io
from collections.abc import AsyncIterator, Iterator
from typing import IO, cast

import httpx
import pytest

from http_resilience import AttemptTimeoutError, BrokenCircuitError, TotalTimeoutError
from http_resilience._core.classify import (
    SAFE_METHODS,
    UNSAFE_METHODS,
    has_idempotency_key,
    is_failure,
    is_failure_status,
    is_replayable,
    may_retry,
)

FAILURES = {408, 429, *range(500, 600)} - {501, 505}


def test_failure_statuses_are_408_429_and_5xx_but_501_and_505() -> None:
    assert {code for code in range(100, 600) if is_failure_status(code)} == FAILURES


@pytest.mark.parametrize(
    "failure",
    [
        httpx.ConnectError("refused"),
        httpx.ReadTimeout("slow"),
        httpx.RemoteProtocolError("closed"),
        AttemptTimeoutError("attempt"),
    ],
)
def test_transport_errors_and_attempt_timeouts_are_failures(
    failure: Exception,
) -> None:
    assert is_failure(failure)


@pytest.mark.parametrize(
    "other",
    [
        ValueError("a bug"),
        TotalTimeoutError("total"),
        BrokenCircuitError("open"),
        httpx.HTTPStatusError(
            "raised by the caller",
            request=httpx.Request("GET", "http://x"),
            response=httpx.Response(503),
        ),
    ],
)
def test_other_exceptions_are_not_failures(other: Exception) -> None:
    assert not is_failure(other)


def test_responses_are_classified_by_status() -> None:
    assert is_failure(httpx.Response(503))
    assert not is_failure(httpx.Response(501))
    assert not is_failure(httpx.Response(404))


def test_the_method_sets() -> None:
    assert {"GET", "HEAD", "OPTIONS", "TRACE", "PUT", "DELETE"} == SAFE_METHODS
    assert {"POST", "PATCH", "CONNECT"} == UNSAFE_METHODS


@pytest.mark.parametrize("method", sorted(SAFE_METHODS))
def test_safe_and_idempotent_methods_may_be_retried(method: str) -> None:
    request = httpx.Request(method, "http://x/")
    assert may_retry(request, retry_unsafe_methods=False)


@pytest.mark.parametrize("method", [*sorted(UNSAFE_METHODS), "PROPFIND", "QUERY"])
def test_unsafe_and_unknown_methods_need_permission(method: str) -> None:
    request = httpx.Request(method, "http://x/")
    assert not may_retry(request, retry_unsafe_methods=False)
    assert may_retry(request, retry_unsafe_methods=True)
    request.headers["Idempotency-Key"] = "k-1"
    assert may_retry(request, retry_unsafe_methods=False)


def test_an_empty_idempotency_key_does_not_count() -> None:
    request = httpx.Request("POST", "http://x/", headers={"idempotency-key": "  "})
    assert not has_idempotency_key(request)
    assert not may_retry(request, retry_unsafe_methods=False)


def gen() -> Iterator[bytes]:
    yield b"a"


async def agen() -> AsyncIterator[bytes]:
    yield b"a"


@pytest.mark.parametrize(
    "request_",
    [
        httpx.Request("PUT", "http://x/"),
        httpx.Request("PUT", "http://x/", content=b"bytes"),
        httpx.Request("PUT", "http://x/", content="text"),
        httpx.Request("PUT", "http://x/", json={"item": "book"}),
        httpx.Request("PUT", "http://x/", data={"a": "1"}),
        httpx.Request("PUT", "http://x/", files={"f": b"file bytes"}),
        httpx.Request("PUT", "http://x/", files={"f": ("n.txt", io.BytesIO(b"x"))}),
        httpx.Request("PUT", "http://x/", data={"a": "1"}, files={"f": "text"}),
    ],
    ids=["empty", "bytes", "str", "json", "form", "file-bytes", "file-io", "mixed"],
)
def test_replayable_bodies(request_: httpx.Request) -> None:
    assert is_replayable(request_.stream)
    assert may_retry(request_, retry_unsafe_methods=False)


class Unseekable(io.RawIOBase):
    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return False

    def readinto(self, buffer: bytearray | memoryview) -> int:  # type: ignore[override]
        return 0


class SeekableRaises(Unseekable):
    def seekable(self) -> bool:
        raise OSError("cannot tell")


@pytest.mark.parametrize(
    "request_",
    [
        httpx.Request("PUT", "http://x/", content=gen()),
        httpx.Request("PUT", "http://x/", content=agen()),
        httpx.Request("PUT", "http://x/", content=io.BytesIO(b"a file")),
        httpx.Request("PUT", "http://x/", content=iter([b"a", b"b"])),
        httpx.Request(
            "PUT", "http://x/", files={"f": ("n", cast(IO[bytes], Unseekable()))}
        ),
        httpx.Request(
            "PUT", "http://x/", files={"f": ("n", cast(IO[bytes], SeekableRaises()))}
        ),
    ],
    ids=["generator", "async-generator", "file", "iterator", "unseekable", "raises"],
)
def test_one_shot_bodies_are_not_replayable(request_: httpx.Request) -> None:
    assert not is_replayable(request_.stream)
    assert not may_retry(request_, retry_unsafe_methods=True)


def test_a_read_streaming_request_becomes_replayable() -> None:
    request = httpx.Request("PUT", "http://x/", content=gen())
    request.read()
    assert is_replayable(request.stream)


def test_an_unknown_stream_type_is_one_shot() -> None:
    class Custom(httpx.SyncByteStream):
        def __iter__(self) -> Iterator[bytes]:
            yield b"x"

    assert not is_replayable(Custom())
