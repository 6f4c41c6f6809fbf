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

import random as _random
import threading
from collections.abc import Callable, Mapping, Sequence
from types import TracebackType
from typing import Any, Self, TypeVar

import httpx

from http_resilience._core.backend import current_task
from http_resilience._core.builder import (
    BuildContext,
    BuiltPipeline,
    StepOptions,
    build_async,
    build_sync,
)
from http_resilience._core.clock import SYSTEM_CLOCK, Clock, reader
from http_resilience._core.deadline import DEADLINE_HEADER, scope_deadline
from http_resilience._core.errors import ResilienceLayerError
from http_resilience._core.events import HttpEventListener
from http_resilience._core.hosts import host_key
from http_resilience._core.observed import observe_async, observe_sync
from http_resilience._core.pipeline import (
    LAYER_MARK,
    AsyncHandler,
    AsyncSend,
    Call,
    DeadlineTeller,
    Stamp,
    SyncHandler,
    SyncSend,
    deadline_teller,
    marked_by,
)
from http_resilience._core.raw_headers import is_token
from http_resilience._core.telemetry import Telemetry
from http_resilience._fleet.builders import fleet_overrides
from http_resilience._fleet.link import ClientShare
from http_resilience._fleet.state import SharedState
from http_resilience._pipelines.custom import ResiliencePipeline
from http_resilience._pipelines.standard import (
    HttpResilienceOptions,
    apply_environment,
    standard_steps,
)
from http_resilience._transports.sync_deadline import hold_deadlines

__all__ = [
    "AsyncResilientTransport",
    "ResilientTransport",
    "check_deadline_header",
    "refuse_second_layer",
    "resolve_options",
    "resolve_pipeline",
]


InnerT = TypeVar("InnerT", httpx.AsyncBaseTransport, httpx.BaseTransport)


def refuse_second_layer(inner: object, name: str) -> None:
    """Raise `ResilienceLayerError` if `inner` is a resilient transport."""
    if isinstance(inner, _Resilient):
        raise ResilienceLayerError(
            f"HTTP client {name!r}: the transport is already resilient "
            f"(client {inner.name!r}); one resilience layer per client, or "
            "retries multiply"
        )


def _inner_or_default(
    inner: object,
    name: str,
    kind: type[InnerT],
    default: Callable[[], InnerT],
    wraps: str,
) -> InnerT:
    """`inner`, or a `default()` one when None; refused when of the wrong `kind`.

    Raises:
        ResilienceLayerError: `inner` is already resilient.
        TypeError: `inner` is not a `kind` (the message says what `wraps`).
    """
    refuse_second_layer(inner, name)
    if inner is None:
        return default()
    if not isinstance(inner, kind):
        raise TypeError(
            f"HTTP client {name!r}: {wraps}, got {type(inner).__qualname__}"
        )
    return inner


def _teller(header: object, clock: Clock | None, name: str) -> DeadlineTeller | None:
    """What writes the attempt's time left into `header`; None for no header.

    Raises:
        TypeError: `header` is neither None nor a string.
        ValueError: `header` is not an HTTP header name.
    """
    checked = check_deadline_header(header, name)
    if checked is None:
        return None
    return deadline_teller(checked, reader(clock or SYSTEM_CLOCK))


def check_deadline_header(header: object, name: str) -> str | None:
    """`header`, checked as client `name`'s ``deadline_header``.

    Raises:
        TypeError: `header` is neither None nor a string.
        ValueError: `header` is not an HTTP header name.
    """
    if header is None:
        return None
    if not isinstance(header, str):
        raise TypeError(
            f"HTTP client {name!r}: deadline_header must be a header name or "
            f"None, got {type(header).__qualname__}"
        )
    if not is_token(header):
        raise ValueError(
            f"HTTP client {name!r}: deadline_header {header!r} is not an HTTP "
            "header name"
        )
    return header


def resolve_options(
    options: object, config: Mapping[str, Any] | None, name: str
) -> HttpResilienceOptions:
    """`options`, or the client's options read from `config` and the environment.

    Raises:
        TypeError: `options` is neither None nor `HttpResilienceOptions`.
        pydantic.ValidationError: The configuration is invalid (names `name`).
    """
    if options is None:
        return HttpResilienceOptions.from_config(config, client=name)
    if not isinstance(options, HttpResilienceOptions):
        raise TypeError(
            f"HTTP client {name!r}: options must be HttpResilienceOptions or None, "
            f"got {type(options).__qualname__}"
        )
    # The operator's environment variables apply on top of options in code.
    return apply_environment(options, client=name)


