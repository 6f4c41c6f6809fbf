"""A call refused in this process: reported once, raised with one wording.

Every strategy that refuses a call before it is sent (the rate limiter, the
published quota, the fleet's quota) reports a `RejectionEvent` and raises a
`RateLimitedError` whose message says where, why and when to come back.
`rate_limited` does both halves, so the wording and the event stay together.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from http_resilience._core.errors import RateLimitedError

if TYPE_CHECKING:
    from http_resilience._core.call import Call
    from http_resilience._core.telemetry import Telemetry

__all__ = ["rate_limited"]


def rate_limited(
    telemetry: Telemetry,
    call: Call,
    reason: Literal["rate_limit", "quota"],
    why: str,
    when: str,
    wait: float,
) -> RateLimitedError:
    """Report the refusal of `call`; the error to raise, waiting `wait` seconds.

    The message reads ``"<where>: refused, <why>; <when> <wait> s"``.
    """
    telemetry.rejection(call.method, call.host, reason)
    return RateLimitedError(
        f"{call.where()}: refused, {why}; {when} {wait:.3g} s",
        retry_after=wait,
        reason=reason,
    )
