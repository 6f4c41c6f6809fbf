"""Type-checked only (mypy --strict and pyright strict), never run.

Every duration option takes every documented form at the call site (seconds
as an int or a float, ``"200ms"``-style strings, ISO 8601, `timedelta`) and
reads back as a `timedelta`; a value of another type is an error, which the
``# type: ignore[arg-type]`` comments below pin: mypy (``warn_unused_ignores``)
and pyright (the setting on the first line) both report one that is unneeded.
"""
# pyright: reportUnnecessaryTypeIgnoreComment=true

from __future__ import annotations

from datetime import timedelta
from typing import assert_type

from http_resilience import (
    BreakerOptions,
    HedgingOptions,
    HttpResilienceOptions,
    ResiliencePipeline,
    RetryBudgetOptions,
    RetryOptions,
    StreamRetryOptions,
)
from mediator import IdempotencyOptions
from mediator_resilience import ResilienceMediatorOptions


def every_form_of_the_standard_pipeline() -> None:
    options = HttpResilienceOptions(
        base_delay="100ms",
        attempt_timeout=2,
        total_request_timeout=30.5,
        sampling_duration="PT1M",
        break_duration=timedelta(seconds=5),
    )
    assert_type(options.base_delay, timedelta)
    assert_type(options.attempt_timeout, timedelta)
    assert_type(options.total_request_timeout, timedelta)
    assert_type(options.sampling_duration, timedelta)
    assert_type(options.break_duration, timedelta)
    HttpResilienceOptions(
        base_delay=timedelta(milliseconds=100),
        attempt_timeout="2s",
        total_request_timeout="PT30S",
        sampling_duration=60,
        break_duration=0.5,
    )
    HttpResilienceOptions(base_delay=0.1, attempt_timeout=timedelta(seconds=2))
    HttpResilienceOptions(base_delay=1, total_request_timeout="1m")
    HttpResilienceOptions(base_delay="PT0.1S", sampling_duration=timedelta(1))
    HttpResilienceOptions(break_duration="5s", max_retry_attempts=2)


def every_form_of_the_strategies() -> None:
    assert_type(RetryOptions(base_delay="200ms").base_delay, timedelta)
    RetryOptions(base_delay=2)
    RetryOptions(base_delay=0.2)
    RetryOptions(base_delay="PT0.2S")
    RetryOptions(base_delay=timedelta(milliseconds=200))

    breaker = BreakerOptions(sampling_duration="30s", break_duration=5)
    assert_type(breaker.sampling_duration, timedelta)
    assert_type(breaker.break_duration, timedelta)
    BreakerOptions(sampling_duration=30.0, break_duration="PT5S")
    BreakerOptions(sampling_duration=timedelta(seconds=30), break_duration=0.5)
    BreakerOptions(sampling_duration="PT30S", break_duration=timedelta(seconds=5))
    BreakerOptions(sampling_duration=30, break_duration="5s")

    assert_type(HedgingOptions(delay=0.2).delay, timedelta)
    HedgingOptions(delay=1)
    HedgingOptions(delay="200ms")
    HedgingOptions(delay="PT0.2S")
    HedgingOptions(delay=timedelta(milliseconds=200))

    budget = RetryBudgetOptions(retry_budget_window="PT10S")
    assert_type(budget.retry_budget_window, timedelta)
    RetryBudgetOptions(retry_budget_window=10)

    ResiliencePipeline().add_timeout(2).add_timeout(0.5).add_timeout("300ms")
    ResiliencePipeline().add_timeout("PT2S").add_timeout(timedelta(seconds=2))


def every_form_of_stream_retry() -> None:
    options = StreamRetryOptions(base_delay="200ms", max_delay=30)
    assert_type(options.base_delay, timedelta)
    assert_type(options.max_delay, timedelta)
    StreamRetryOptions(base_delay=0.2, max_delay="PT30S")
    StreamRetryOptions(base_delay=timedelta(milliseconds=200), max_delay=30.0)
    StreamRetryOptions(base_delay=1, max_delay=timedelta(seconds=30))
    StreamRetryOptions(base_delay="PT0.2S", max_delay="30s")


