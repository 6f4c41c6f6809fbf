"""The public names of `http_resilience`, pinned."""

from __future__ import annotations

import http_resilience as package
from http_resilience import testing


def test_the_public_names_are_pinned_and_sorted() -> None:
    assert package.__all__ == sorted(package.__all__)
    assert set(package.__all__) == {
        "Clock",
        "PartialStreamPolicy",
        "StreamRetryContext",
        "StreamRetryOptions",
        "SystemClock",
        "resumable_bytes",
        "resumable_bytes_sync",
        "suppressed_failure",
        "with_retry",
        "with_retry_sync",
    }
    for name in package.__all__:
        assert getattr(package, name) is not None


def test_the_testing_module_offers_the_fake_clock() -> None:
    assert testing.__all__ == ["FakeClock"]


def test_every_public_name_is_documented() -> None:
    for name in [*package.__all__, "testing"]:
        target = getattr(package, name)
        assert (target.__doc__ or "").strip(), name
