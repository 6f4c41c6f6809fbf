"""The public names of `http_resilience.otel`, pinned."""

from __future__ import annotations

from http_resilience import otel


def test_the_public_names_are_pinned_and_documented() -> None:
    assert otel.__all__ == [
        "DURATION_BUCKETS",
        "HttpMetrics",
        "HttpTracing",
        "outcome_class",
    ]
    for name in ["HttpMetrics", "HttpTracing", "outcome_class"]:
        assert (getattr(otel, name).__doc__ or "").strip(), name
    assert list(otel.DURATION_BUCKETS) == sorted(otel.DURATION_BUCKETS)


def test_a_provider_of_the_wrong_kind_is_refused_when_built() -> None:
    import pytest

    from http_resilience.otel import HttpMetrics, HttpTracing

    with pytest.raises(TypeError, match="meter_provider must be an OpenTelemetry"):
        HttpMetrics(meter_provider=3)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="tracer_provider must be an OpenTelemetry"):
        HttpTracing(tracer_provider="global")  # type: ignore[arg-type]
