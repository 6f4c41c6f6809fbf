"""OpenTelemetry metrics and traces for the mediator (extra ``otel``).

`TelemetryBehavior` wraps every send and every notification published: one
span per send, named after the request type, current while the chain runs
(so the spans of HTTP calls made by the handler are its children), a counter
of requests by type and outcome class, and a histogram of their duration.
Its `record_retry` is a retry listener for ``mediator_resilience`` (given by
structure, so `mediator` never imports that package): retries are counted,
and each is an event on the send's span.

Nothing here is imported by `mediator` itself. Attributes are bounded: the
request type's qualified name, an outcome class and an exception's type name;
never a field value.

Example:
    >>> from injector import Injector
    >>> from opentelemetry.sdk.trace import TracerProvider
    >>> from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    >>> from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
    ...     InMemorySpanExporter,
    ... )
    >>> from mediator import Mediator, MediatorModule, Query, QueryHandler
    >>> class GetPrice(Query[int]):
    ...     sku: str
    >>> class GetPriceHandler(QueryHandler[GetPrice, int]):
    ...     def handle(self, request: GetPrice) -> int:
    ...         return 42
    >>> exporter = InMemorySpanExporter()
    >>> tracer_provider = TracerProvider()
    >>> tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    >>> telemetry = TelemetryBehavior(tracer_provider=tracer_provider)
    >>> mediator = Injector([
    ...     MediatorModule(
    ...         lambda m: m.add_handler(GetPriceHandler).add_behavior(telemetry)
    ...     )
    ... ]).get(Mediator)
    >>> mediator.send_sync(GetPrice(sku="A-1"))
    42
    >>> [(span.name, span.attributes["mediator.outcome"])
    ...  for span in exporter.get_finished_spans()]
    [('GetPrice', 'ok')]
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import timedelta
from operator import attrgetter
from typing import Any, ClassVar, Final, Protocol, TypeAlias

from opentelemetry import metrics, trace
from opentelemetry.trace import SpanKind, Status, StatusCode

from mediator._core.behavior import Next, SyncNext
from mediator._core.clock import Clock, SystemClock
from mediator._core.degradation import Degradation, degradation_of
from mediator._core.errors import (
    BusinessRuleError,
    ConflictError,
    DomainError,
    ForbiddenError,
    NotFoundError,
    TransientDatabaseError,
    ValidationError,
)
from mediator._core.stage import Stage

__all__ = [
    "DURATION_BUCKETS",
    "TELEMETRY",
    "OutboxGauges",
    "OutboxReading",
    "OutboxSource",
    "RetryReport",
    "TelemetryBehavior",
    "instrument_outbox",
    "outcome_class",
]

Attributes: TypeAlias = Mapping[str, str]

INSTRUMENTATION: Final = "mediator"
"""The meter's and the tracer's name."""

TELEMETRY: Final = Stage(50, "TELEMETRY")
"""`TelemetryBehavior`'s stage: outside AUDIT, so a send's audit record is
written inside its span (and a log handler can read the trace id)."""

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
"""Seconds: the OpenTelemetry conventions' duration boundaries, with 30 and 60
added (a send's retries can outlast 10 s)."""

# Most specific first: the first class a failure is an instance of names it.
_DOMAIN_OUTCOMES: Final = (
    (ValidationError, "validation_error"),
    (NotFoundError, "not_found"),
    (ForbiddenError, "forbidden"),
    (ConflictError, "conflict"),
    (BusinessRuleError, "business_rule"),
    (DomainError, "domain_error"),
    (TransientDatabaseError, "transient"),
)
# A failure of the request itself is its answer, not a fault: the span's
# status is left unset for it, as for an HTTP 4xx on a server span.
_FAULTS: Final = frozenset({"error", "transient"})


def outcome_class(failure: BaseException | None) -> str:
    """The bounded class of a send's outcome.

    ``"ok"``; for a domain error ``"validation_error"``, ``"not_found"``,
    ``"forbidden"``, ``"conflict"``, ``"business_rule"`` or
    ``"domain_error"``; ``"transient"`` for a `TransientDatabaseError`;
    ``"cancelled"`` for a cancellation (any `BaseException` that is not an
    `Exception`); ``"error"`` for anything else.

    Example:
        >>> from mediator import NotFoundError
        >>> outcome_class(None), outcome_class(NotFoundError("no such order"))
        ('ok', 'not_found')
        >>> outcome_class(RuntimeError("boom"))
        'error'
    """
    if failure is None:
        return "ok"
    if not isinstance(failure, Exception):
        return "cancelled"
    for kind, name in _DOMAIN_OUTCOMES:
        if isinstance(failure, kind):
            return name
    return "error"


class RetryReport(Protocol):
    """What `TelemetryBehavior.record_retry` reads of a retry event.

    ``mediator_resilience.RetryEvent`` has these fields: the behavior's
    `record_retry` is a listener for it without `mediator` importing it.
    """

    @property
    def request_type(self) -> str:
        """The request class's qualified name."""
        ...

    @property
    def attempt(self) -> int:
        """The attempt that failed (1 for the first)."""
        ...

    @property
    def delay(self) -> float:
        """Seconds before the next attempt."""
        ...

    @property
    def exception_type(self) -> str | None:
        """The failure's qualified name; None when a result was rejected."""
        ...


class TelemetryBehavior:
    """Records every send as OpenTelemetry metrics and a span.

    Metrics (meter ``mediator``): ``mediator.requests``, a counter of sends and
    notifications published, and ``mediator.request.duration`` (seconds), both
    by ``mediator.request.type``, ``mediator.outcome`` (`outcome_class`) and
    ``error.type`` (the exception's qualified name, on a failure); and
    ``mediator.retries``, fed by `record_retry`. A retried send counts once
    in ``mediator.requests``: its attempts are its requests plus its retries.
    ``mediator.degraded`` counts the ``@fallback`` sends their fallback
    answered, by ``mediator.request.type``, ``mediator.degradation.source``
    (the name the fallback gave `degraded`) and ``error.type`` (the original
    failure's): such a send is also an ``"ok"`` in ``mediator.requests``.

    Spans (tracer ``mediator``): one per send, named after the request type
    (its qualified name), of kind INTERNAL, a child of the span current at
    the send and current while the chain runs. A fault (``"error"``,
    ``"transient"``) sets its status to ERROR; a domain error is an answer
    and only sets ``error.type``. A degraded answer sets
    ``mediator.degraded`` (True) and ``mediator.degradation.source``. No
    exception message is recorded: it may hold field values.

    Register an instance (``config.add_behavior(TelemetryBehavior(...))``) or,
    to use the global providers, the class. Its stage is `TELEMETRY`, outside
    every built-in behavior. It takes no part in streams.

    Args:
        meter_provider: Where the meter comes from; None: the global one.
        tracer_provider: Where the tracer comes from; None: the global one.
        clock: What durations are read from; default `SystemClock`.
    """

    stage: ClassVar[Stage] = TELEMETRY

    __slots__ = (
        "_attributes",
        "_clock",
        "_current",
        "_degraded",
        "_duration",
        "_requests",
        "_retries",
        "_tracer",
    )

    def __init__(
        self,
        *,
        meter_provider: metrics.MeterProvider | None = None,
        tracer_provider: trace.TracerProvider | None = None,
        clock: Clock | None = None,
    ) -> None:
        _checked(meter_provider, metrics.MeterProvider, "meter_provider")
        meter = metrics.get_meter(INSTRUMENTATION, meter_provider=meter_provider)
        self._requests = meter.create_counter(
            "mediator.requests",
            unit="{request}",
            description="Requests sent and notifications published, by outcome",
        )
        self._duration = meter.create_histogram(
            "mediator.request.duration",
            unit="s",
            description="Duration of sends, all their attempts included",
            explicit_bucket_boundaries_advisory=DURATION_BUCKETS,
        )
        self._retries = meter.create_counter(
            "mediator.retries",
            unit="{retry}",
            description="Retries of sends, by the failure that caused them",
        )
        self._degraded = meter.create_counter(
            "mediator.degraded",
            unit="{request}",
            description="Sends of @fallback queries answered by their fallback",
        )
        _checked(tracer_provider, trace.TracerProvider, "tracer_provider")
        self._tracer = trace.get_tracer(
            INSTRUMENTATION, tracer_provider=tracer_provider
        )
        self._clock = clock or SystemClock()
        # Which request type the span current in this context belongs to.
        self._current: ContextVar[tuple[str, trace.Span] | None] = ContextVar(
            "mediator_otel_send", default=None
        )
        self._attributes: dict[tuple[str, str, str | None], Attributes] = {}

    async def handle(self, request: Any, next: Next[Any]) -> Any:
        """Run the chain inside the send's span; record its outcome."""
        with self._measured(request):
            return await next()

    def handle_sync(self, request: Any, next: SyncNext[Any]) -> Any:
        """The same on the sync path."""
        with self._measured(request):
            return next()

    @contextmanager
    def _measured(self, request: Any) -> Generator[None]:
        """The send's span, current around the chain; its outcome recorded."""
        name = type(request).__qualname__
        with self._tracer.start_as_current_span(
            name,
            kind=SpanKind.INTERNAL,
            attributes={"mediator.request.type": name},
            record_exception=False,
            set_status_on_exception=False,
        ) as span:
            token = self._current.set((name, span))
            started = self._clock.monotonic()
            try:
                yield
            except BaseException as failure:
                self._record(name, span, started, failure)
                raise
            finally:
                self._current.reset(token)
            self._record(name, span, started, None)
            found = degradation_of(request)
            if found is not None:
                self._record_degraded(name, span, found)

    def record_retry(self, event: RetryReport) -> None:
        """A retry listener: count the retry, and add it to the send's span.

        Give it to ``mediator_resilience`` (for example
        ``ResilienceMediatorModule(listeners=[telemetry.record_retry])``).
        The reason is the failure's qualified name, or ``"result"`` when a
        returned value was rejected.
        """
        reason = event.exception_type or "result"
        self._retries.add(
            1,
            {
                "mediator.request.type": event.request_type,
                "mediator.retry.reason": reason,
            },
        )
        current = self._current.get()
        if current is not None and current[0] == event.request_type:
            current[1].add_event(
                "mediator.retry",
                {
                    "mediator.attempt": event.attempt,
                    "mediator.retry.reason": reason,
                    "mediator.retry.delay": event.delay,
                },
            )

    def _record(
        self,
        name: str,
        span: trace.Span,
        started: float,
        failure: BaseException | None,
    ) -> None:
        duration = self._clock.monotonic() - started
        kind = outcome_class(failure)
        error = None if failure is None else type(failure).__qualname__
        key = (name, kind, error)
        attributes = self._attributes.get(key)
        if attributes is None:
            attributes = self._attributes[key] = _attributes(name, kind, error)
        self._requests.add(1, attributes)
        self._duration.record(duration, attributes)
        span.set_attribute("mediator.outcome", kind)
        if error is not None:
            span.set_attribute("error.type", error)
            if kind in _FAULTS:
                span.set_status(Status(StatusCode.ERROR))

    def _record_degraded(self, name: str, span: trace.Span, found: Degradation) -> None:
        self._degraded.add(
            1,
            {
                "mediator.request.type": name,
                "mediator.degradation.source": found.source,
                "error.type": found.failure,
            },
        )
        span.set_attribute("mediator.degraded", True)
        span.set_attribute("mediator.degradation.source", found.source)


class OutboxReading(Protocol):
    """What `instrument_outbox` reads of an `OutboxStats` (given by structure)."""

    @property
    def pending(self) -> int:
        """Messages not delivered yet."""
        ...

    @property
    def in_flight(self) -> int:
        """Pending messages a relay holds a lease on."""
        ...

    @property
    def dead(self) -> int:
        """Messages waiting for `redeliver`."""
        ...

    @property
    def oldest_pending_age(self) -> timedelta | None:
        """How long the oldest pending message has waited, or None."""
        ...


class OutboxSource(Protocol):
    """What `instrument_outbox` watches: `mediator.sqlalchemy.OutboxRelay`."""

    @property
    def last_stats(self) -> OutboxReading | None:
        """The last reading of the outbox, or None before the first."""
        ...


class OutboxGauges:
    """The outbox's gauges, registered by `instrument_outbox`.

    `close` makes them report nothing from then on (OpenTelemetry's API
    cannot remove an instrument), for a relay that stopped.
    """

    def __init__(self) -> None:
        self.closed = False

    def close(self) -> None:
        """Report nothing from the next collection on."""
        self.closed = True


def instrument_outbox(
    relay: OutboxSource,
    *,
    outbox: str = "default",
    meter_provider: metrics.MeterProvider | None = None,
) -> OutboxGauges:
    """Report an outbox's backlog as OpenTelemetry gauges, from a running relay.

    Gauges (meter ``mediator``), each with the attribute ``mediator.outbox``
    (`outbox`, a name you choose, such as the database's): ``mediator.outbox.
    pending`` and ``mediator.outbox.in_flight`` and ``mediator.outbox.dead``
    (messages), and ``mediator.outbox.oldest_pending_age`` (seconds the oldest
    pending message has waited: the delivery lag; 0 when none is pending).
    They read `relay.last_stats`, which `OutboxRelay.run` refreshes every
    round; nothing is reported before the first. A collection never queries
    the database.

    Raises:
        TypeError: `relay` has no ``last_stats``, or a bad `meter_provider`.

    Example:
        >>> from opentelemetry.sdk.metrics import MeterProvider
        >>> from opentelemetry.sdk.metrics.export import InMemoryMetricReader
        >>> from datetime import datetime, timedelta, timezone
        >>> class Stats:
        ...     pending, in_flight, dead = 3, 1, 0
        ...     oldest_pending_age = timedelta(seconds=2.5)
        >>> class Relay:
        ...     last_stats = Stats()
        >>> reader = InMemoryMetricReader()
        >>> gauges = instrument_outbox(
        ...     Relay(), meter_provider=MeterProvider(metric_readers=[reader])
        ... )
        >>> data = reader.get_metrics_data().resource_metrics[0].scope_metrics[0]
        >>> {m.name: m.data.data_points[0].value for m in data.metrics}
        ... # doctest: +NORMALIZE_WHITESPACE
        {'mediator.outbox.pending': 3, 'mediator.outbox.in_flight': 1,
         'mediator.outbox.dead': 0, 'mediator.outbox.oldest_pending_age': 2.5}
    """
    if not hasattr(relay, "last_stats"):
        raise TypeError(
            "instrument_outbox() takes an OutboxRelay (something with last_stats), "
            f"got {type(relay).__qualname__}"
        )
    _checked(meter_provider, metrics.MeterProvider, "meter_provider")
    meter = metrics.get_meter(INSTRUMENTATION, meter_provider=meter_provider)
    attributes = {"mediator.outbox": str(outbox)}
    gauges = OutboxGauges()

    def reading(
        read: Callable[[OutboxReading], float],
    ) -> Callable[[metrics.CallbackOptions], list[metrics.Observation]]:
        def observe(_options: metrics.CallbackOptions) -> list[metrics.Observation]:
            stats = relay.last_stats
            if stats is None or gauges.closed:
                return []
            return [metrics.Observation(read(stats), attributes)]

        return observe

    for name, read, unit, description in _OUTBOX_GAUGES:
        meter.create_observable_gauge(
            f"mediator.outbox.{name}",
            callbacks=[reading(read)],
            unit=unit,
            description=description,
        )
    return gauges


def _age(stats: OutboxReading) -> float:
    found = stats.oldest_pending_age
    return 0.0 if found is None else found.total_seconds()


# Each gauge of instrument_outbox: its name's end, its reading, unit and description.
_OUTBOX_GAUGES: Final[
    tuple[tuple[str, Callable[[OutboxReading], float], str, str], ...]
] = (
    ("pending", attrgetter("pending"), "{message}", "Messages not delivered yet"),
    (
        "in_flight",
        attrgetter("in_flight"),
        "{message}",
        "Pending messages a relay is delivering now",
    ),
    ("dead", attrgetter("dead"), "{message}", "Messages waiting for redeliver"),
    (
        "oldest_pending_age",
        _age,
        "s",
        "How long the oldest pending message has waited",
    ),
)


def _attributes(name: str, kind: str, error: str | None) -> Attributes:
    attributes = {"mediator.request.type": name, "mediator.outcome": kind}
    if error is not None:
        attributes["error.type"] = error
    return attributes


def _checked(provider: object, kind: type[object], argument: str) -> None:
    """Refuse a provider of the wrong kind here, not at its first use."""
    if provider is not None and not isinstance(provider, kind):
        raise TypeError(
            f"{argument} must be an OpenTelemetry {kind.__name__} or None, "
            f"got {type(provider).__name__}"
        )


from mediator._primitives.public_names import publish as _publish  # noqa: E402

_publish(__name__, __all__)
