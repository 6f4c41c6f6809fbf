"""One send of an ``@idempotent`` command, decided without I/O.

`SendFlow` says what a send claims, whether its claim runs the handler, is
replayed or is refused, and how the claim is settled when the handler returns
or fails. The drivers, `drive` (async) and `drive_sync` (generated from it),
make the calls it decides on their path and decide nothing themselves.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, NoReturn, TypedDict, cast

from mediator._behaviors.idempotency.completion import Claimed, discard, register
from mediator._behaviors.idempotency.marker import ActiveSend, running
from mediator._behaviors.idempotency.outcome import Outcomes, error_outcome
from mediator._behaviors.idempotency.store import (
    AsyncIdempotencyStore,
    Claim,
    IdempotencyStore,
    StoredOutcome,
)
from mediator._core.context import mark_replay
from mediator._core.errors import (
    ConfigurationError,
    ConflictError,
    DomainError,
    IdempotencyKeyMismatchError,
)
from mediator._core.scope import ScopeState, active_scope, in_unit_of_work

__all__ = [
    "ClaimTimes",
    "HeldClaim",
    "Plan",
    "SendFlow",
    "Settling",
    "note",
    "request_state",
]


@dataclass(frozen=True, slots=True)
class Plan:
    """What one ``@idempotent`` type needs per send, worked out once."""

    operation: str
    parts: tuple[tuple[str, str], ...]
    field: str | None
    outcomes: Outcomes


class ClaimTimes(TypedDict):
    """The keyword arguments of a store's `claim`: when, and for how long."""

    now: datetime
    lease: timedelta
    retention: timedelta


@dataclass(frozen=True, slots=True)
class Settling:
    """Finish a claim with `outcome`; with None, give its key back."""

    claimed: Claimed
    outcome: StoredOutcome | None

    async def arun(self) -> None:
        """Settle it on the async path."""
        if self.outcome is None:
            await self.claimed.arelease()
        else:
            await self.claimed.afinish(self.outcome)

    def run(self) -> None:
        """Settle it on the sync path."""
        if self.outcome is None:
            self.claimed.release()
        else:
            self.claimed.finish(self.outcome)


@dataclass(frozen=True, slots=True)
class SendFlow:
    """The decisions of one send: its claim, and whether the handler runs.

    Made by `IdempotencyBehavior` once the send's scope, key and fingerprint
    are known.
    """

    request: Any
    plan: Plan
    scope: str
    key: str
    fingerprint: str
    lease: timedelta
    retention: timedelta
    now: Callable[[], datetime]

    def times(self) -> ClaimTimes:
        """The claim's times, read now."""
        return {"now": self.now(), "lease": self.lease, "retention": self.retention}

    def claim_on(self, store: IdempotencyStore, times: ClaimTimes) -> Claim:
        """Claim the key in a sync store."""
        return store.claim(self.scope, self.key, self.fingerprint, **times)

    def start(
        self,
        claim: Claim,
        astore: AsyncIdempotencyStore,
        store: IdempotencyStore | None,
    ) -> HeldClaim | None:
        """The claim the handler runs under, kept in the request scope.

        None for a replay (`replay` answers it). `astore` and `store` are what
        the claim is settled with, on each path.

        Raises:
            ConflictError: The key is claimed by a send still running.
            IdempotencyKeyMismatchError: The key was used with another request.
            ConfigurationError: The store answered a claim it cannot have.
        """
        token = _token(self.request, claim, self.plan)
        if token is None:
            return None
        claimed = Claimed(
            self.request,
            self.scope,
            self.key,
            token,
            astore,
            store,
            self.plan.outcomes,
            self.now,
        )
        state = request_state(self.request)
        register(state, claimed)
        return HeldClaim(claimed, state)

    def replay(self, claim: Claim) -> Any:
        """The stored response of a replayed claim; a stored domain error raises."""
        mark_replay(True)
        return self.plan.outcomes.replay(cast(StoredOutcome, claim.outcome))


@dataclass(frozen=True, slots=True)
class HeldClaim:
    """The claim a send holds while its handler runs; what settles it after."""

    claimed: Claimed
    state: ScopeState

    def running(self) -> AbstractContextManager[None]:
        """The block the handler runs in: its send is the running one."""
        return running(ActiveSend(self.claimed.scope, self.claimed.key))

    def failed(self, error: BaseException) -> Settling | None:
        """What settles the claim after the handler raised `error`, if anything.

        A domain error is the send's outcome, stored; any other failure gives
        the key back. Nothing when the claim is settled already: its
        transaction committed it (the failure came after), or completing found
        it taken over, and it is someone else's now.
        """
        claimed = self.claimed
        discard(self.state, claimed)
        if claimed.done or claimed.lost:
            return None
        if isinstance(error, DomainError):
            return Settling(claimed, error_outcome(error))
        return Settling(claimed, None)

    def returned(self, result: object) -> Settling | None:
        """What settles the claim after the handler returned `result`, if anything.

        Nothing when its transaction completed it, nor inside a running unit
        of work, whose outermost commit completes it (and whose rollback
        releases it).
        """
        claimed = self.claimed
        if claimed.done:
            return None
        if in_unit_of_work():
            claimed.deferred = result
            return None
        discard(self.state, claimed)
        return Settling(claimed, claimed.outcomes.response(result))


def request_state(request: Any) -> ScopeState:
    """The request scope the send runs in.

    Raises:
        ConfigurationError: There is none (the behavior was not registered
            with the mediator, whose routes always open one).
    """
    scope = active_scope()
    if scope is None:  # the behavior's route always opens one
        raise ConfigurationError(
            f"IdempotencyBehavior ran outside a request scope for "
            f"{type(request).__qualname__}; it must be registered with the mediator"
        )
    return scope


def note(error: BaseException, failure: Exception) -> None:
    """Note on the send's `error` that settling its claim failed too."""
    # The send's own failure is the one the caller needs; the key is free
    # again when its lease ends.
    error.add_note(
        "settling the idempotency key also failed: "
        f"{type(failure).__qualname__}: {failure}"
    )


def _token(request: Any, claim: Claim, plan: Plan) -> str | None:
    """The claim's token; None for a replay; a refusal raises."""
    name = type(request).__qualname__
    if claim.status == "claimed" and claim.token is not None:
        return claim.token
    if claim.status == "replay" and claim.outcome is not None:
        return None
    if claim.status == "in_flight":
        raise ConflictError(
            f"{name} with this idempotency key is still running: try again later"
        )
    if claim.status == "mismatch":
        raise IdempotencyKeyMismatchError(
            f"this idempotency key was used with another {name} request: use a "
            "new key for a new request"
        )
    _bad_claim(claim, plan)


def _bad_claim(claim: Claim, plan: Plan) -> NoReturn:
    raise ConfigurationError(
        f"the idempotency store answered {claim!r} for {plan.operation}: a "
        "'claimed' claim needs a token, a 'replay' an outcome"
    )
