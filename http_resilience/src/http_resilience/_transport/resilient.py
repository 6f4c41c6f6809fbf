"""What the two resilient transports share: the constructor, the state, the checks.

`_Resilient` builds the chain once, with the `_Colour` its transport names (the
table of what sets async apart from sync); `AsyncResilientTransport` and
`ResilientTransport` (`transport.py`) are the thin shells that drive it.
"""

from __future__ import annotations

import random as _random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Generic, TypeVar, cast

import httpx

from http_resilience._core.builder import BuildContext, BuiltPipeline, StepOptions
from http_resilience._core.call import AsyncHandler, Call, SyncHandler
from http_resilience._core.clock import SYSTEM_CLOCK, Clock, reader
from http_resilience._core.deadline import DEADLINE_HEADER, scope_deadline
from http_resilience._core.errors import ResilienceLayerError
from http_resilience._core.events import HttpEventListener
from http_resilience._core.hosts import host_key
from http_resilience._core.send import LAYER_MARK, DeadlineTeller, Stamp, marked_by
from http_resilience._core.telemetry import Telemetry
from http_resilience._fleet.builders import fleet_overrides
from http_resilience._fleet.link import ClientShare
from http_resilience._fleet.state import SharedState
from http_resilience._pipelines.custom import ResiliencePipeline
from http_resilience._pipelines.standard import HttpResilienceOptions, standard_steps
from http_resilience._transport.resolve import (
    resolve_options,
    resolve_pipeline,
    teller,
)
from http_resilience._transport.sync_deadline import hold_deadlines

__all__ = ["Colour", "Resilient", "own_request", "refuse_second_layer"]


InnerT = TypeVar("InnerT", httpx.AsyncBaseTransport, httpx.BaseTransport)
HandlerT = TypeVar("HandlerT", AsyncHandler, SyncHandler)


def refuse_second_layer(inner: object, name: str) -> None:
    """Raise `ResilienceLayerError` if `inner` is a resilient transport."""
    if isinstance(inner, Resilient):
        raise ResilienceLayerError(
            f"HTTP client {name!r}: the transport is already resilient "
            f"(client {inner.name!r}); one resilience layer per client, or "
            "retries multiply"
        )


@dataclass(frozen=True, slots=True)
class Colour(Generic[InnerT, HandlerT]):
    """What sets the async transport apart from the sync one, as a table.

    Attributes:
        default: Builds the transport wrapped when none is given.
        send: The terminal step: one attempt through the wrapped transport.
        build: Chains the steps' strategies around `send`.
        observe: Reports each call's end to the listeners, if any.
        sync: Whether the transports are sync ones.
    """

    default: Callable[[], InnerT]
    send: Callable[[InnerT, Stamp | None, DeadlineTeller | None, int | None], HandlerT]
    build: Callable[
        [Sequence[StepOptions], HandlerT, BuildContext], BuiltPipeline[HandlerT]
    ]
    observe: Callable[[HandlerT, Telemetry, Callable[[], float]], HandlerT]
    sync: bool

    def adopt(self, inner: object, owner: str, name: str) -> InnerT:
        """`inner`, or a `default()` one when None; refused when of the wrong colour.

        A sync one is held to each attempt's deadline from inside
        (`hold_deadlines`): a sync attempt cannot be cancelled.

        Raises:
            ResilienceLayerError: `inner` is already resilient.
            TypeError: `inner` is not a transport of this colour (the message
                says what `owner` wraps).
        """
        refuse_second_layer(inner, name)
        sync = self.sync
        kind = httpx.BaseTransport if sync else httpx.AsyncBaseTransport
        if inner is None:
            inner = self.default()
        elif not isinstance(inner, kind):
            raise TypeError(
                f"HTTP client {name!r}: {owner} wraps "
                f"{'a sync' if sync else 'an async'} transport, "
                f"got {type(inner).__qualname__}"
            )
        if sync:
            hold_deadlines(inner)
        return cast("InnerT", inner)


class Resilient(Generic[InnerT, HandlerT]):
    """What the two transports share: building, options, decision, layer checks.

    Each transport names its `Colour`; the constructor, the same for both,
    builds the chain with it once.
    """

    _colour: ClassVar[Colour[Any, Any]]
    name: str
    options: HttpResilienceOptions | None
    pipeline: ResiliencePipeline | None

    def __init__(
        self,
        inner: InnerT | None = None,
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
        colour: Colour[InnerT, HandlerT] = self._colour
        self._inner: InnerT = colour.adopt(inner, type(self).__name__, name)
        steps = self._steps(options, config, name, listeners, pipeline)
        self._built: BuiltPipeline[HandlerT] = colour.build(
            steps,
            colour.send(
                self._inner,
                _stamp,
                teller(deadline_header, clock, name),
                self._buffer(),
            ),
            self._context(clock, random, shared),
        )
        # With no listener the chain runs as built: a call's end costs nothing.
        self._chain: HandlerT = colour.observe(
            self._built.handler, self._telemetry, self._now
        )
        self._will_retry: Callable[[httpx.Request], bool] = self._built.will_retry

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


def own_request(exc: httpx.RequestError, request: httpx.Request) -> None:
    """Give `exc` the call's `request` when it has none (httpx's client would)."""
    try:
        exc.request  # noqa: B018 - raises when not set
    except RuntimeError:
        exc.request = request
