"""Resilient httpx transports, and retry for streams that break half-way.

`AsyncResilientTransport` and `ResilientTransport` wrap any httpx transport in
the standard pipeline (concurrency limiter, total timeout, retry, per-host
circuit breaker, attempt timeout), configured by `HttpResilienceOptions`, or in
a `ResiliencePipeline` of your own (hedging included);
`create_async_client` and `create_client` build long-lived clients on them.
`with_retry` (and `with_retry_sync`) asks a stream's source again when it
breaks, without handing the consumer an item twice unless told to;
`resumable_bytes` (and `resumable_bytes_sync`) continues a broken httpx
response body with `Range` requests.
"""

from http_resilience._asgi import ResilienceErrorMiddleware
from http_resilience._builder import ResiliencePipeline
from http_resilience._client import create_async_client, create_client
from http_resilience._clock import Clock, SystemClock
from http_resilience._correlation import correlation_id, current_correlation_id
from http_resilience._errors import (
    AttemptTimeoutError,
    BrokenCircuitError,
    RateLimitedError,
    ResilienceError,
    ResilienceLayerError,
    TotalTimeoutError,
)
from http_resilience._events import (
    AttemptEvent,
    BreakerEvent,
    HedgeEvent,
    HttpEvent,
    HttpEventListener,
    RejectionEvent,
    RetryEvent,
    TimeoutEvent,
)
from http_resilience._options import HttpResilienceOptions
from http_resilience._resumable import resumable_bytes, resumable_bytes_sync
from http_resilience._strategy_options import (
    BreakerOptions,
    HedgingOptions,
    LimiterOptions,
    RetryOptions,
)
from http_resilience._stream_decision import StreamRetryContext
from http_resilience._stream_options import PartialStreamPolicy, StreamRetryOptions
from http_resilience._stream_retry import (
    suppressed_failure,
    with_retry,
    with_retry_sync,
)
from http_resilience._transport import AsyncResilientTransport, ResilientTransport

__all__ = [
    "AsyncResilientTransport",
    "AttemptEvent",
    "AttemptTimeoutError",
    "BreakerEvent",
    "BreakerOptions",
    "BrokenCircuitError",
    "Clock",
    "HedgeEvent",
    "HedgingOptions",
    "HttpEvent",
    "HttpEventListener",
    "HttpResilienceOptions",
    "LimiterOptions",
    "PartialStreamPolicy",
    "RateLimitedError",
    "RejectionEvent",
    "ResilienceError",
    "ResilienceErrorMiddleware",
    "ResilienceLayerError",
    "ResiliencePipeline",
    "ResilientTransport",
    "RetryEvent",
    "RetryOptions",
    "StreamRetryContext",
    "StreamRetryOptions",
    "SystemClock",
    "TimeoutEvent",
    "TotalTimeoutError",
    "correlation_id",
    "create_async_client",
    "create_client",
    "current_correlation_id",
    "resumable_bytes",
    "resumable_bytes_sync",
    "suppressed_failure",
    "with_retry",
    "with_retry_sync",
]
