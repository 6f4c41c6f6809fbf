"""Opt-in retry for the mediator: mark an idempotent request `@retryable`.

`RetryBehavior` retries its transient failures (everything but the `DomainError`
family and cancellation) with exponential backoff and jitter, outside the
transaction, so every attempt runs in a fresh one. It is built on tenacity and
never imports httpx, `http_resilience` or SQLAlchemy.
"""

from mediator_resilience._behavior import RetryBehavior
from mediator_resilience._events import RetryEvent, RetryListener
from mediator_resilience._marker import is_retryable, retryable
from mediator_resilience._module import ResilienceMediatorModule
from mediator_resilience._options import ResilienceMediatorOptions
from mediator_resilience._primitives.clock import Clock, SystemClock
from mediator_resilience._transient import is_transient_failure

__all__ = [
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

from mediator_resilience._primitives.public_names import publish as _publish

_publish(__name__, __all__)
