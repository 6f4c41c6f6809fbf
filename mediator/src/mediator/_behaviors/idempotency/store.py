"""What `IdempotencyBehavior` asks of a store: claim a key, complete it, release it.

The contract between the behavior (in `mediator`) and a store (the SQLAlchemy
one is in `mediator.sqlalchemy`). A store keeps one record per (scope, key):

- ``scope``: who and what, as ``"s1:"`` and 64 hex digits (a digest of the
  caller's parts, taken from the authenticated principal, never from a
  client's header, and of the operation). The same key in two scopes is two
  operations.
- ``key``: the idempotency key (1 to `MAX_KEY_LENGTH` visible ASCII
  characters; the behavior checks it before a store sees it).
- ``fingerprint``: a hash of the request's canonical form; a key reused with
  another request is refused, not replayed.
- a state, ``pending`` (claimed, its handler running or crashed) or
  ``completed``, the claim's ``token`` (who holds it), the stored outcome,
  and three times: created, the lease's expiry, the retention's expiry.

The flow of one send: `claim` (in a short transaction of its own, committed at
once, so that a concurrent duplicate sees it); then the handler runs; then
`complete`, which runs in the handler's own unit of work, so the handler's
writes and the completion commit together or not at all; or, when the handler
failed with a domain error, `finish` records that outcome in a transaction of
its own; or, after any other failure, `release` gives the key back so that a
retry from outside may claim it again.

A claim whose lease expired with its record still pending (its process
crashed before the handler's transaction committed) may be taken over by the
next claim, under a new token. `complete` only completes a record still
pending under its own token; when the claim was lost, it raises
`ConflictError` and the handler's transaction rolls back: there is never a
second committed effect.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import partial
from typing import Final, Literal, Protocol, TypeVar, runtime_checkable

__all__ = [
    "MAX_KEY_LENGTH",
    "AsyncIdempotencyStore",
    "AwaitedStore",
    "Claim",
    "IdempotencyStore",
    "Runner",
    "StoredOutcome",
]

T = TypeVar("T")

MAX_KEY_LENGTH: Final = 255
"""The longest idempotency key taken, in characters (visible ASCII)."""


@dataclass(frozen=True, slots=True)
class StoredOutcome:
    """How a completed operation ended, as a store keeps it.

    Attributes:
        kind: ``"response"``: the handler returned; ``"error"``: it raised a
            domain error.
        type_name: The response's (or the error's) type, ``module:qualname``.
        payload: JSON text: the response as its type serialises it, or the
            error as ``{"message": ..., "errors": [{"path": [...],
            "message": ...}]}``.
    """

    kind: Literal["response", "error"]
    type_name: str
    payload: str


@dataclass(frozen=True, slots=True)
class Claim:
    """What `claim` found.

    Attributes:
        status: ``"claimed"``: the key is this send's to run (new, or taken
            over from an expired lease); ``"replay"``: completed before with
            the same request, `outcome` is how; ``"in_flight"``: another send
            holds it, its lease running; ``"mismatch"``: the key was used
            with another request (another fingerprint).
        token: The claim's token, when ``"claimed"``: `complete`, `finish`
            and `release` take it.
        outcome: The stored outcome, when ``"replay"``.
    """

    status: Literal["claimed", "replay", "in_flight", "mismatch"]
    token: str | None = None
    outcome: StoredOutcome | None = None


@runtime_checkable
class AsyncIdempotencyStore(Protocol):
    """The store on the async path. Times are timezone-aware UTC datetimes."""

    async def claim(
        self,
        scope: str,
        key: str,
        fingerprint: str,
        *,
        now: datetime,
        lease: timedelta,
        retention: timedelta,
    ) -> Claim:
        """Claim (scope, key) for one send, in a transaction of its own.

        New: a pending record under a fresh token, leased until ``now +
        lease``, kept until ``now + retention``. Pending with its lease
        expired: taken over under a fresh token. Otherwise what is there
        (replay, in flight, or mismatch when the fingerprints differ; a
        mismatch is answered before anything else).
        """
        ...

    async def complete(
        self, scope: str, key: str, token: str, outcome: StoredOutcome, *, now: datetime
    ) -> None:
        """Complete the claim inside the running unit of work's transaction.

        Raises:
            ConflictError: The record is no longer pending under `token` (the
                lease expired and another send took it over).
        """
        ...

    async def finish(
        self, scope: str, key: str, token: str, outcome: StoredOutcome, *, now: datetime
    ) -> None:
        """Complete the claim in a transaction of its own.

        For a domain error, or a request that is not `@transactional`. A lost
        claim is left alone.
        """
        ...

    async def release(self, scope: str, key: str, token: str) -> None:
        """Give the key back (delete the pending record held under `token`)."""
        ...

    async def purge_expired(self, *, now: datetime) -> int:
        """Delete the records whose retention ended; return how many."""
        ...


@runtime_checkable
class IdempotencyStore(Protocol):
    """`AsyncIdempotencyStore` on the sync path (``send_sync``)."""

    def claim(
        self,
        scope: str,
        key: str,
        fingerprint: str,
        *,
        now: datetime,
        lease: timedelta,
        retention: timedelta,
    ) -> Claim:
        """See `AsyncIdempotencyStore.claim`."""
        ...

    def complete(
        self, scope: str, key: str, token: str, outcome: StoredOutcome, *, now: datetime
    ) -> None:
        """See `AsyncIdempotencyStore.complete`."""
        ...

    def finish(
        self, scope: str, key: str, token: str, outcome: StoredOutcome, *, now: datetime
    ) -> None:
        """See `AsyncIdempotencyStore.finish`."""
        ...

    def release(self, scope: str, key: str, token: str) -> None:
        """See `AsyncIdempotencyStore.release`."""
        ...

    def purge_expired(self, *, now: datetime) -> int:
        """See `AsyncIdempotencyStore.purge_expired`."""
        ...


class Runner(Protocol):
    """Makes a call of a sync store on the async path (at once, or in a thread)."""

    def __call__(self, function: Callable[[], T], /) -> Awaitable[T]:
        """Call `function` and return what it returns."""
        ...


async def _at_once(function: Callable[[], T]) -> T:
    return function()


class AwaitedStore:
    """A sync `IdempotencyStore` used on the async path, each call made by `run`.

    By default at once, on the event loop (no async store is bound). For the
    request of a plain-def handler, `IdempotencyBehavior` gives the run of the
    request's lane: the thread of its handler and sync unit of work, so
    `complete` writes on their `Session`, in their transaction.
    """

    def __init__(self, store: IdempotencyStore, run: Runner = _at_once) -> None:
        self.store = store
        self._run = run

    async def claim(
        self,
        scope: str,
        key: str,
        fingerprint: str,
        *,
        now: datetime,
        lease: timedelta,
        retention: timedelta,
    ) -> Claim:
        return await self._run(
            partial(
                self.store.claim,
                scope,
                key,
                fingerprint,
                now=now,
                lease=lease,
                retention=retention,
            )
        )

    async def complete(
        self, scope: str, key: str, token: str, outcome: StoredOutcome, *, now: datetime
    ) -> None:
        await self._run(
            partial(self.store.complete, scope, key, token, outcome, now=now)
        )

    async def finish(
        self, scope: str, key: str, token: str, outcome: StoredOutcome, *, now: datetime
    ) -> None:
        await self._run(partial(self.store.finish, scope, key, token, outcome, now=now))

    async def release(self, scope: str, key: str, token: str) -> None:
        await self._run(partial(self.store.release, scope, key, token))

    async def purge_expired(self, *, now: datetime) -> int:
        return await self._run(partial(self.store.purge_expired, now=now))
