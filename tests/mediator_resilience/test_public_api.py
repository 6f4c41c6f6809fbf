from __future__ import annotations

import mediator_resilience
import mediator_resilience.testing


def test_the_public_names_are_pinned_and_sorted() -> None:
    assert mediator_resilience.__all__ == sorted(mediator_resilience.__all__)
    assert mediator_resilience.__all__ == [
        "Clock",
        "ResilienceMediatorModule",
        "ResilienceMediatorOptions",
        "RetryBehavior",
        "RetryEvent",
        "RetryListener",
        "SystemClock",
        "is_retryable",
        "is_transient_failure",
        "retryable",
    ]
    assert mediator_resilience.testing.__all__ == [
        "EventRecorder",
        "FakeClock",
        "TestingScope",
        "is_testing",
        "set_testing",
    ]
