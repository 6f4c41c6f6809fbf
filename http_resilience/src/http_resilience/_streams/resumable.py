"""`resumable_bytes`: an httpx response body that continues where it broke.

On a break the body is asked for again with `Range: bytes=N-` and `If-Range`,
N being the bytes already passed on; a `206` whose `Content-Range` starts at N
is stitched on. Built on the stream retry loop, counting bytes, not chunks.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator

import httpx

from http_resilience._streams.decision import StreamRetryContext
from http_resilience._streams.download import check_client, download_and_decision
from http_resilience._streams.options import StreamRetryOptions
from http_resilience._streams.retry import retry_stream

__all__ = ["resumable_bytes"]


def resumable_bytes(
    client: httpx.AsyncClient,
    request: httpx.Request | httpx.URL | str,
    options: StreamRetryOptions | None = None,
    *,
    chunk_size: int | None = None,
) -> AsyncGenerator[bytes, None]:
    """Stream a response body, resuming with `Range` where it broke.

    The first attempt sends `request`. When the body breaks (an
    `httpx.TransportError` such as `RemoteProtocolError` or `ReadError` as the
    server closes the connection), it is asked for again with
    `Range: bytes=N-`, N being the bytes already yielded, and `If-Range` with
    the first response's strong ETag, else its Last-Modified. A `206` whose
    `Content-Range` starts at N is passed on from there: the consumer sees one
    unbroken body.

    When the bytes cannot be stitched (a plain `200`, which is also how a
    server answers a changed validator, a `416`, a `206` from elsewhere, or no
    validator to resume against), `partial_stream_policy` decides:
    `RETHROW_MID_STREAM` (default) re-raises the break, with a note saying
    why; `RESTART_FROM_START` starts the body over, and the consumer then
    receives bytes again from byte 0 of the new body.

    Each break uses one of `max_retry_attempts` (for the whole download); a
    failing status raises `httpx.HTTPStatusError`, which the default
    `should_retry` retries too. Bytes are yielded as sent (`iter_raw`): given a
    URL, `Accept-Encoding: identity` is asked, so that is the body itself.
    Every response is closed on every path.

    Args:
        client: Sends every attempt; its redirects, auth and timeouts apply.
        request: A GET `httpx.Request` without `Range`, or a URL to GET.
        options: How to retry; default `StreamRetryOptions()`.
        chunk_size: Bytes per chunk yielded; default as the server sends them.

    Returns:
        An async generator of the body's bytes, in chunks.

    Raises:
        TypeError: At the call, for a wrong type of `request` or `options`.
        ValueError: At the call, for a method other than GET, or a request
            that already has a `Range` header.
        httpx.HTTPError: When iterated, the failure that ended the download.

    Example:
        >>> async def save(client: httpx.AsyncClient, url: str, path: str) -> None:
        ...     with open(path, "wb") as file:
        ...         async for chunk in resumable_bytes(client, url):
        ...             file.write(chunk)
    """
    check_client(client, httpx.AsyncClient, "resumable_bytes")
    download, decision, checked = download_and_decision(
        client, request, options, "resumable_bytes"
    )

    async def attempt(context: StreamRetryContext) -> AsyncGenerator[bytes, None]:
        try:
            sent = download.prepare(context.items_yielded)
            if sent is None:
                return
            response = await client.send(sent, stream=True)
            try:
                if not download.accept(response, context.items_yielded):
                    await response.aclose()
                    response = await client.send(download.request, stream=True)
                    download.accept(response, context.items_yielded)
                async for chunk in response.aiter_raw(chunk_size):
                    yield chunk
            finally:
                await response.aclose()
        except Exception as exc:
            download.last_failure = exc
            raise

    return retry_stream(attempt, decision, checked.clock, len)
