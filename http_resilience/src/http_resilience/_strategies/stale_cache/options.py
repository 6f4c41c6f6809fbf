"""The stale cache's options: how stale an answer may be, and the bounds.

`StaleCacheOptions` (for `ResiliencePipeline.add_stale_cache`), its
defaults, and its build.
"""

from __future__ import annotations

from typing import Final

from pydantic import BaseModel

from http_resilience._core.fields import FROZEN, PositiveCount, PositiveDuration
from http_resilience._core.step_defaults import SyncStepDefaults
from http_resilience._strategies.stale_cache.strategy import (
    AsyncStaleCache,
    StaleCacheStrategy,
    SyncStaleCache,
)

__all__ = [
    "DEFAULT_MAX_BYTES",
    "DEFAULT_MAX_ENTRIES",
    "DEFAULT_STORE_PRIVATE",
    "StaleCacheOptions",
]

DEFAULT_MAX_ENTRIES: Final = 1000
DEFAULT_MAX_BYTES: Final = 16 * 1024 * 1024
DEFAULT_STORE_PRIVATE: Final = False


class StaleCacheOptions(SyncStepDefaults, BaseModel):
    """A stale-if-error cache (RFC 5861) of safe reads, for a custom pipeline.

    The last good answer to each GET or HEAD is kept (its body once the
    caller has read it to the end) and served again, marked stale, when a
    later call to the same URL with the same credentials fails after
    everything inside the cache gave up: a failure status (408, 429, the 5xx
    but 501 and 505), a transport failure or timeout, an open breaker
    (`BrokenCircuitError`), a limiter or a quota that refused
    (`RateLimitedError`). While the host answers, every call goes to it: the
    cache never answers in its place.

    Attributes:
        max_stale: How long after it was received an answer may still be
            served stale: the business decision of how stale is acceptable,
            so it has no default. More than zero, at most 24 days. A
            response's own ``Cache-Control: stale-if-error=N`` shortens it
            to its ``max-age`` plus N seconds.
        max_entries: The most answers kept, the least recently used dropped
            first. Default 1000.
        max_bytes: The most bytes kept, bodies and headers together; an
            answer larger than this is never kept. Default 16 MiB.
        store_private: Keep answers that say ``Cache-Control: private``
            too (each is keyed by its request's credentials anyway).
            Default False.

    Raises:
        pydantic.ValidationError: On construction, naming every invalid,
            unknown or missing field.

    Example:
        >>> StaleCacheOptions(max_stale="10m").max_entries
        1000
    """

    model_config = FROZEN

    max_stale: PositiveDuration
    max_entries: PositiveCount = DEFAULT_MAX_ENTRIES
    max_bytes: PositiveCount = DEFAULT_MAX_BYTES
    store_private: bool = DEFAULT_STORE_PRIVATE

    _label = "stale cache"
    _strategy_kind = StaleCacheStrategy
    _async_driver = AsyncStaleCache
    _sync_driver = SyncStaleCache