def resolve_pipeline(
    pipeline: object, options: object, config: object, name: str, *, sync: bool
) -> ResiliencePipeline:
    """`pipeline`, checked for the transport it goes to.

    Raises:
        TypeError: `options` or `config` given as well (they configure the
            standard pipeline), `pipeline` is not a `ResiliencePipeline`, or it
            hedges and the client is sync.
    """
    if options is not None:
        raise TypeError(
            f"HTTP client {name!r}: give options= (the standard pipeline) or "
            "pipeline= (your own), not both"
        )
    if config is not None:
        raise TypeError(
            f"HTTP client {name!r}: config= configures the standard pipeline; "
            "a pipeline= carries its own options"
        )
    if not isinstance(pipeline, ResiliencePipeline):
        raise TypeError(
            f"HTTP client {name!r}: pipeline must be a ResiliencePipeline, "
            f"got {type(pipeline).__qualname__}"
        )
    if sync and pipeline.async_only:
        raise TypeError(
            f"HTTP client {name!r}: hedging needs an async client; a sync "
            "attempt cannot be cancelled, so a hedge's loser would run to its end"
        )
    return pipeline


class _Resilient:
    """What the two transports share: options, decision, chain, layer checks."""

    name: str
    options: HttpResilienceOptions | None
    pipeline: ResiliencePipeline | None
    _will_retry: Callable[[httpx.Request], bool]
    _built: BuiltPipeline[Any]

    @property
    def strategies(self) -> tuple[object, ...]:
        """The strategies this transport built, outermost first.

        What `http_resilience.health` and `CircuitControl` read; the transport
        sends through them, never you.
        """
        return self._built.strategies

    def _steps(
        self,
        options: object,
        config: Mapping[str, Any] | None,
        name: str,
        listeners: Sequence[HttpEventListener],
        pipeline: object,
    ) -> tuple[StepOptions, ...]:
        """The steps to build: the custom pipeline's, or the standard preset's."""
        self.name = name
        self._telemetry = Telemetry(name, listeners)
        if pipeline is not None:
            self.pipeline = resolve_pipeline(
                pipeline,
                options,
                config,
                name,
                sync=isinstance(self, httpx.BaseTransport),
            )
            self.options = None
            return self.pipeline.steps
        self.pipeline = None
        self.options = resolve_options(options, config, name)
        return standard_steps(self.options)

    def _buffer(self) -> int | None:
        """The bound on a body read inside its attempt; None: bodies are not."""
        options = self.options
        if options is None or not options.buffer_responses:
            return None
        return options.max_buffered_bytes

    def _context(
        self,
        clock: Clock | None,
        random: Callable[[], float] | None,
        shared: SharedState | None,
    ) -> BuildContext:
        self._now = reader(clock or SYSTEM_CLOCK)
        self._share: ClientShare | None = None
        if shared is not None:
            if not isinstance(shared, SharedState):  # pyright: ignore[reportUnnecessaryIsInstance]
                raise TypeError(
                    f"HTTP client {self.name!r}: shared must be a SharedState or "
                    f"None, got {type(shared).__qualname__}"
                )
            self._share = shared.attach(self.name)
        return BuildContext(
            clock or SYSTEM_CLOCK,
            self._telemetry,
            random or _random.random,
            {} if self._share is None else fleet_overrides(self._share),
        )

    def _detach(self) -> None:
        share, self._share = self._share, None
        if share is not None:
            share.close()

    # The wrapped transport's context and close, each used at most once: its
    # context is entered with ours and exited with ours; `close` alone closes
    # it, but not once its context was exited (that closed it).
    _entered = False
    _exited = False
    _closed = False

    def _enters(self) -> bool:
        """Whether the wrapped transport's context is to be entered now."""
        if self._entered:
            return False
        self._entered = True
        return True

    def _exits(self) -> bool:
        """Whether the wrapped transport's context is to be exited now."""
        self._detach()
        if not self._entered or self._exited:
            return False
        self._exited = True
        return True

    def _closes(self) -> bool:
        """Whether the wrapped transport is to be closed now."""
        self._detach()
        if self._closed or self._exited:
            return False
        self._closed = True
        return True

    def will_retry(self, request: httpx.Request) -> bool:
        """Whether a failed attempt of `request` would be sent again.

        True when retries are on, the method is safe or idempotent (or unsafe
        methods are allowed, or the request has an ``Idempotency-Key``), and
        the body can be replayed. Says nothing of time or the breaker. With a
        custom pipeline: whether one of its retries would, or its hedging
        could send it more than once.
        """
        return self._will_retry(request)

    def _call(self, request: httpx.Request, owner: Callable[[], object]) -> Call:
        # A mark is rare: looking up who runs this call is paid for only then.
        if LAYER_MARK in request.extensions and marked_by(request, owner()):
            raise ResilienceLayerError(
                f"HTTP client {self.name!r}: this request is an attempt of another "
                "resilient transport; one resilience layer per client, or retries "
                "multiply"
            )
        call = Call(self.name, request.method, host_key(request.url))
        scope = scope_deadline()
        if scope is not None:
            # Inside a deadline scope: the call has at most the time it leaves.
            deadline, read = scope
            left = deadline - read()
            call.deadline = self._now() + (left if left > 0.0 else 0.0)
            call.deadline_span = left if left > 0.0 else 0.0
        return call

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r})"


