"""The time-based rate limiter: at most so many requests a second, per host or shared.

The strategy's folder: `options` (`RateLimiterOptions`, its bounds,
`build_async`/`build_sync`), `bucket` (the pure part: `TokenBucket`, told the
time) and `strategy` (which bucket a call takes from, the refusal, and the two
drivers).
"""
