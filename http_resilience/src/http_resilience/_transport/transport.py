"""`AsyncResilientTransport` and `ResilientTransport`: the standard pipeline.

A resilient transport wraps any httpx transport and runs each request through
the standard pipeline, outermost first: concurrency limiter, total timeout,
retry, circuit breaker, attempt timeout; or through a `ResiliencePipeline` of
your own. Either way the builder chains the steps' strategies once per
transport (the standard pipeline is its preset, `standard_steps`); the two
transports are thin drivers that build a `Call` per request and hand it to
the chain.
"""

from __future__ import annotations

import threading
from types import TracebackType
from typing import Self

import httpx

from http_resilience._core.backend import current_task
from http_resilience._core.builder import build_async, build_sync
from http_resilience._core.call import AsyncHandler, SyncHandler
from http_resilience._core.observed import observe_async, observe_sync
from http_resilience._core.send import AsyncSend, SyncSend
from http_resilience._transport.resilient import Colour, Resilient, own_request

__all__ = ["AsyncResilientTransport", "ResilientTransport"]


class AsyncResilientTransport(
    Resilient[httpx.AsyncBaseTransport, AsyncHandler], httpx.AsyncBaseTransport
):
    """An httpx async transport that runs every request through the standard pipeline.

    Outermost first: concurrency limiter, total timeout, retry, circuit breaker
    (per host by default), attempt timeout; see `HttpResilienceOptions` for
    each. Keep one per client for the life of the process: the breakers live
    here, and a transport rebuilt per call forgets them.

    A request that keeps failing returns its last response; a transport
    failure on the last attempt is raised. Responses a retry supersedes are
    closed. Every attempt is a fresh request; a one-shot body (a generator, an
    async iterator, a file-like stream) is sent once and never retried. With
    `own_transport_timeout` each attempt's httpx timeouts are set from its own
    deadline, so the client's ``timeout=`` neither cuts an attempt short nor
    outlasts it.

    Give `pipeline` instead of `options` to run strategies of your own, in
    your own order (`ResiliencePipeline`), hedging included.

    It runs on asyncio or trio, on one event loop at a time.

    Args:
        inner: The transport that sends; default `httpx.AsyncHTTPTransport()`.
        options: The standard pipeline's options. When None (and no
            `pipeline`), they are read for `name` from `config` and
            ``RESILIENCE__HTTP__...`` environment variables (see
            `HttpResilienceOptions.from_config`).
        pipeline: A custom pipeline to run instead of the standard one.
        config: The whole configuration mapping, read when `options` is None.
        name: The client's name, in events, logs and errors.
        clock: Where time is read and waits happen; `FakeClock` in tests.
        listeners: Called with every event (`HttpEventListener`); one that
            also has ``request_started`` is told when each call starts
            (``http_resilience.otel.HttpTracing`` opens its span there).
        random: Returns a float in [0, 1) for the retry jitter.
        deadline_header: The header each attempt carries with the
            milliseconds its deadline leaves it (an integer), for the server
            to stop in time; None sends none. Default
            ``X-Request-Timeout-Ms``.
        shared: A `SharedState`: the retry budget and the breakers are
            shared with every replica using the same client name (the
            ``redis`` extra). None: this process only.
        _stamp: Internal: what an `HttpClientFactory` client runs on every
            attempt before it is sent (writes the call's correlation id).

    Raises:
        ResilienceLayerError: `inner` is already resilient; on a request, if it
            is an attempt of another resilient transport (hidden behind a
            wrapper) running in the same task.
        TypeError: `inner` is not an async transport, `options` is not
            `HttpResilienceOptions`, or `pipeline` is given with `options` or
            `config`.
        pydantic.ValidationError: The configuration is invalid, naming `name`.

    Attributes:
        options: The standard pipeline's options; None with a `pipeline`.
        pipeline: The custom pipeline; None for the standard one.

    Example:
        >>> import asyncio
        >>> transport = AsyncResilientTransport(
        ...     httpx.MockTransport(lambda request: httpx.Response(200)),
        ...     name="inventory",
        ... )
        >>> async def main() -> int:
        ...     async with httpx.AsyncClient(transport=transport) as client:
        ...         return (await client.get("http://inventory.local/items")).status_code
        >>> asyncio.run(main())
        200
    """

    _colour = Colour(
        httpx.AsyncHTTPTransport, AsyncSend, build_async, observe_async, sync=False
    )

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        """Send `request` through the pipeline.

        Raises:
            BrokenCircuitError: The host's circuit is open; nothing was sent.
            RateLimitedError: The concurrency limit and its queue are full.
            AttemptTimeoutError: The last attempt ran out of its time (an
                `httpx.TimeoutException` too).
            TotalTimeoutError: The call ran out of its total time (an
                `httpx.TimeoutException` too).
            httpx.TransportError: The last attempt failed in transport; an
                httpx timeout raised before the deadline passed is raised as
                the wrapped transport raised it, a note naming the attempt.
            ResilienceLayerError: The request is an attempt of another
                resilient transport: a second layer.
        """
        try:
            return await self._chain.handle(request, self._call(request, current_task))
        except httpx.RequestError as exc:
            own_request(exc, request)
            raise

    async def __aenter__(self) -> Self:
        """Enter the wrapped transport's context too (once); return this transport.

        ``async with httpx.AsyncClient(transport=...)`` enters it this way.
        """
        if self._enters():
            await self._inner.__aenter__()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None = None,
        exc_value: BaseException | None = None,
        traceback: TracebackType | None = None,
    ) -> None:
        """Exit the wrapped transport's context (once); detach from `SharedState`.

        Without an `__aenter__` before it, this closes the wrapped transport,
        as httpx's transports do.
        """
        if self._exits():
            await self._inner.__aexit__(exc_type, exc_value, traceback)
        elif not self._entered:
            await self.aclose()

    async def aclose(self) -> None:
        """Close the wrapped transport (once); detach from the `SharedState`, if any.

        Once the wrapped transport's context was exited, which closed it, this
        does nothing more.
        """
        if self._closes():
            await self._inner.aclose()


