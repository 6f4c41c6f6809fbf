"""The stale cache's entries: bounded in count and bytes, keyed per credential.

An entry's key is a keyed hash (BLAKE2b, with a random key of this cache's
own) of the method, the URL and the request's ``Authorization`` and
``Cookie`` values: two credentials never share an entry, and the keys held in
memory reveal neither the credentials nor the URLs. The values of the request
headers a response's ``Vary`` names are hashed the same way, into the entry;
a request whose values differ is not served it.

Bounded: at most `max_entries` entries and `max_bytes` bytes (bodies and
headers), the least recently used dropped first; an entry larger than
`max_bytes` is never stored. An entry older than one already stored, or than
an answer that replaced it, is refused: the cache holds the last answer or
nothing.
"""

from __future__ import annotations

import marshal
import secrets
import threading
from collections import OrderedDict
from hashlib import blake2b
from typing import NamedTuple

import httpx

from http_resilience._strategies.stale_cache.rules import key_parts, vary_parts

__all__ = ["Entry", "StaleStore"]


class Entry(NamedTuple):
    """One stored answer.

    A named tuple: immutable, and made at a fifth of a frozen dataclass's
    cost, once for each answer stored.

    Attributes:
        status: Its status code.
        headers: Its headers, raw, as the host sent them.
        body: Its body, raw (still encoded, as ``Content-Encoding`` says).
        extensions: Its ``http_version`` and ``reason_phrase``.
        stored_at: When its head arrived, on the pipeline's clock.
        initial_age: The ``Age`` it came with, in seconds.
        window: Seconds after `stored_at` it may be served stale.
        vary: The names its ``Vary`` lists.
        varied: The keyed hash of the request's values for `vary`.
    """

    status: int
    headers: tuple[tuple[bytes, bytes], ...]
    body: bytes
    extensions: tuple[tuple[str, object], ...]
    stored_at: float
    initial_age: float
    window: float
    vary: tuple[str, ...]
    varied: bytes

    @property
    def size(self) -> int:
        """Bytes held: the body and the headers."""
        return len(self.body) + sum(
            len(name) + len(value) for name, value in self.headers
        )


class StaleStore:
    """The entries, least recently used first, under one lock (threads share it).

    Args:
        max_entries: The most entries held.
        max_bytes: The most bytes held, bodies and headers together.
    """

    __slots__ = (
        "_bytes",
        "_entries",
        "_keyed",
        "_lock",
        "_replaced",
        "max_bytes",
        "max_entries",
    )

    def __init__(self, *, max_entries: int, max_bytes: int) -> None:
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        # The hash keyed with this cache's secret, copied for each key.
        self._keyed = blake2b(key=secrets.token_bytes(32), digest_size=20)
        # Each entry with its size, so the bytes held are kept count of
        # without summing its headers again.
        self._entries: OrderedDict[bytes, tuple[Entry, int]] = OrderedDict()
        # When each of the last keys' entries was dropped for a newer answer;
        # as bounded as the entries.
        self._replaced: OrderedDict[bytes, float] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def hash(self, parts: list[bytes]) -> bytes:
        """The keyed hash of `parts`.

        What is hashed is `marshal`'s format 2 of the list: its count, then
        each part's length and bytes, so no two sequences of parts hash
        alike, whatever bytes they hold. Format 2, which has no references
        to objects seen before, so equal parts always give equal bytes.
        """
        digest = self._keyed.copy()
        digest.update(marshal.dumps(parts, 2))
        return digest.digest()

    def key(self, request: httpx.Request) -> bytes:
        """The key of `request`'s entry: method, URL and credentials, hashed."""
        return self.hash(key_parts(request))

    def varied(self, request: httpx.Request, names: tuple[str, ...]) -> bytes:
        """The keyed hash of `request`'s values for the headers `names`."""
        return self.hash(vary_parts(request, names)) if names else b""

    @property
    def size(self) -> tuple[int, int]:
        """The entries held and their bytes."""
        with self._lock:
            return len(self._entries), self._bytes

    def get(self, key: bytes) -> Entry | None:
        """The entry of `key`, now the most recently used; None if there is none."""
        with self._lock:
            held = self._entries.get(key)
            if held is None:
                return None
            self._entries.move_to_end(key)
            return held[0]

    def replace(
        self, key: bytes, now: float, entry: Entry | None = None, size: int = 0
    ) -> None:
        """A newer answer for `key` arrived at `now`: drop the entry it supersedes.

        And hold `entry` in its place when given: that answer, of `size`
        bytes at most `max_bytes`, `stored_at` `now` (what `put` would do
        next, under the same lock).
        """
        with self._lock:
            self._drop(key)
            replaced = self._replaced
            replaced[key] = now
            replaced.move_to_end(key)
            if len(replaced) > self.max_entries:
                replaced.popitem(last=False)
            if entry is not None:
                self._hold(key, entry, size)

    def drop(self, key: bytes) -> None:
        """Forget the entry of `key`, if any."""
        with self._lock:
            self._drop(key)

    def put(self, key: bytes, entry: Entry, size: int | None = None) -> bool:
        """Hold `entry` for `key`, dropping the least recently used to fit.

        `size`: its `Entry.size`, when known already. False when it is not
        held: larger than `max_bytes`, or older than the answer that
        replaced `key`'s last entry.
        """
        if size is None:
            size = entry.size
        if size > self.max_bytes:
            return False
        with self._lock:
            if self._replaced.get(key, -1.0) > entry.stored_at:
                return False
            held = self._entries.get(key)
            if held is not None:
                if held[0].stored_at > entry.stored_at:
                    return False
                self._bytes -= held[1]
                del self._entries[key]
            self._hold(key, entry, size)
            return True

    def _hold(self, key: bytes, entry: Entry, size: int) -> None:
        """Hold `entry` for `key` (which holds none), dropping the oldest to fit."""
        entries = self._entries
        while entries and (
            len(entries) >= self.max_entries or self._bytes + size > self.max_bytes
        ):
            _, (_, oldest) = entries.popitem(last=False)
            self._bytes -= oldest
        entries[key] = (entry, size)
        self._bytes += size

    def _drop(self, key: bytes) -> None:
        held = self._entries.pop(key, None)
        if held is not None:
            self._bytes -= held[1]
