"""`delay_before` to the exact figure: doubling, cap, and jitter only when on.

Written to close what mutation testing (`make mutation`) found the other backoff
tests let through.
"""

from __future__ import annotations

import pytest

from mediator_resilience import ResilienceMediatorOptions


def options(*, use_jitter: bool) -> ResilienceMediatorOptions:
    # Powers of two, so that every delay is exact in binary floating point.
    return ResilienceMediatorOptions.model_validate(
        {"base_delay": 0.25, "max_delay": 2, "use_jitter": use_jitter}
    )


def test_the_delay_doubles_exactly_up_to_the_cap() -> None:
    plain = options(use_jitter=False)
    assert [plain.delay_before(n) for n in range(1, 7)] == [
        0.25,
        0.5,
        1.0,
        2.0,
        2.0,
        2.0,
    ]
    assert plain.delay_before(10**6) == 2.0


@pytest.mark.parametrize("jitter", [0.5, 0.75, 0.99])
def test_without_jitter_the_factor_is_ignored(jitter: float) -> None:
    plain = options(use_jitter=False)
    assert [plain.delay_before(n, jitter) for n in (1, 2, 5)] == [0.25, 0.5, 2.0]


@pytest.mark.parametrize("jitter", [0.5, 0.75])
def test_with_jitter_the_capped_delay_is_scaled_by_the_factor(jitter: float) -> None:
    spread = options(use_jitter=True)
    assert [spread.delay_before(n, jitter) for n in (1, 2, 5)] == [
        0.25 * jitter,
        0.5 * jitter,
        2.0 * jitter,
    ]
    assert spread.delay_before(1) == 0.25  # the factor defaults to 1
