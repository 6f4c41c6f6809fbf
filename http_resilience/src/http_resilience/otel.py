"""OpenTelemetry metrics and traces for resilient HTTP clients (extra ``otel``).

Two listeners, given to a transport, a client or a factory like any other
(``listeners=[HttpMetrics(), HttpTracing()]``): `HttpMetrics` records
logical calls apart from the physical attempts they cost, and retries,
refusals, timeouts, hedges and breaker transitions; `HttpTracing` opens one
client span per logical call, with an event per attempt and per retry.
Nothing here is imported by `http_resilience` itself, and a transport without
listeners pays nothing for either.

Attributes are bounded: the client's name, the method, the normalised host
(``server.address``, ``server.port``, ``url.scheme``), an outcome class and a
reason. Never a URL path, a query, userinfo, an id or a header value.

Example:
    >>> import httpx
    >>> from opentelemetry.sdk.metrics import MeterProvider
    >>> from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    >>> from http_resilience import ResilientTransport
    >>> reader = InMemoryMetricReader()
    >>> metrics = HttpMetrics(meter_provider=MeterProvider(metric_readers=[reader]))
    >>> transport = ResilientTransport(
    ...     httpx.MockTransport(lambda request: httpx.Response(200)),
    ...     name="inventory",
    ...     listeners=[metrics],
    ... )
    >>> with httpx.Client(transport=transport) as client:
    ...     client.get("https://inventory.local/items/7?token=x").status_code
    200
    >>> data = reader.get_metrics_data()
    >>> sorted(m.name for rm in data.resource_metrics for sm in rm.scope_metrics
    ...        for m in sm.metrics)  # doctest: +NORMALIZE_WHITESPACE
    ['http_resilience.attempt.duration', 'http_resilience.attempts',
     'http_resilience.request.duration', 'http_resilience.requests']
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from contextvars import ContextVar
from typing import Final, TypeAlias

from opentelemetry import context as otel_context
from opentelemetry import metrics, trace
from opentelemetry.trace import SpanKind, Status, StatusCode

from http_resilience._core.events import (
    AttemptEvent,
    BreakerEvent,
    HedgeEvent,
    HttpEvent,
    NestedRetryEvent,
    RejectionEvent,
    RequestEvent,
    RetryEvent,
    TimeoutEvent,
)
from http_resilience._core.observed import RequestEnd

__all__ = ["DURATION_BUCKETS", "HttpMetrics", "HttpTracing", "outcome_class"]

Attributes: TypeAlias = Mapping[str, str | int | bool]

INSTRUMENTATION: Final = "http_resilience"
"""The meter's and the tracer's name."""

DURATION_BUCKETS: Final = (
    0.005,
    0.01,
    0.025,
    0.05,
    0.075,
    0.1,
    0.25,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    30.0,
    60.0,
)
"""Seconds: the HTTP semantic conventions' boundaries, with 30 and 60 added
(a logical call's waits and retries can outlast 10 s)."""

_KNOWN_METHODS: Final = frozenset(
    {"CONNECT", "DELETE", "GET", "HEAD", "OPTIONS", "PATCH", "POST", "PUT", "TRACE"}
)
_CANCELLED: Final = frozenset({"CancelledError", "Cancelled"})


def outcome_class(outcome: str, *, rejected: bool = False) -> str:
    """The bounded class of an attempt's or a call's `outcome`.

    ``"1xx"`` to ``"5xx"`` for a status code; ``"rejected"`` for a call refused
    in this process; ``"cancelled"`` for a cancelled one; ``"error"`` for
    any other exception.

    Example:
        >>> outcome_class("503"), outcome_class("ConnectError")
        ('5xx', 'error')
        >>> outcome_class("BrokenCircuitError", rejected=True)
        'rejected'
    """
    if rejected:
        return "rejected"
    if outcome.isdigit():
        return f"{outcome[0]}xx"
    if outcome in _CANCELLED:
        return "cancelled"
    return "error"


class HttpMetrics:
    """A listener that records the pipeline's events as OpenTelemetry metrics.

    Logical calls (``http_resilience.requests``) are counted apart from the
    physical attempts they cost (``http_resilience.attempts``), so retries
    that hide a failing host show as more attempts per call. Attempts are
    reported by the retry and hedging strategies: a pipeline with neither
    counts calls only.

    Args:
        meter_provider: Where the meter comes from; None: the global one.

    Example:
        >>> from http_resilience import create_async_client
        >>> client = create_async_client(name="inventory", listeners=[HttpMetrics()])
    """

    __slots__ = (
        "_attempt_duration",
        "_attempts",
        "_hedges",
        "_nested",
        "_rejections",
        "_request_duration",
        "_requests",
        "_retries",
        "_timeouts",
        "_transitions",
    )

    def __init__(self, *, meter_provider: metrics.MeterProvider | None = None) -> None:
        _checked(meter_provider, metrics.MeterProvider, "meter_provider")
        meter = metrics.get_meter(INSTRUMENTATION, meter_provider=meter_provider)
        self._requests = meter.create_counter(
            "http_resilience.requests",
            unit="{request}",
            description="Logical HTTP calls, by outcome class",
        )
        self._request_duration = meter.create_histogram(
            "http_resilience.request.duration",
            unit="s",
            description="Duration of logical HTTP calls, attempts and waits included",
            explicit_bucket_boundaries_advisory=DURATION_BUCKETS,
        )
        self._attempts = meter.create_counter(
            "http_resilience.attempts",
            unit="{attempt}",
            description="Physical HTTP attempts sent, by outcome class",
        )
        self._attempt_duration = meter.create_histogram(
            "http_resilience.attempt.duration",
            unit="s",
            description="Duration of physical HTTP attempts",
            explicit_bucket_boundaries_advisory=DURATION_BUCKETS,
        )
        self._retries = meter.create_counter(
            "http_resilience.retries",
            unit="{retry}",
            description="Retries decided, by the failure that caused them",
        )
        self._rejections = meter.create_counter(
            "http_resilience.rejections",
            unit="{rejection}",
            description="Attempts refused in this process, never sent, by reason",
        )
        self._transitions = meter.create_counter(
            "http_resilience.breaker.transitions",
            unit="{transition}",
            description="Circuit breaker state changes",
        )
        self._timeouts = meter.create_counter(
            "http_resilience.timeouts",
            unit="{timeout}",
            description="Attempt and total timeouts",
        )
        self._hedges = meter.create_counter(
            "http_resilience.hedges",
            unit="{attempt}",
            description="Hedged attempts sent beside attempts in flight",
        )
        self._nested = meter.create_counter(
            "http_resilience.nested_retries",
            unit="{call}",
            description="Calls that failed while their caller was retrying",
        )

    def __call__(self, event: HttpEvent) -> None:
        """Record one event."""
        if isinstance(event, AttemptEvent):
            attributes = _outcome_attributes(
                event.client, event.method, event.host, event.outcome, False
            )
            self._attempts.add(1, attributes)
            self._attempt_duration.record(event.duration, attributes)
        elif isinstance(event, RequestEvent):
            attributes = _outcome_attributes(
                event.client, event.method, event.host, event.outcome, event.rejected
            )
            self._requests.add(1, attributes)
            self._request_duration.record(event.duration, attributes)
        elif isinstance(event, RetryEvent):
            self._retries.add(
                1,
                _with(
                    event.client,
                    event.method,
                    event.host,
                    "http_resilience.retry.reason",
                    event.reason,
                ),
            )
        elif isinstance(event, RejectionEvent):
            self._rejections.add(
                1,
                _with(
                    event.client,
                    event.method,
                    event.host,
                    "http_resilience.rejection.reason",
                    event.reason,
                ),
            )
        elif isinstance(event, BreakerEvent):
            self._transitions.add(
                1,
                _breaker_attributes(
                    event.client, event.host, event.previous, event.current
                ),
            )
        elif isinstance(event, TimeoutEvent):
            self._timeouts.add(
                1,
                _with(
                    event.client,
                    event.method,
                    event.host,
                    "http_resilience.timeout.kind",
                    event.kind,
                ),
            )
        elif isinstance(event, HedgeEvent):
            self._hedges.add(
                1,
                _with(
                    event.client,
                    event.method,
                    event.host,
                    "http_resilience.hedge.reason",
                    event.reason,
                ),
            )
        else:
            self._nested.add(
                1,
                _with(
                    event.client,
                    event.method,
                    event.host,
                    "http_resilience.nested_retry.suppressed",
                    event.suppressed,
                ),
            )


class _CallSpan:
    """One logical call's span, while the call runs."""

    __slots__ = ("attempts", "client", "current", "scope", "span", "token")

    def __init__(
        self, span: trace.Span, client: str, current: ContextVar[_CallSpan | None]
    ) -> None:
        self.span = span
        self.client = client
        self.attempts = 0
        # Current for the call: spans of work inside it (an in-process ASGI
        # app, say) are its children.
        self.scope = otel_context.attach(trace.set_span_in_context(span))
        self.current = current
        self.token = current.set(self)

    def end(self, event: RequestEvent) -> None:
        span = self.span
        outcome = event.outcome
        kind = outcome_class(outcome, rejected=event.rejected)
        span.set_attribute("http_resilience.outcome", kind)
        if outcome.isdigit():
            span.set_attribute("http.response.status_code", int(outcome))
        if kind not in _SUCCESS:
            span.set_attribute("error.type", outcome)
            span.set_status(Status(StatusCode.ERROR))
        if self.attempts:
            span.set_attribute("http_resilience.attempts", self.attempts)
            if self.attempts > 1:
                span.set_attribute("http.request.resend_count", self.attempts - 1)
        self.current.reset(self.token)
        otel_context.detach(self.scope)
        span.end()


_SUCCESS: Final = frozenset({"1xx", "2xx", "3xx"})


class HttpTracing:
    """A listener that traces each logical call as one OpenTelemetry client span.

    The span is named after the method (``GET``; ``HTTP`` for a method the
    HTTP conventions do not know), is a child of the span current when the
    call starts (a mediator send's, say), and is current while the call runs.
    Each attempt, retry, hedge, refusal, timeout and breaker transition of
    the call is an event on it. It ends when the response's head arrives or
    the call raises; a status of 400 or more, or an exception, marks it as an
    error with ``error.type``. No URL is recorded: ``url.full`` is left out, as
    paths and queries carry ids and secrets.

    Args:
        tracer_provider: Where the tracer comes from; None: the global one.

    Example:
        >>> from http_resilience import create_client
        >>> client = create_client(name="inventory", listeners=[HttpTracing()])
    """

    __slots__ = ("_current", "_tracer")

    def __init__(self, *, tracer_provider: trace.TracerProvider | None = None) -> None:
        _checked(tracer_provider, trace.TracerProvider, "tracer_provider")
        self._tracer = trace.get_tracer(
            INSTRUMENTATION, tracer_provider=tracer_provider
        )
        # Whose span the events in this context belong to; one per tracing,
        # so two of them on one client each see their own spans.
        self._current: ContextVar[_CallSpan | None] = ContextVar(
            "http_resilience_otel_call", default=None
        )

    def request_started(self, client: str, method: str, host: str) -> RequestEnd:
        """Open the call's span and make it current; return what ends it."""
        known = _method(method)
        span = self._tracer.start_span(
            "HTTP" if known == "_OTHER" else known,
            kind=SpanKind.CLIENT,
            attributes=_base(client, method, host),
        )
        return _CallSpan(span, client, self._current).end

    def __call__(self, event: HttpEvent) -> None:
        """Add an event of the current call to its span."""
        current = self._current.get()
        if current is None or event.client != current.client:
            return
        span = current.span
        if isinstance(event, AttemptEvent):
            current.attempts += 1
            span.add_event(
                "http_resilience.attempt",
                {
                    "http_resilience.attempt": event.attempt,
                    "http_resilience.outcome": outcome_class(event.outcome),
                    "http_resilience.attempt.outcome": event.outcome,
                    "http_resilience.attempt.duration": event.duration,
                },
            )
        elif isinstance(event, RetryEvent):
            span.add_event(
                "http_resilience.retry",
                {
                    "http_resilience.attempt": event.attempt,
                    "http_resilience.retry.reason": event.reason,
                    "http_resilience.retry.delay": event.delay,
                },
            )
        elif isinstance(event, HedgeEvent):
            span.add_event(
                "http_resilience.hedge",
                {
                    "http_resilience.attempt": event.attempt,
                    "http_resilience.hedge.reason": event.reason,
                    "http_resilience.hedge.after": event.after,
                },
            )
        elif isinstance(event, RejectionEvent):
            span.add_event(
                "http_resilience.rejection",
                {"http_resilience.rejection.reason": event.reason},
            )
        elif isinstance(event, TimeoutEvent):
            span.add_event(
                "http_resilience.timeout",
                {
                    "http_resilience.timeout.kind": event.kind,
                    "http_resilience.timeout.after": event.after,
                },
            )
        elif isinstance(event, BreakerEvent):
            span.add_event(
                "http_resilience.breaker.transition",
                {
                    "http_resilience.breaker.previous_state": event.previous,
                    "http_resilience.breaker.state": event.current,
                },
            )
        elif isinstance(event, NestedRetryEvent):
            span.add_event(
                "http_resilience.nested_retry",
                {
                    "http_resilience.nested_retry.caller_attempt": event.caller_attempt,
                    "http_resilience.nested_retry.suppressed": event.suppressed,
                },
            )
        # A RequestEvent ends the span through `request_started`'s callable.


def _method(method: str) -> str:
    """The method, or ``"_OTHER"`` for one the conventions do not know (bounded)."""
    return method if method in _KNOWN_METHODS else "_OTHER"


@functools.lru_cache(maxsize=1024)
def _server(host: str) -> tuple[tuple[str, str | int], ...]:
    """``url.scheme``, ``server.address`` and ``server.port`` of a host key."""
    scheme, separator, rest = host.partition("://")
    if not separator:
        return ()  # the breaker shared by every host ("*")
    address, _, port = rest.rpartition(":")
    if not address or not port.isdigit():
        address, port = rest, ""
    address = address.removeprefix("[").removesuffix("]")  # IPv6, as the spec says
    found: list[tuple[str, str | int]] = [
        ("url.scheme", scheme),
        ("server.address", address),
    ]
    if port:
        found.append(("server.port", int(port)))
    return tuple(found)


@functools.lru_cache(maxsize=4096)
def _base(client: str, method: str, host: str) -> Attributes:
    return {
        "http_resilience.client": client,
        "http.request.method": _method(method),
        **dict(_server(host)),
    }


def _with(
    client: str, method: str, host: str, key: str, value: str | bool
) -> Attributes:
    return {**_base(client, method, host), key: value}


@functools.lru_cache(maxsize=4096)
def _outcome_attributes(
    client: str, method: str, host: str, outcome: str, rejected: bool
) -> Attributes:
    attributes: dict[str, str | int | bool] = {
        **_base(client, method, host),
        "http_resilience.outcome": outcome_class(outcome, rejected=rejected),
    }
    if outcome.isdigit():
        status = int(outcome)
        attributes["http.response.status_code"] = status
        if status >= 400:
            attributes["error.type"] = outcome
    else:
        attributes["error.type"] = outcome
    return attributes


def _breaker_attributes(
    client: str, host: str, previous: str, current: str
) -> Attributes:
    return {
        "http_resilience.client": client,
        **dict(_server(host)),
        "http_resilience.breaker.previous_state": previous,
        "http_resilience.breaker.state": current,
    }


def _checked(provider: object, kind: type[object], argument: str) -> None:
    """Refuse a provider of the wrong kind here, not at its first use."""
    if provider is not None and not isinstance(provider, kind):
        raise TypeError(
            f"{argument} must be an OpenTelemetry {kind.__name__} or None, "
            f"got {type(provider).__name__}"
        )


from http_resilience._primitives.public_names import publish as _publish  # noqa: E402

_publish(__name__, __all__)