class ResilientTransport(
    Resilient[httpx.BaseTransport, SyncHandler], httpx.BaseTransport
):
    """The sync twin of `AsyncResilientTransport`, for `httpx.Client`.

    The same pipeline and options; safe to share between threads (the breakers
    and the limiter take a lock). A sync attempt cannot be cancelled, so it is
    held to its deadline from inside: when `inner` is an `httpx.HTTPTransport`
    (the default), every connect, TLS handshake, socket read and write of an
    attempt waits at most for the time left, so a server that sends its
    answer's head a byte at a time cannot hold the attempt past its deadline.
    Around any other transport an attempt is bounded by the httpx timeouts
    the pipeline sets from its deadline (`own_transport_timeout`), each of
    which a slow server can restart with every byte. Either way an answer
    that arrives past the deadline counts as a timeout.

    Args:
        inner: The transport that sends; default `httpx.HTTPTransport()`.
        options: As for `AsyncResilientTransport`.
        pipeline: As for `AsyncResilientTransport`, without hedging.
        config: As for `AsyncResilientTransport`.
        name: As for `AsyncResilientTransport`.
        clock: As for `AsyncResilientTransport`; waits use `sleep_sync`.
        listeners: As for `AsyncResilientTransport`.
        random: As for `AsyncResilientTransport`.
        shared: As for `AsyncResilientTransport`.
        _stamp: As for `AsyncResilientTransport`.

    Raises:
        ResilienceLayerError: As for `AsyncResilientTransport`.
        TypeError: `inner` is not a sync transport, `options` is not
            `HttpResilienceOptions`, `pipeline` is given with `options` or
            `config`, or `pipeline` hedges (a blocking attempt cannot be
            cancelled, so a hedge's loser would run on to its end).
        pydantic.ValidationError: The configuration is invalid, naming `name`.

    Example:
        >>> transport = ResilientTransport(
        ...     httpx.MockTransport(lambda request: httpx.Response(204)),
        ... )
        >>> with httpx.Client(transport=transport) as client:
        ...     client.delete("http://inventory.local/items/7").status_code
        204
    """

    _colour = Colour(httpx.HTTPTransport, SyncSend, build_sync, observe_sync, sync=True)

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        """Send `request` through the pipeline; raises as the async twin does."""
        try:
            return self._chain.handle_sync(
                request, self._call(request, threading.get_ident)
            )
        except httpx.RequestError as exc:
            own_request(exc, request)
            raise

    def __enter__(self) -> Self:
        """As `AsyncResilientTransport.__aenter__`, for ``with httpx.Client(...)``."""
        if self._enters():
            self._inner.__enter__()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None = None,
        exc_value: BaseException | None = None,
        traceback: TracebackType | None = None,
    ) -> None:
        """As `AsyncResilientTransport.__aexit__`; without `__enter__`, `close`."""
        if self._exits():
            self._inner.__exit__(exc_type, exc_value, traceback)
        elif not self._entered:
            self.close()

    def close(self) -> None:
        """As `AsyncResilientTransport.aclose`: the wrapped transport, once."""
        if self._closes():
            self._inner.close()
