"""`HttpTracing`: one OpenTelemetry client span per logical call.

The span is current while the call runs; its attempts, retries, hedges,
refusals, timeouts and breaker transitions are events on it.
"""

from __future__ import annotations

from contextvars import ContextVar
from typing import Final

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import SpanKind, Status, StatusCode

from http_resilience._core import events
from http_resilience._core.observed import RequestEnd
from http_resilience.otel._attributes import (
    INSTRUMENTATION,
    base_attributes,
    checked_provider,
    known_method,
    outcome_class,
)

__all__ = ["HttpTracing"]


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

    def end(self, event: events.RequestEvent) -> None:
        span = self.span
        outcome = event.outcome
        kind = outcome_class(outcome, rejected=event.rejected)
        span.set_attribute("http_resilience.outcome", kind)
        if outcome.isdigit():
            span.set_attribute("http.response.status_code", int(outcome))
        if kind not in _SUCCESS:
            span.set_attribute("error.type", outcome)
            span.set_status(Status(StatusCode.ERROR))
        if event.degraded is not None:
            span.set_attribute(DEGRADED_ATTRIBUTE, event.degraded)
        if self.attempts:
            span.set_attribute("http_resilience.attempts", self.attempts)
            if self.attempts > 1:
                span.set_attribute("http.request.resend_count", self.attempts - 1)
        self.current.reset(self.token)
        otel_context.detach(self.scope)
        span.end()


_SUCCESS: Final = frozenset({"1xx", "2xx", "3xx"})
DEGRADED_ATTRIBUTE: Final = "http_resilience.degraded.source"
"""On a call's span, and on ``http_resilience.degraded``: where a degraded
answer came from (``"stale-cache"``, ``"fallback"``)."""


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
        checked_provider(tracer_provider, trace.TracerProvider, "tracer_provider")
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
        known = known_method(method)
        span = self._tracer.start_span(
            "HTTP" if known == "_OTHER" else known,
            kind=SpanKind.CLIENT,
            attributes=base_attributes(client, method, host),
        )
        return _CallSpan(span, client, self._current).end

    def __call__(self, event: events.HttpEvent) -> None:
        """Add an event of the current call to its span."""
        current = self._current.get()
        if current is None or event.client != current.client:
            return
        span = current.span
        if isinstance(event, events.AttemptEvent):
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
        elif isinstance(event, events.RetryEvent):
            span.add_event(
                "http_resilience.retry",
                {
                    "http_resilience.attempt": event.attempt,
                    "http_resilience.retry.reason": event.reason,
                    "http_resilience.retry.delay": event.delay,
                },
            )
        elif isinstance(event, events.HedgeEvent):
            span.add_event(
                "http_resilience.hedge",
                {
                    "http_resilience.attempt": event.attempt,
                    "http_resilience.hedge.reason": event.reason,
                    "http_resilience.hedge.after": event.after,
                },
            )
        elif isinstance(event, events.RejectionEvent):
            span.add_event(
                "http_resilience.rejection",
                {"http_resilience.rejection.reason": event.reason},
            )
        elif isinstance(event, events.TimeoutEvent):
            span.add_event(
                "http_resilience.timeout",
                {
                    "http_resilience.timeout.kind": event.kind,
                    "http_resilience.timeout.after": event.after,
                },
            )
        elif isinstance(event, events.BreakerEvent):
            span.add_event(
                "http_resilience.breaker.transition",
                {
                    "http_resilience.breaker.previous_state": event.previous,
                    "http_resilience.breaker.state": event.current,
                },
            )
        elif isinstance(event, events.NestedRetryEvent):
            span.add_event(
                "http_resilience.nested_retry",
                {
                    "http_resilience.nested_retry.caller_attempt": event.caller_attempt,
                    "http_resilience.nested_retry.suppressed": event.suppressed,
                },
            )
        # A RequestEvent ends the span through `request_started`'s callable.
