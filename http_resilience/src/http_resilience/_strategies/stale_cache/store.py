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

import hashlib
import secrets
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

import httpx

__all__ = ["Entry", "StaleStore"]

_CREDENTIALS: Final = ("authorization", "cookie")


@dataclass(frozen=True, slots=True)
class Entry:
    """One stored answer.

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
        "_lock",
        "_replaced",
        "_secret",
        "max_bytes",
        "max_entries",
    )

    def __init__(self, *, max_entries: int, max_bytes: int) -> None:
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self._secret = secrets.token_bytes(32)
        self._entries: OrderedDict[bytes, Entry] = OrderedDict()
        # When each of the last keys' entries was dropped for a newer answer;
        # as bounded as the entries.
        self._replaced: OrderedDict[bytes, float] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def _hash(self, parts: Sequence[bytes]) -> bytes:
        digest = hashlib.blake2b(key=self._secret, digest_size=20)
        for part in parts:
            # Length-prefixed, so no two sequences of parts hash alike.
            digest.update(len(part).to_bytes(8, "big"))
            digest.update(part)
        return digest.digest()

    def key(self, request: httpx.Request) -> bytes:
        """The key of `request`'s entry: method, URL and credentials, hashed."""
        parts = [request.method.encode(), str(request.url).encode()]
        headers = request.headers
        for name in _CREDENTIALS:
            values = headers.get_list(name)
            parts.append(str(len(values)).encode())
            parts.extend(value.encode() for value in values)
        return self._hash(parts)

    def varied(self, request: httpx.Request, names: tuple[str, ...]) -> bytes:
        """The keyed hash of `request`'s values for the headers `names`."""
        if not names:
            return b""
        headers = request.headers
        parts: list[bytes] = []
        for name in names:
            values = headers.get_list(name)
            parts.append(name.encode())
            parts.append(str(len(values)).encode())
            parts.extend(value.encode() for value in values)
        return self._hash(parts)

    @property
    def size(self) -> tuple[int, int]:
        """The entries held and their bytes."""
        with self._lock:
            return len(self._entries), self._bytes

    def get(self, key: bytes) -> Entry | None:
        """The entry of `key`, now the most recently used; None if there is none."""
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None:
                self._entries.move_to_end(key)
            return entry

    def replace(self, key: bytes, now: float) -> None:
        """A newer answer for `key` arrived at `now`: drop the entry it supersedes."""
        with self._lock:
            self._drop(key)
            replaced = self._replaced
            replaced[key] = now
            replaced.move_to_end(key)
            if len(replaced) > self.max_entries:
                replaced.popitem(last=False)

    def drop(self, key: bytes) -> None:
        """Forget the entry of `key`, if any."""
        with self._lock:
            self._drop(key)

    def put(self, key: bytes, entry: Entry) -> bool:
        """Hold `entry` for `key`, dropping the least recently used to fit.

        False when it is not held: larger than `max_bytes`, or older than
        the answer that replaced `key`'s last entry.
        """
        size = entry.size
        if size > self.max_bytes:
            return False
        with self._lock:
            if self._replaced.get(key, -1.0) > entry.stored_at:
                return False
            held = self._entries.get(key)
            if held is not None and held.stored_at > entry.stored_at:
                return False
            self._drop(key)
            entries = self._entries
            while entries and (
                len(entries) >= self.max_entries or self._bytes + size > self.max_bytes
            ):
                _, oldest = entries.popitem(last=False)
                self._bytes -= oldest.size
            entries[key] = entry
            self._bytes += size
            return True

    def _drop(self, key: bytes) -> None:
        entry = self._entries.pop(key, None)
        if entry is not None:
            self._bytes -= entry.size
