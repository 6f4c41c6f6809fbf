"""Streams that break half-way: retried, re-raised, resumed.

Run it with ``make demo`` (or ``python samples/stream_retry/main.py``). Offline:
the "server" is an `httpx.MockTransport` function in this file that cuts its
first response, as a server closing the connection would.
"""

import asyncio
import hashlib
import logging
import random
import sys
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from datetime import timedelta

import httpx

from http_resilience import (
    PartialStreamPolicy,
    StreamRetryContext,
    StreamRetryOptions,
    resumable_bytes,
    with_retry,
)

WORDS = ["The", "quick", "brown", "fox", "jumps"]

# Short real waits, no jitter: the demo is quick and prints the same every time.
QUICK = StreamRetryOptions(base_delay=timedelta(milliseconds=5), use_jitter=False)
RESUMING = StreamRetryOptions(
    base_delay=timedelta(milliseconds=5),
    use_jitter=False,
    partial_stream_policy=PartialStreamPolicy.RESTART_FROM_START,
)


Factory = Callable[[StreamRetryContext], AsyncGenerator[str, None]]


def flaky_words(break_at: dict[int, int]) -> Factory:
    """A factory whose attempt n breaks after `break_at[n]` words."""

    async def words(context: StreamRetryContext) -> AsyncGenerator[str, None]:
        start = context.items_yielded
        print(f"   attempt {context.attempt_number} starts at word {start}")
        for position, word in enumerate(WORDS[start:]):
            if break_at.get(context.attempt_number) == position:
                print(f"   attempt {context.attempt_number} breaks")
                raise ConnectionResetError("the connection was reset")
            yield word

    return words


async def show(stream: AsyncIterator[str]) -> None:
    received: list[str] = []
    try:
        async for word in stream:
            received.append(word)
    except ConnectionResetError as failure:
        print(f"   received: {' '.join(received)}")
        print(f"   re-raised: {type(failure).__name__}: {failure}")
        return
    print(f"   received: {' '.join(received)}")


async def words_demos() -> None:
    print("1. a source that fails before its first word is asked again")
    await show(with_retry(flaky_words({1: 0}), QUICK))

    print("2. a break after words were passed on is re-raised (RETHROW_MID_STREAM)")
    await show(with_retry(flaky_words({1: 2}), QUICK))

    print("3. RESTART_FROM_START, the source resuming from items_yielded")
    await show(with_retry(flaky_words({1: 2, 2: 1}), RESUMING))


# --- a download that breaks and resumes ---------------------------------------------

BODY = random.Random(6).randbytes(1_000_000)
ETAG = '"v1"'
CUT_AT = 300_000


class CutBody(httpx.AsyncByteStream):
    """A response body that stops after `cut` bytes, as a dropped connection."""

    def __init__(self, data: bytes, cut: int | None) -> None:
        self.data = data
        self.cut = cut

    async def __aiter__(self) -> AsyncIterator[bytes]:
        end = len(self.data) if self.cut is None else self.cut
        for start in range(0, end, 64_000):
            yield self.data[start : min(start + 64_000, end)]
        if self.cut is not None:
            raise httpx.RemoteProtocolError("peer closed connection")


def file_server(honours_range: bool) -> httpx.MockTransport:
    """Serves BODY; cuts the first response at CUT_AT; prints each request."""
    served: list[httpx.Request] = []

    def handle(request: httpx.Request) -> httpx.Response:
        served.append(request)
        first = len(served) == 1
        asked = request.headers.get("Range")
        start, status = 0, 200
        headers = {"ETag": ETAG}
        if honours_range and asked and request.headers.get("If-Range") == ETAG:
            start, status = int(asked.removeprefix("bytes=").rstrip("-")), 206
            headers["Content-Range"] = f"bytes {start}-{len(BODY) - 1}/{len(BODY)}"
        data = BODY[start:]
        headers["Content-Length"] = str(len(data))
        line = f"GET {request.url.path}"
        if asked:
            line += f" with Range: {asked} and If-Range: {request.headers['If-Range']}"
        line += f" -> {status}"
        if first:
            line += f", then the connection drops at byte {CUT_AT:,}"
        print(f"   {line}")
        return httpx.Response(
            status, headers=headers, stream=CutBody(data, CUT_AT if first else None)
        )

    return httpx.MockTransport(handle)


async def download(honours_range: bool, options: StreamRetryOptions) -> None:
    transport = file_server(honours_range)
    received = bytearray()
    async with httpx.AsyncClient(transport=transport) as client:
        try:
            async for chunk in resumable_bytes(
                client, "http://files.example/big.bin", options
            ):
                received += chunk
        except httpx.RemoteProtocolError as failure:
            print(f"   received {len(received):,} bytes, then re-raised: {failure}")
            print(f"   why: {failure.__notes__[0]}")
            return
    # After a restart the body came again from byte 0: the file is the tail.
    same = (
        hashlib.sha256(received[-len(BODY) :]).digest() == hashlib.sha256(BODY).digest()
    )
    print(f"   received {len(received):,} bytes; the file's sha256 matches: {same}")


async def download_demos() -> None:
    print("4. resumable_bytes: a 1,000,000-byte download continues with Range")
    await download(honours_range=True, options=QUICK)
    print("5. a server that ignores Range: the break is re-raised by default")
    await download(honours_range=False, options=QUICK)
    print("6. ... or, under RESTART_FROM_START, the body starts over from byte 0")
    await download(honours_range=False, options=RESUMING)


async def main() -> None:
    await words_demos()
    await download_demos()


if __name__ == "__main__":
    # http_resilience logs each retry (the failure's type, never its message).
    logging.basicConfig(
        level=logging.WARNING, format="   [log] %(message)s", stream=sys.stdout
    )
    asyncio.run(main())
