"""Type-checked only (mypy --strict and pyright strict), never run.

`AdmissionMiddleware` wraps any ASGI app and mounts in FastAPI with its
options; a partition returns any hashable key or None; `health` is typed.
"""

from __future__ import annotations

from collections.abc import MutableMapping
from random import Random
from typing import Any, assert_type

from fastapi import FastAPI

from http_resilience import AdaptiveLimiterOptions
from http_resilience.asgi import AdmissionHealth, AdmissionMiddleware
from http_resilience.testing import FakeClock


def tenant(scope: MutableMapping[str, Any]) -> str | None:
    user = scope.get("user")
    return None if user is None else str(user)


def account(scope: MutableMapping[str, Any]) -> int:
    return 7


def mounted(app: FastAPI) -> None:
    app.add_middleware(
        AdmissionMiddleware,
        limiter=AdaptiveLimiterOptions(max_limit=200, queue_limit=50),
        partition=tenant,
        partition_share=0.25,
    )
    app.add_middleware(AdmissionMiddleware)


def wrapped(app: FastAPI) -> None:
    admitted = AdmissionMiddleware(
        app, partition=account, clock=FakeClock(), random=Random(1)
    )
    health = admitted.health()
    assert_type(health, AdmissionHealth)
    assert_type(health.limit, int)
    assert_type(health.baseline_rtt, float)
    assert_type(admitted.share(), int)
    AdmissionMiddleware(app, limiter=AdaptiveLimiterOptions(), partition=None)
