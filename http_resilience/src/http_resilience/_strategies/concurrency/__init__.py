"""The concurrency limiter: permits, a bounded queue, and a refusal beyond it.

The strategy's folder: `options` (`ConcurrencyLimiterOptions`, its defaults,
`build_async`/`build_sync`), `limit` (the pure part: `ConcurrencyLimit`, the
counts that decide who gets in) and `strategy` (the two waiting limiters, the
refusal, and the two drivers).
"""
