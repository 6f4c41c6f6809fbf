"""OpenTelemetry SDK providers that keep what they record in memory, for the tests.

The providers are passed in explicitly; the global ones are never set.
"""

from __future__ import annotations

from collections.abc import Generator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import (
    HistogramDataPoint,
    InMemoryMetricReader,
    NumberDataPoint,
)
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
    InMemorySpanExporter,
)


@dataclass(frozen=True)
class Point:
    """One data point: its attributes, and its value (a histogram: count and sum)."""

    attributes: Mapping[str, Any]
    value: float
    sum: float | None = None


@dataclass
class Recorded:
    """A meter provider and a tracer provider, and what they recorded."""

    meter_provider: MeterProvider
    tracer_provider: TracerProvider
    reader: InMemoryMetricReader
    exporter: InMemorySpanExporter

    def metrics(self) -> dict[str, list[Point]]:
        """Every metric's points, by metric name."""
        found: dict[str, list[Point]] = {}
        data = self.reader.get_metrics_data()
        if data is None:
            return found
        for resource in data.resource_metrics:
            for scope in resource.scope_metrics:
                for metric in scope.metrics:
                    points = found.setdefault(metric.name, [])
                    for point in metric.data.data_points:
                        if isinstance(point, HistogramDataPoint):
                            points.append(
                                Point(
                                    dict(point.attributes or {}), point.count, point.sum
                                )
                            )
                        elif isinstance(point, NumberDataPoint):
                            points.append(
                                Point(dict(point.attributes or {}), point.value)
                            )
        return found

    def total(self, name: str, match: Mapping[str, Any] | None = None) -> float:
        """Summed values (histogram counts) of `name`'s points that have `match`."""
        wanted = dict(match or {})
        return sum(
            point.value
            for point in self.metrics().get(name, [])
            if all(point.attributes.get(k) == v for k, v in wanted.items())
        )

    def sum(self, name: str, match: Mapping[str, Any] | None = None) -> float:
        """Summed sums of histogram `name`'s points that have `match`."""
        wanted = dict(match or {})
        return sum(
            point.sum or 0.0
            for point in self.metrics().get(name, [])
            if all(point.attributes.get(k) == v for k, v in wanted.items())
        )

    def spans(self) -> list[ReadableSpan]:
        return list(self.exporter.get_finished_spans())

    def every_attribute_value(self) -> list[object]:
        """Every attribute value of every point, span and span event."""
        values: list[object] = []
        for points in self.metrics().values():
            for point in points:
                values.extend(point.attributes.values())
        for span in self.spans():
            values.extend((span.attributes or {}).values())
            for event in span.events:
                values.extend((event.attributes or {}).values())
        return values


def span_id(span: ReadableSpan) -> int:
    """The span's own id."""
    assert span.context is not None
    return int(span.context.span_id)


def trace_id(span: ReadableSpan) -> int:
    """The id of the span's trace."""
    assert span.context is not None
    return int(span.context.trace_id)


def parent_id(span: ReadableSpan) -> int | None:
    """The id of the span's parent; None for a root span."""
    return None if span.parent is None else span.parent.span_id


@contextmanager
def recorded() -> Generator[Recorded]:
    """In-memory providers, shut down on leaving."""
    reader = InMemoryMetricReader()
    meter_provider = MeterProvider(metric_readers=[reader], shutdown_on_exit=False)
    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider(shutdown_on_exit=False)
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    try:
        yield Recorded(meter_provider, tracer_provider, reader, exporter)
    finally:
        meter_provider.shutdown()
        tracer_provider.shutdown()
