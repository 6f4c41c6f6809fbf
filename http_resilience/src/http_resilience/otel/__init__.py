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

from http_resilience.otel._attributes import outcome_class
from http_resilience.otel._metrics import DURATION_BUCKETS, HttpMetrics
from http_resilience.otel._tracing import HttpTracing

__all__ = ["DURATION_BUCKETS", "HttpMetrics", "HttpTracing", "outcome_class"]

from http_resilience._primitives.public_names import publish as _publish

_publish(__name__, __all__)
