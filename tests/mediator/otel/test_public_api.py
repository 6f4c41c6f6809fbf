"""The public names of `mediator.otel`, pinned."""

from __future__ import annotations

from mediator import otel


def test_the_public_names_are_pinned_and_documented() -> None:
    assert otel.__all__ == [
        "DURATION_BUCKETS",
        "TELEMETRY",
        "OutboxGauges",
        "OutboxReading",
        "OutboxSource",
        "RetryReport",
        "TelemetryBehavior",
        "instrument_outbox",
        "outcome_class",
    ]
    for name in [
        "OutboxGauges",
        "OutboxReading",
        "OutboxSource",
        "RetryReport",
        "TelemetryBehavior",
        "instrument_outbox",
        "outcome_class",
    ]:
        assert (getattr(otel, name).__doc__ or "").strip(), name
    assert list(otel.DURATION_BUCKETS) == sorted(otel.DURATION_BUCKETS)


def test_a_provider_of_the_wrong_kind_is_refused_when_built() -> None:
    import pytest

    from mediator.otel import TelemetryBehavior

    with pytest.raises(TypeError, match="meter_provider must be an OpenTelemetry"):
        TelemetryBehavior(meter_provider="x")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="tracer_provider must be an OpenTelemetry"):
        TelemetryBehavior(tracer_provider=object())  # type: ignore[arg-type]