def every_form_of_the_mediator_retry() -> None:
    options = ResilienceMediatorOptions(base_delay="200ms", max_delay=30)
    assert_type(options.base_delay, timedelta)
    assert_type(options.max_delay, timedelta)
    ResilienceMediatorOptions(base_delay=0.2, max_delay="PT30S")
    ResilienceMediatorOptions(base_delay=timedelta(milliseconds=200), max_delay=30.0)
    ResilienceMediatorOptions(base_delay=1, max_delay=timedelta(seconds=30))
    ResilienceMediatorOptions(base_delay="PT0.2S", max_delay="30s")
    limited = ResilienceMediatorOptions(max_retry_duration="2m")
    assert_type(limited.max_retry_duration, timedelta | None)
    ResilienceMediatorOptions(max_retry_duration=None)
    ResilienceMediatorOptions(max_retry_duration=1.5)
    ResilienceMediatorOptions(max_retry_duration=timedelta(minutes=2))


def every_form_of_idempotency() -> None:
    options = IdempotencyOptions(retention="P1D", lease=120)
    assert_type(options.retention, timedelta)
    assert_type(options.lease, timedelta)
    IdempotencyOptions(retention=timedelta(days=1), lease=1.5)


def every_form_of_statuses_and_methods() -> None:
    """They too take more than the sets they hold."""
    retry = RetryOptions(retry_on_status="429, 500-504", retry_methods="GET, PUT")
    assert_type(retry.retry_on_status, frozenset[int])
    assert_type(retry.retry_methods, frozenset[str])
    RetryOptions(retry_on_status=[429, range(500, 505)], retry_methods=["GET"])
    RetryOptions(retry_on_status=503)
    BreakerOptions(breaker_on_status={500, 503})
    HttpResilienceOptions(
        retry_on_status="503", breaker_on_status=[range(500, 600)], retry_methods="GET"
    )


def wrong_types_are_errors() -> None:
    HttpResilienceOptions(base_delay=[1])  # type: ignore[arg-type]
    HttpResilienceOptions(attempt_timeout=None)  # type: ignore[arg-type]
    HttpResilienceOptions(total_request_timeout=b"30s")  # type: ignore[arg-type]
    HttpResilienceOptions(sampling_duration={"s": 30})  # type: ignore[arg-type]
    HttpResilienceOptions(break_duration=object())  # type: ignore[arg-type]
    HttpResilienceOptions(max_retry_attempts="3")  # type: ignore[arg-type]
    RetryOptions(base_delay=None)  # type: ignore[arg-type]
    BreakerOptions(break_duration=(5,))  # type: ignore[arg-type]
    HedgingOptions(delay=[0.2])  # type: ignore[arg-type]
    ResiliencePipeline().add_timeout(None)  # type: ignore[arg-type]
    StreamRetryOptions(max_delay=None)  # type: ignore[arg-type]
    ResilienceMediatorOptions(base_delay=None)  # type: ignore[arg-type]
    ResilienceMediatorOptions(max_delay=[30])  # type: ignore[arg-type]
    ResilienceMediatorOptions(max_retry_duration=object())  # type: ignore[arg-type]
    RetryBudgetOptions(retry_budget_window=None)  # type: ignore[arg-type]
    IdempotencyOptions(lease=object())  # type: ignore[arg-type]
    IdempotencyOptions(retention=[1])  # type: ignore[arg-type]
    RetryOptions(retry_on_status=5.0)  # type: ignore[arg-type]
    RetryOptions(retry_methods=1)  # type: ignore[arg-type]


def unknown_fields_are_errors() -> None:
    HttpResilienceOptions(max_retries=3)  # type: ignore[call-arg]
    ResilienceMediatorOptions(retries=3)  # type: ignore[call-arg]
