"""Resilient httpx transports, and retry for streams that break half-way.

`with_retry` (and `with_retry_sync`) asks a stream's source again when it
breaks, without handing the consumer an item twice unless told to;
`resumable_bytes` (and `resumable_bytes_sync`) continues a broken httpx
response body with `Range` requests. The transports arrive with their issues.
"""

from http_resilience._clock import Clock, SystemClock
from http_resilience._resumable import resumable_bytes, resumable_bytes_sync
from http_resilience._stream_decision import StreamRetryContext
from http_resilience._stream_options import PartialStreamPolicy, StreamRetryOptions
from http_resilience._stream_retry import (
    suppressed_failure,
    with_retry,
    with_retry_sync,
)

__all__ = [
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
]
