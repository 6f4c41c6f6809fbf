"""What hedging decides before the race: which requests it hedges, what a refusal is.

Pure: it reads the request, nothing else.
"""

from __future__ import annotations

from typing import Final

import httpx

from http_resilience._core.classify import LOCAL_REFUSALS, is_replayable

__all__ = ["HEDGED_METHODS", "REFUSALS", "is_hedged"]

HEDGED_METHODS: Final = frozenset({"GET", "HEAD", "OPTIONS", "TRACE"})
"""The safe methods: two copies in flight change nothing on the server. PUT and
DELETE are idempotent in sequence, not in parallel, and are not hedged."""

REFUSALS: Final = LOCAL_REFUSALS
"""What a copy raises when a strategy inside the hedging refused to send it. A
half-open breaker refuses every copy but its probe, so a hedge of the probe's
own call is refused while the probe is in flight."""


def is_hedged(request: httpx.Request) -> bool:
    """Whether hedging may send `request` more than once.

    Its method must be safe (`HEDGED_METHODS`) and its body replayable.
    """
    return request.method in HEDGED_METHODS and is_replayable(request.stream)
