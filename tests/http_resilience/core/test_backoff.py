"""The backoff of the two retry decisions, exactly: jitter, its bounds, the body.

`RetryDecision` (the transport's retry) and `StreamRetryDecision` (`with_retry`).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

import httpx
import pytest

from http_resilience import StreamRetryOptions
from http_resilience._strategies.retry.decision import RetryDecision
from http_resilience._streams.decision import StreamRetryDecision

URL = "http://service.test/orders"


def decision(random: Callable[[], float]) -> RetryDecision:
    return RetryDecision(
        max_retry_attempts=3,
        base_delay=2.0,
        retry_unsafe_methods=False,
        random=random,
    )


def stream_decision(
    random: Callable[[], float], *, should_retry: Callable[[Exception], bool]
) -> StreamRetryDecision:
    return StreamRetryDecision(
        StreamRetryOptions(
            base_delay=timedelta(seconds=2), random=random, should_retry=should_retry
        )
    )


def always(failure: Exception) -> bool:
    return True


@pytest.mark.parametrize(
    ("draw", "factor"), [(0.0, 0.5), (0.25, 0.625), (0.5, 0.75), (0.75, 0.875)]
)
def test_the_jitter_factor_is_half_plus_half_the_draw(
    draw: float, factor: float
) -> None:
    assert [decision(lambda: draw).delay(n, None) for n in (1, 2, 3)] == [
        2.0 * factor,
        4.0 * factor,
        8.0 * factor,
    ]
    stream = stream_decision(lambda: draw, should_retry=always)
    assert [stream.delay(n) for n in (1, 2, 3)] == [
        2.0 * factor,
        4.0 * factor,
        8.0 * factor,
    ]


@pytest.mark.parametrize("draw", [1.0, 1.5, -0.25])
def test_a_draw_outside_zero_to_one_is_refused_by_name(draw: float) -> None:
    with pytest.raises(ValueError, match="jitter source") as refused:
        decision(lambda: draw).delay(1, None)
    assert (
        str(refused.value)
        == f"the jitter source must return a float in [0, 1), got {draw!r}"
    )

    with pytest.raises(ValueError, match="random must return") as refused:
        stream_decision(lambda: draw, should_retry=always).delay(1)
    assert str(refused.value) == (
        f"StreamRetryOptions.random must return a float in [0, 1), got {draw!r}"
    )


def test_the_body_as_it_was_before_the_first_attempt_decides() -> None:
    # A transport that read a one-shot body leaves a buffered copy on the
    # request; the body the caller gave is what may or may not be sent again.
    request = httpx.Request("PUT", URL, content=b"order")
    one_shot = httpx.Request("PUT", URL, content=iter([b"order"])).stream
    subject = decision(lambda: 0.0)

    assert subject.will_retry(request) is True
    assert subject.will_retry(request, one_shot) is False
    assert subject.will_retry(request, request.stream) is True


class Abort(BaseException):
    """Not an `Exception`, and in no list of cancellations."""


def test_a_stream_never_retries_what_is_not_an_exception() -> None:
    subject = stream_decision(lambda: 0.0, should_retry=always)
    assert subject.delay_before_retry(1, 0, Abort()) is None
    assert subject.delay_before_retry(1, 0, ValueError()) == 1.0
