"""Durations no runtime can wait are refused when the options are built.

Before, options took up to 999,999,999 days, and a sync transport's backoff
(`time.sleep`) or socket timeout then raised `OverflowError` mid-call.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

import httpx
import pydantic
import pytest

from http_resilience import (
    HttpResilienceOptions,
    ResiliencePipeline,
    ResilientTransport,
    StreamRetryOptions,
)

HUGE = "P999999999D"
LIMIT = (
    "may be at most 24 days (MAX_DURATION), the longest wait that sleeps, "
    "thread waits and socket timeouts take on every platform; got 'P999999999D'"
)


def test_a_sync_retry_with_a_delay_no_sleep_can_take_fails_at_validation() -> None:
    # The system clock: on the old code, the first backoff raised OverflowError.
    hits: list[httpx.Request] = []

    def unavailable(request: httpx.Request) -> httpx.Response:
        hits.append(request)
        return httpx.Response(503)

    def call() -> httpx.Response:
        pipeline = ResiliencePipeline().add_retry(base_delay=HUGE)
        transport = ResilientTransport(
            httpx.MockTransport(unavailable), pipeline=pipeline
        )
        return transport.handle_request(httpx.Request("GET", "https://example.test/"))

    with pytest.raises(pydantic.ValidationError) as raised:
        call()
    [error] = raised.value.errors()
    assert error["loc"] == ("base_delay",)
    assert error["msg"] == f"Value error, base_delay {LIMIT}"
    assert hits == []


@pytest.mark.parametrize(
    "field",
    [
        "base_delay",
        "attempt_timeout",
        "total_request_timeout",
        "sampling_duration",
        "break_duration",
    ],
)
def test_every_duration_of_the_standard_pipeline_has_the_limit(field: str) -> None:
    with pytest.raises(pydantic.ValidationError) as raised:
        HttpResilienceOptions.model_validate({field: HUGE})
    [error] = raised.value.errors()
    assert error["loc"] == (field,)
    assert error["msg"] == f"Value error, {field} {LIMIT}"


@pytest.mark.parametrize(
    ("add", "field"),
    [
        (lambda: ResiliencePipeline().add_timeout(HUGE), "timeout"),
        (
            lambda: ResiliencePipeline().add_breaker(break_duration=HUGE),
            "break_duration",
        ),
        (
            lambda: ResiliencePipeline().add_breaker(sampling_duration=HUGE),
            "sampling_duration",
        ),
        (lambda: ResiliencePipeline().add_hedging(delay=HUGE), "delay"),
        (lambda: StreamRetryOptions(max_delay=HUGE), "max_delay"),
    ],
)
def test_every_other_duration_has_the_limit(
    add: Callable[[], object], field: str
) -> None:
    with pytest.raises(pydantic.ValidationError) as raised:
        add()
    [error] = raised.value.errors()
    assert error["loc"] == (field,)
    assert error["msg"] == f"Value error, {field} {LIMIT}"


def test_the_limit_itself_is_taken() -> None:
    limit = timedelta(days=24)
    options = HttpResilienceOptions(
        base_delay=limit,
        max_delay=limit,
        attempt_timeout="P1D",
        total_request_timeout=limit,
        sampling_duration=limit,
        break_duration=limit,
    )
    assert options.total_request_timeout == limit
    assert StreamRetryOptions(base_delay=limit, max_delay="576h").max_delay == limit