class AsyncResilientTransport(_Resilient, httpx.AsyncBaseTransport):
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

    def __init__(
        self,
        inner: httpx.AsyncBaseTransport | None = None,
        *,
        options: HttpResilienceOptions | None = None,
        pipeline: ResiliencePipeline | None = None,
        config: Mapping[str, Any] | None = None,
        name: str = "default",
        clock: Clock | None = None,
        listeners: Sequence[HttpEventListener] = (),
        random: Callable[[], float] | None = None,
        deadline_header: str | None = DEADLINE_HEADER,
        shared: SharedState | None = None,
        _stamp: Stamp | None = None,
    ) -> None:
        inner = _inner_or_default(
            inner,
            name,
            httpx.AsyncBaseTransport,
            httpx.AsyncHTTPTransport,
            "AsyncResilientTransport wraps an async transport",
        )
        self._inner = inner
        steps = self._steps(options, config, name, listeners, pipeline)
        self._built: BuiltPipeline[AsyncHandler] = build_async(
            steps,
            AsyncSend(
                inner,
                _stamp,
                _teller(deadline_header, clock, name),
                self._buffer(),
            ),
            self._context(clock, random, shared),
        )
        # With no listener the chain runs as built: a call's end costs nothing.
        self._chain = observe_async(self._built.handler, self._telemetry, self._now)
        self._will_retry = self._built.will_retry

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
            _own_request(exc, request)
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


class ResilientTransport(_Resilient, httpx.BaseTransport):
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

    def __init__(
        self,
        inner: httpx.BaseTransport | None = None,
        *,
        options: HttpResilienceOptions | None = None,
        pipeline: ResiliencePipeline | None = None,
        config: Mapping[str, Any] | None = None,
        name: str = "default",
        clock: Clock | None = None,
        listeners: Sequence[HttpEventListener] = (),
        random: Callable[[], float] | None = None,
        deadline_header: str | None = DEADLINE_HEADER,
        shared: SharedState | None = None,
        _stamp: Stamp | None = None,
    ) -> None:
        inner = _inner_or_default(
            inner,
            name,
            httpx.BaseTransport,
            httpx.HTTPTransport,
            "ResilientTransport wraps a sync transport",
        )
        hold_deadlines(inner)
        self._inner = inner
        steps = self._steps(options, config, name, listeners, pipeline)
        self._built: BuiltPipeline[SyncHandler] = build_sync(
            steps,
            SyncSend(
                inner,
                _stamp,
                _teller(deadline_header, clock, name),
                self._buffer(),
            ),
            self._context(clock, random, shared),
        )
        self._chain = observe_sync(self._built.handler, self._telemetry, self._now)
        self._will_retry = self._built.will_retry

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        """Send `request` through the pipeline; raises as the async twin does."""
        try:
            return self._chain.handle_sync(
                request, self._call(request, threading.get_ident)
            )
        except httpx.RequestError as exc:
            _own_request(exc, request)
            raise

    def __enter__(self) -> Self:
        """Enter the wrapped transport's context too (once); return this transport.

        ``with httpx.Client(transport=...)`` enters it this way.
        """
        if self._enters():
            self._inner.__enter__()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None = None,
        exc_value: BaseException | None = None,
        traceback: TracebackType | None = None,
    ) -> None:
        """Exit the wrapped transport's context (once); detach from `SharedState`.

        Without an `__enter__` before it, this closes the wrapped transport,
        as httpx's transports do.
        """
        if self._exits():
            self._inner.__exit__(exc_type, exc_value, traceback)
        elif not self._entered:
            self.close()

    def close(self) -> None:
        """Close the wrapped transport (once); detach from the `SharedState`, if any.

        Once the wrapped transport's context was exited, which closed it, this
        does nothing more.
        """
        if self._closes():
            self._inner.close()


def _own_request(exc: httpx.RequestError, request: httpx.Request) -> None:
    """Give `exc` the call's `request` when it has none (httpx's client would)."""
    try:
        exc.request  # noqa: B018 - raises when not set
    except RuntimeError:
        exc.request = request
