"""Published quota: a host that says its allowance is spent is not sent more.

The strategy's folder: `options` (`QuotaOptions`, its defaults and the legacy
names' checks, `build_async`/`build_sync`), `book` (the pure part: which quotas
are spent, and `QuotaBook`, the hosts refused until when, told the time) and
`strategy` (`QuotaStrategy`, which reads each answer, and its two drivers).
"""
