"""The public names of `http_resilience`, pinned."""

from __future__ import annotations

from typing import get_args

import http_resilience as package
from http_resilience import testing


def test_the_public_names_are_pinned_and_sorted() -> None:
    assert package.__all__ == sorted(package.__all__)
    assert set(package.__all__) == {
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
    }
    for name in package.__all__:
        assert getattr(package, name) is not None


def test_the_testing_module_offers_the_fake_clock() -> None:
    assert testing.__all__ == [
        "EventRecorder",
        "FakeClock",
        "ScriptedAnswer",
        "ScriptedTransport",
        "TestingScope",
        "is_testing",
        "set_testing",
    ]


# Type aliases carry no docstring of their own; `_events` documents them.
ALIASES = {"HttpEvent", "HttpEventListener", "RejectionReason", "TripRule"}


def test_every_public_name_is_documented() -> None:
    for name in [*sorted(set(package.__all__) - ALIASES), "testing"]:
        target = getattr(package, name)
        assert (target.__doc__ or "").strip(), name


def test_the_event_aliases_name_every_event() -> None:
    assert set(get_args(package.HttpEvent)) == {
        package.AttemptEvent,
        package.BaselineEvent,
        package.BreakerEvent,
        package.ConcurrencyLimitEvent,
        package.HedgeEvent,
        package.NestedRetryEvent,
        package.RejectionEvent,
        package.RequestEvent,
        package.RetryEvent,
        package.TimeoutEvent,
    }


def test_every_error_is_a_resilience_error() -> None:
    for name in package.__all__:
        target = getattr(package, name)
        if isinstance(target, type) and name.endswith("Error"):
            assert issubclass(target, package.ResilienceError), name


def test_the_limiter_options_keep_their_old_name() -> None:
    assert package.LimiterOptions is package.ConcurrencyLimiterOptions
    assert package.ConcurrencyLimiterOptions.__name__ == "ConcurrencyLimiterOptions"
