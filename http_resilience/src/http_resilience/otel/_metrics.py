"""`HttpMetrics`: the pipeline's events as OpenTelemetry metrics, by one table.

Each instrument is a row of `_INSTRUMENTS` (the event it records, its name,
unit and description); each kind of event has one rule for its attributes
(`_LABELS`). An event is recorded into every instrument of its kind.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final, NamedTuple, TypeAlias

from opentelemetry import metrics

from http_resilience._core.events import (
    AttemptEvent,
    BaselineEvent,
    BreakerEvent,
    ConcurrencyLimitEvent,
    HedgeEvent,
    HttpEvent,
    NestedRetryEvent,
    RejectionEvent,
    RequestEvent,
    RetryEvent,
    TimeoutEvent,
)
from http_resilience.otel._attributes import (
    INSTRUMENTATION,
    Attributes,
    breaker_attributes,
    checked_provider,
    host_attributes,
    outcome_attributes,
    with_attribute,
)

__all__ = ["DURATION_BUCKETS", "HttpMetrics"]

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


class HttpMetrics:
    """A listener that records the pipeline's events as OpenTelemetry metrics.

    Logical calls (``http_resilience.requests``) are counted apart from the
    physical attempts they cost (``http_resilience.attempts``), so retries
    that hide a failing host show as more attempts per call. A call that
    failed and was answered stale or by a fallback counts in
    ``http_resilience.requests`` by the answer it got (a success), and in
    ``http_resilience.degraded`` by its source. Attempts are
    reported by the retry and hedging strategies: a pipeline with neither
    counts calls only.

    Args:
        meter_provider: Where the meter comes from; None: the global one.

    Example:
        >>> from http_resilience import create_async_client
        >>> client = create_async_client(name="inventory", listeners=[HttpMetrics()])
    """

    __slots__ = ("_recorders",)

    def __init__(self, *, meter_provider: metrics.MeterProvider | None = None) -> None:
        checked_provider(meter_provider, metrics.MeterProvider, "meter_provider")
        meter = metrics.get_meter(INSTRUMENTATION, meter_provider=meter_provider)
        recorders: dict[type[HttpEvent], list[_Record]] = {}
        for instrument in _INSTRUMENTS:
            recorders.setdefault(instrument.event, []).append(instrument.made(meter))
        self._recorders = {kind: tuple(found) for kind, found in recorders.items()}

    def __call__(self, event: HttpEvent) -> None:
        """Record one event."""
        kind = type(event)
        if kind not in _LABELS:
            kind = _kind(kind)
        attributes = _LABELS[kind](event)
        for record in self._recorders[kind]:
            record(event, attributes)


_Record: TypeAlias = Callable[[Any, Attributes], None]
"""Records one event, with its attributes, into one instrument."""


class _Instrument(NamedTuple):
    """An instrument of `HttpMetrics`, and the events it records.

    With a `gauge` it is a gauge of each event's field of that name (0 for
    None); else a unit of seconds makes it a histogram of each event's
    ``duration``, any other a counter of the events (those whose `only`
    field is set, when it names one, with that field's value as the
    attribute it names too).
    """

    event: type[HttpEvent]
    name: str
    unit: str
    description: str
    gauge: str | None = None
    only: tuple[str, str] | None = None

    def made(self, meter: metrics.Meter) -> _Record:
        """The instrument, created on `meter`, as what records into it."""
        if self.gauge is not None:
            gauge = meter.create_gauge(
                self.name, unit=self.unit, description=self.description
            )
            read = self.gauge
            return lambda event, attributes: gauge.set(
                getattr(event, read) or 0, attributes
            )
        if self.only is not None:
            counted = meter.create_counter(
                self.name, unit=self.unit, description=self.description
            )
            wanted, key = self.only

            def record(event: Any, attributes: Attributes) -> None:
                value: str | None = getattr(event, wanted)
                if value is not None:
                    counted.add(1, {**attributes, key: value})

            return record
        if self.unit == "s":
            histogram = meter.create_histogram(
                self.name,
                unit=self.unit,
                description=self.description,
                explicit_bucket_boundaries_advisory=DURATION_BUCKETS,
            )
            return lambda event, attributes: histogram.record(
                event.duration, attributes
            )
        counter = meter.create_counter(
            self.name, unit=self.unit, description=self.description
        )
        return lambda _, attributes: counter.add(1, attributes)


_INSTRUMENTS: Final = (
    _Instrument(
        RequestEvent,
        "http_resilience.requests",
        "{request}",
        "Logical HTTP calls, by outcome class",
    ),
    _Instrument(
        RequestEvent,
        "http_resilience.degraded",
        "{request}",
        "Logical HTTP calls that failed and were answered in place, stale or "
        "by a fallback, by source",
        only=("degraded", "http_resilience.degraded.source"),
    ),
    _Instrument(
        RequestEvent,
        "http_resilience.request.duration",
        "s",
        "Duration of logical HTTP calls, attempts and waits included",
    ),
    _Instrument(
        AttemptEvent,
        "http_resilience.attempts",
        "{attempt}",
        "Physical HTTP attempts sent, by outcome class",
    ),
    _Instrument(
        AttemptEvent,
        "http_resilience.attempt.duration",
        "s",
        "Duration of physical HTTP attempts",
    ),
    _Instrument(
        RetryEvent,
        "http_resilience.retries",
        "{retry}",
        "Retries decided, by the failure that caused them",
    ),
    _Instrument(
        RejectionEvent,
        "http_resilience.rejections",
        "{rejection}",
        "Attempts refused in this process, never sent, by reason",
    ),
    _Instrument(
        BreakerEvent,
        "http_resilience.breaker.transitions",
        "{transition}",
        "Circuit breaker state changes",
    ),
    _Instrument(
        BaselineEvent,
        "http_resilience.adaptive.attempt_timeout",
        "s",
        "The attempt timeout a host's baseline sets; 0 while none does "
        "(the configured attempt_timeout applies)",
        gauge="attempt_timeout",
    ),
    _Instrument(
        BaselineEvent,
        "http_resilience.adaptive.failure_threshold",
        "1",
        "The failure ratio that opens a host's breaker, as its baseline sets it",
        gauge="failure_threshold",
    ),
    _Instrument(
        BaselineEvent,
        "http_resilience.adaptive.trips",
        "{trip}",
        "Breakers opened while their host's baseline was armed, by rule",
        only=("tripped", "http_resilience.breaker.rule"),
    ),
    _Instrument(
        ConcurrencyLimitEvent,
        "http_resilience.adaptive.concurrency_limit",
        "{request}",
        "A host's adaptive concurrency limit",
        gauge="limit",
    ),
    _Instrument(
        TimeoutEvent,
        "http_resilience.timeouts",
        "{timeout}",
        "Attempt and total timeouts",
    ),
    _Instrument(
        HedgeEvent,
        "http_resilience.hedges",
        "{attempt}",
        "Hedged attempts sent beside attempts in flight",
    ),
    _Instrument(
        NestedRetryEvent,
        "http_resilience.nested_retries",
        "{call}",
        "Calls that failed while their caller was retrying",
    ),
)
"""Every instrument, in the order they are created."""


def _by_outcome(event: AttemptEvent | RequestEvent) -> Attributes:
    rejected = isinstance(event, RequestEvent) and event.rejected
    return outcome_attributes(
        event.client, event.method, event.host, event.outcome, rejected
    )


def _by_transition(event: BreakerEvent) -> Attributes:
    return breaker_attributes(event.client, event.host, event.previous, event.current)


def _by_host(event: BaselineEvent | ConcurrencyLimitEvent) -> Attributes:
    return host_attributes(event.client, event.host)


def _labelled(key: str, field: str) -> Callable[[Any], Attributes]:
    """The call's attributes, and `key` set to the event's `field`."""

    def labels(event: Any) -> Attributes:
        value: str | bool = getattr(event, field)
        return with_attribute(event.client, event.method, event.host, key, value)

    return labels


_LABELS: Final[Mapping[type[HttpEvent], Callable[[Any], Attributes]]] = {
    AttemptEvent: _by_outcome,
    RequestEvent: _by_outcome,
    RetryEvent: _labelled("http_resilience.retry.reason", "reason"),
    RejectionEvent: _labelled("http_resilience.rejection.reason", "reason"),
    BreakerEvent: _by_transition,
    BaselineEvent: _by_host,
    ConcurrencyLimitEvent: _by_host,
    TimeoutEvent: _labelled("http_resilience.timeout.kind", "kind"),
    HedgeEvent: _labelled("http_resilience.hedge.reason", "reason"),
    NestedRetryEvent: _labelled(
        "http_resilience.nested_retry.suppressed", "suppressed"
    ),
}
"""The attributes of each kind of event, in the order an event is matched."""


def _kind(cls: type[HttpEvent]) -> type[HttpEvent]:
    """The kind in `_LABELS` a subclass `cls` belongs to; else `NestedRetryEvent`."""
    return next((kind for kind in _LABELS if issubclass(cls, kind)), NestedRetryEvent)
