"""The adaptive concurrency limiter: a per-host limit discovered from latency.

The strategy's folder: `options` (`AdaptiveLimiterOptions`, its defaults,
`build_async`/`build_sync`), `limit` (the pure part: `AdaptiveLimit`, the
counts that decide who gets in and the gradient controller that moves the
limit, told the time) and `strategy` (the per-host registry, the refusal, and
the two drivers).
"""
