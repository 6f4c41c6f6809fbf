"""Claims of idempotent sends, completed in the transaction of the unit of work.

`IdempotencyBehavior` claims a key before the handler runs, outside retry and
the transaction, and registers the claim in the request scope, whose claims
take part in its transaction (a `TransactionParticipant`, see
`mediator._core.scope`). The outermost attempt of `TransactionBehavior`
completes the claims due before it commits, in its transaction, so the
handler's writes and the completion commit together or not at all; after a
rollback it releases the claims made inside the attempt (their sends returned
inside it, and their effect was just undone). Each is a step the
transaction's flow yields and its driver runs: `Step.arun` on the async path,
`Step.run` on the sync path.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final

from mediator._behaviors.idempotency.outcome import Outcomes
from mediator._behaviors.idempotency.store import (
    AsyncIdempotencyStore,
    IdempotencyStore,
    StoredOutcome,
)
from mediator._core.errors import ConflictError, SyncPathError
from mediator._core.scope import ScopeState, find_participant, join_transaction

__all__ = ["UNSET", "Claimed", "discard", "register"]

UNSET: Final[Any] = object()  # no response kept yet


@dataclass(eq=False, slots=True)
class Claimed:
    """A key one send claimed, until it is completed, finished or released.

    `astore` is used on the async path; `store` (None when only an async store
    is bound) on the sync path.
    """

    request: object
    scope: str
    key: str
    token: str
    astore: AsyncIdempotencyStore
    store: IdempotencyStore | None
    outcomes: Outcomes
    now: Callable[[], datetime]
    sequence: int = 0
    deferred: Any = UNSET  # the response, when the send returned in a unit of work
    done: bool = False  # completed, and the transaction committed
    lost: bool = False  # completing found the claim taken over

    async def acomplete(self, response: object) -> None:
        """Complete the claim in the running transaction."""
        try:
            await self.astore.complete(
                *self._ids(), self.outcomes.response(response), now=self.now()
            )
        except ConflictError:
            self.lost = True
            raise

    def complete(self, response: object) -> None:
        """The same on the sync path."""
        try:
            self._sync().complete(
                *self._ids(), self.outcomes.response(response), now=self.now()
            )
        except ConflictError:
            self.lost = True
            raise

    async def afinish(self, outcome: StoredOutcome) -> None:
        """Complete the claim in a transaction of the store's own."""
        await self.astore.finish(*self._ids(), outcome, now=self.now())

    def finish(self, outcome: StoredOutcome) -> None:
        """The same on the sync path."""
        self._sync().finish(*self._ids(), outcome, now=self.now())

    async def arelease(self) -> None:
        """Give the key back, so that a later send may claim it."""
        await self.astore.release(*self._ids())

    def release(self) -> None:
        """The same on the sync path."""
        self._sync().release(*self._ids())

    def _ids(self) -> tuple[str, str, str]:
        """The claim's scope, key and token: what the store knows it by."""
        return self.scope, self.key, self.token

    def _sync(self) -> IdempotencyStore:
        if self.store is None:
            raise SyncPathError(
                f"{type(self.request).__qualname__} claimed its idempotency key on "
                "an AsyncIdempotencyStore, so send_sync cannot complete it: await "
                "mediator.send(...) instead, or bind an IdempotencyStore too"
            )
        return self.store


@dataclass(eq=False, slots=True)
class _Claims:
    """The claims of one request scope, in the order they were made.

    A participant of the scope's transaction: its mark is how many claims
    were made so far.
    """

    entries: list[Claimed] = field(default_factory=list[Claimed])
    issued: int = 0

    def mark(self) -> int:
        """How many claims the scope has made so far: an attempt's starting mark."""
        return self.issued

    def before_commit(self, request: object, response: object) -> _Completing | None:
        """The step completing the claims due before the outermost commit, if any.

        Due: the claim of the transaction's own request (with its `response`),
        and the claims of the sends that returned inside the transaction (with
        theirs). A claim of a send further out, not in this transaction, is
        left to it.
        """
        if not self.entries:
            return None
        work = [
            (claim, response if claim.deferred is UNSET else claim.deferred)
            for claim in self.entries
            if not claim.done
            and (claim.deferred is not UNSET or claim.request is request)
        ]
        return _Completing(self, work) if work else None

    def after_rollback(self, since: int) -> _Abandoning | None:
        """The step releasing the claims made during an attempt that rolled back.

        Their sends returned inside the attempt and left their completion to
        its commit, which will not come. They are forgotten at once; the step
        gives their keys back (a key whose release fails is free again when
        its lease ends).
        """
        if not self.entries:
            return None
        undone = [c for c in self.entries if c.sequence > since and not c.done]
        for claim in undone:
            self.entries.remove(claim)
        return _Abandoning(undone) if undone else None

    def forget(self, claim: Claimed) -> None:
        """Forget `claim`, if it is still kept."""
        if claim in self.entries:
            self.entries.remove(claim)


def register(state: ScopeState, claim: Claimed) -> None:
    """Keep `claim` in the scope until its send (or the transaction) is done."""
    claims = join_transaction(state, _Claims)
    claims.issued += 1
    claim.sequence = claims.issued
    claims.entries.append(claim)


def discard(state: ScopeState, claim: Claimed) -> None:
    """Forget `claim` (its send completed, finished or released it)."""
    claims = find_participant(state, _Claims)
    if claims is not None:
        claims.forget(claim)


@dataclass(frozen=True, slots=True)
class _Completing:
    """Complete the claims due, in the transaction about to commit."""

    claims: _Claims
    work: Sequence[tuple[Claimed, object]]

    async def arun(self) -> None:
        for claim, response in self.work:
            await claim.acomplete(response)

    def run(self) -> None:
        for claim, response in self.work:
            claim.complete(response)

    def committed(self) -> None:
        """The transaction committed: the claims are done."""
        for claim, _ in self.work:
            claim.done = True
            self.claims.forget(claim)


@dataclass(frozen=True, slots=True)
class _Abandoning:
    """Release claims whose effect a rollback undid; every one, then the failure."""

    claims: Sequence[Claimed]

    async def arun(self) -> None:
        failures: list[Exception] = []
        for claim in self.claims:
            try:
                await claim.arelease()
            except Exception as failure:
                failures.append(failure)
        _raise_first(failures)

    def run(self) -> None:
        failures: list[Exception] = []
        for claim in self.claims:
            try:
                claim.release()
            except Exception as failure:
                failures.append(failure)
        _raise_first(failures)


def _raise_first(failures: list[Exception]) -> None:
    if failures:
        first = failures[0]
        for other in failures[1:]:
            first.add_note(
                f"releasing also failed: {type(other).__qualname__}: {other}"
            )
        raise first
