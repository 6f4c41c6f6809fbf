"""Resilient httpx transports, and retry for streams that break half-way.

`AsyncResilientTransport` and `ResilientTransport` wrap any httpx transport in
the standard pipeline (concurrency limiter, total timeout, retry, per-host
circuit breaker, attempt timeout), configured by `HttpResilienceOptions`, or in
a `ResiliencePipeline` of your own (hedging, a fallback and a stale cache
included);
`create_async_client` and `create_client` build long-lived clients on them,
and `HttpClientFactory` keeps named ones, each with options or a pipeline of
its own (`http_resilience.injector` binds one for `injector`).
`with_retry` (and `with_retry_sync`) asks a stream's source again when it
breaks, without handing the consumer an item twice unless told to;
`resumable_bytes` (and `resumable_bytes_sync`) continues a broken httpx
response body with `Range` requests.
"""

from http_resilience._clients.client import create_async_client, create_client
from http_resilience._clients.factory import HttpClientFactory
from http_resilience._core.clock import Clock, SystemClock
from http_resilience._core.correlation import (
    correlation_id,
    current_correlation_id,
)
from http_resilience._core.deadline import deadline_scope, remaining_time
from http_resilience._core.degraded import Degradation, degradation
from http_resilience._core.errors import (
    AttemptStalledError,
    AttemptTimeoutError,
    BrokenCircuitError,
    RateLimitedError,
    ResilienceError,
    ResilienceLayerError,
    ResponseTooLargeError,
    TotalTimeoutError,
)
from http_resilience._core.events import (
    AttemptEvent,
    BaselineEvent,
    BreakerEvent,
    ConcurrencyLimitEvent,
    HedgeEvent,
    HttpEvent,
    HttpEventListener,
    NestedRetryEvent,
    RejectionEvent,
    RejectionReason,
    RequestEvent,
    RetryEvent,
    TimeoutEvent,
    TripRule,
)
from http_resilience._core.suppressed import suppressed_failure
from http_resilience._fleet.state import SharedState
from http_resilience._health.control import CircuitControl
from http_resilience._health.snapshot import (
    AdaptiveLimitHealth,
    BaselineHealth,
    BudgetHealth,
    ClientHealth,
    HostHealth,
    LimiterHealth,
    health,
)
from http_resilience._middleware.asgi import ResilienceErrorMiddleware
from http_resilience._middleware.asgi_context import ResilienceContextMiddleware
from http_resilience._pipelines.custom import ResiliencePipeline
from http_resilience._pipelines.standard import HttpResilienceOptions
from http_resilience._primitives.public_names import publish as _publish
from http_resilience._strategies.adaptive.options import AdaptiveLimiterOptions
from http_resilience._strategies.breaker.options import BreakerOptions
from http_resilience._strategies.budget.options import RetryBudgetOptions
from http_resilience._strategies.concurrency.options import ConcurrencyLimiterOptions
from http_resilience._strategies.hedging.options import HedgingOptions
from http_resilience._strategies.rate_limit.options import RateLimiterOptions
from http_resilience._strategies.retry.options import RetryOptions
from http_resilience._strategies.stale_cache.options import StaleCacheOptions
from http_resilience._streams.decision import StreamRetryContext
from http_resilience._streams.options import PartialStreamPolicy, StreamRetryOptions
from http_resilience._streams.resumable import resumable_bytes
from http_resilience._streams.resumable_sync import resumable_bytes_sync
from http_resilience._streams.retry import with_retry
from http_resilience._streams.retry_sync import with_retry_sync
from http_resilience._transport.transport import (
    AsyncResilientTransport,
    ResilientTransport,
)

LimiterOptions = ConcurrencyLimiterOptions
"""The name `ConcurrencyLimiterOptions` had before; the same class."""

__all__ = [
    "AdaptiveLimitHealth",
    "AdaptiveLimiterOptions",
    "AsyncResilientTransport",
    "AttemptEvent",
    "AttemptStalledError",
    "AttemptTimeoutError",
    "BaselineEvent",
    "BaselineHealth",
    "BreakerEvent",
    "BreakerOptions",
    "BrokenCircuitError",
    "BudgetHealth",
    "CircuitControl",
    "ClientHealth",
    "Clock",
    "ConcurrencyLimitEvent",
    "ConcurrencyLimiterOptions",
    "Degradation",
    "HedgeEvent",
    "HedgingOptions",
    "HostHealth",
    "HttpClientFactory",
    "HttpEvent",
    "HttpEventListener",
    "HttpResilienceOptions",
    "LimiterHealth",
    "LimiterOptions",
    "NestedRetryEvent",
    "PartialStreamPolicy",
    "RateLimitedError",
    "RateLimiterOptions",
    "RejectionEvent",
    "RejectionReason",
    "RequestEvent",
    "ResilienceContextMiddleware",
    "ResilienceError",
    "ResilienceErrorMiddleware",
    "ResilienceLayerError",
    "ResiliencePipeline",
    "ResilientTransport",
    "ResponseTooLargeError",
    "RetryBudgetOptions",
    "RetryEvent",
    "RetryOptions",
    "SharedState",
    "StaleCacheOptions",
    "StreamRetryContext",
    "StreamRetryOptions",
    "SystemClock",
    "TimeoutEvent",
    "TotalTimeoutError",
    "TripRule",
    "correlation_id",
    "create_async_client",
    "create_client",
    "current_correlation_id",
    "deadline_scope",
    "degradation",
    "health",
    "remaining_time",
    "resumable_bytes",
    "resumable_bytes_sync",
    "suppressed_failure",
    "with_retry",
    "with_retry_sync",
]

_publish(__name__, __all__)
