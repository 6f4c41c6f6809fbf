"""The stale cache: the last good answer to a safe read, served when the host fails.

The strategy's folder: `options` (`StaleCacheOptions`, its bounds and its
build), `rules` (the pure part: what may be stored and served, read from the
request's and the response's headers), `store` (the bounded entries, keyed
per credential, told the time) and `strategy` (the recording body streams and
the two drivers).
"""
