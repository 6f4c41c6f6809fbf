"""`IdempotencyBehavior`: an ``@idempotent`` command takes effect once per key."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import partial
from typing import (
    TYPE_CHECKING,
    Annotated,
    Any,
    ClassVar,
    Final,
    NoReturn,
    Self,
    cast,
)

from injector import inject
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    model_validator,
)

from mediator._behaviors.idempotency.completion import Claimed, discard, register
from mediator._behaviors.idempotency.fingerprint import fingerprint
from mediator._behaviors.idempotency.marker import (
    ActiveSend,
    ScopeMode,
    is_idempotent,
    key_field_of,
    key_of,
    running,
    scope_of,
)
from mediator._behaviors.idempotency.outcome import Outcomes, error_outcome
from mediator._behaviors.idempotency.store import (
    AsyncIdempotencyStore,
    AwaitedStore,
    Claim,
    IdempotencyStore,
    StoredOutcome,
)
from mediator._core.behavior import Next, SyncNext
from mediator._core.clock import SystemWallClock, WallClock
from mediator._core.context import PrincipalProvider, mark_replay
from mediator._core.errors import (
    ConfigurationError,
    ConflictError,
    DomainError,
    FieldError,
    ForbiddenError,
    IdempotencyKeyMismatchError,
    SyncPathError,
    UnresolvableDependencyError,
    ValidationError,
)
from mediator._core.requests import is_request_type
from mediator._core.scope import ScopeState, active_scope, in_unit_of_work
from mediator._core.stage import Stage
from mediator._core.threads import Lane, scope_lane
from mediator._core.wiring import Wiring

__all__ = [
    "DEFAULT_LEASE",
    "DEFAULT_RETENTION",
    "DEFAULT_SCOPE",
    "MAX_RETENTION",
    "IdempotencyBehavior",
    "IdempotencyOptions",
]

DEFAULT_RETENTION: Final = timedelta(hours=24)
DEFAULT_LEASE: Final = timedelta(seconds=60)
MAX_RETENTION: Final = timedelta(days=3650)
"""The longest retention (and so lease) taken: ten years. A longer one would
put a record's expiry past what a database's timestamps hold."""
DEFAULT_SCOPE: Final[ScopeMode] = "principal"
"""Whose record a key is by default: each principal's own."""


def _not_a_bool(value: object) -> object:
    if isinstance(value, bool):
        raise ValueError("give a duration (seconds, or ISO 8601), not true or false")
    return value


_Duration = Annotated[timedelta, BeforeValidator(_not_a_bool)]


class IdempotencyOptions(BaseModel):
    """Whose a key's record is, how long it is kept, and how long a claim holds.

    Bind an instance to change them
    (``binder.bind(IdempotencyOptions, to=IdempotencyOptions(lease=120))``);
    without one, the defaults apply.

    Attributes:
        retention: How long a completed outcome is replayed; after it the
            record may be purged (`purge_expired`) and the key runs anew.
            Keep it longer than your callers retry. Default 24 h.
        lease: How long a claim holds its key while its handler runs: a
            duplicate meanwhile gets `ConflictError`, and after it (the
            process crashed, say) the next send takes the key over and runs
            the handler. Make it longer than the handler's longest run with
            all its retries. Default 60 s; at most `retention`, which is at
            most ten years (`MAX_RETENTION`).
        scope: Whose record a key is. ``"principal"`` (the default): each
            principal's own, within its tenant; the same key sent by two
            users is two operations. ``"tenant"``: shared by the users of one
            tenant (the principal's ``claims["tenant"]``), for services whose
            users act for their tenant; a principal without a tenant claim
            is still its own scope, apart from every tenant.
        allow_anonymous: Whether an ``@idempotent`` command may be sent with
            no principal. False (the default): such a send raises
            `ForbiddenError` (401 over HTTP) and nothing is stored, because
            every anonymous caller would share the records. True, for a
            worker or a script that sends without a principal: the
            anonymous sends are one scope of their own.

    Durations take a `timedelta`, a number of seconds or ISO 8601 (``"PT2M"``).

    Raises:
        pydantic.ValidationError: On construction: a duration that is not
            positive, a retention over ten years, `lease` longer than
            `retention` (both named), or a `scope` that is neither
            ``"principal"`` nor ``"tenant"``.

    Example:
        >>> IdempotencyOptions(scope="tenant", allow_anonymous=True).scope
        'tenant'
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    retention: _Duration = Field(
        default=DEFAULT_RETENTION, gt=timedelta(0), le=MAX_RETENTION
    )
    lease: _Duration = Field(default=DEFAULT_LEASE, gt=timedelta(0))
    scope: ScopeMode = DEFAULT_SCOPE
    allow_anonymous: bool = False

    if TYPE_CHECKING:
        # What type checkers see: durations in every form pydantic reads, read
        # back as `timedelta`s.
        def __init__(
            self,
            *,
            retention: timedelta | float | str = DEFAULT_RETENTION,
            lease: timedelta | float | str = DEFAULT_LEASE,
            scope: ScopeMode = DEFAULT_SCOPE,
            allow_anonymous: bool = False,
        ) -> None: ...

    @model_validator(mode="after")
    def _check_lease(self) -> Self:
        if self.lease > self.retention:
            raise ValueError(
                f"lease ({self.lease}) must not exceed retention ({self.retention}): "
                "a record must outlive its claim"
            )
        return self


@dataclass(frozen=True, slots=True)
class _Plan:
    """What one ``@idempotent`` type needs per send, worked out once."""

    operation: str
    parts: tuple[tuple[str, str], ...]
    field: str | None
    outcomes: Outcomes


class IdempotencyBehavior:
    """Runs an ``@idempotent`` command once per key; replays its outcome after.

    At stage IDEMPOTENCY, between authorization and retry: a retry's attempts
    all run under the one claim. For each send it takes the key (the field
    named by ``@idempotent(key=...)``, else the one set with
    `idempotency_key`), the scope and the request's fingerprint, and claims
    the key in the bound store. The scope is who sends (with
    `IdempotencyOptions.scope` ``"principal"``, the default: the principal's
    id and its ``claims["tenant"]``; with ``"tenant"``: the tenant, else the
    principal's id, kept apart from any tenant) and the command's type,
    encoded so that no two callers can share one. A send with no principal
    raises `ForbiddenError` unless `IdempotencyOptions.allow_anonymous` is
    set, and then all anonymous sends are one scope. Then, for the claim:

    - new (or its lease expired): the handler runs. For a `@transactional`
      command, the claim is completed with the response in the unit of work's
      transaction, before it commits: the effect and the record commit
      together. Otherwise the record is written after the handler returns, in
      a transaction of its own (not atomic with the effect). A domain error is
      stored as the outcome; any other failure gives the key back. Under
      `send`, a command whose handler is a plain ``def`` uses the sync
      `IdempotencyStore` when one is bound (with an async one too), on the
      handler's worker thread: its record completes on the `Session` the
      handler writes on;
    - completed with the same fingerprint: the stored response is returned,
      or the stored domain error raised, without running the handler;
      `is_replay` says so, and so does the audit record;
    - claimed by a send still running: `ConflictError` (409);
    - completed or claimed with another fingerprint:
      `IdempotencyKeyMismatchError` (422).

    No key, or a bad one: `ValidationError`, and nothing is stored. Applies to
    ``@idempotent`` types only; `IdempotencyOptions` (bound, or the defaults)
    sets the scope, the anonymous rule, the lease and the retention, and a
    bound `WallClock` the time.
    """

    stage: ClassVar[Stage] = Stage.IDEMPOTENCY

    @inject
    def __init__(self, resolver: Wiring, principals: PrincipalProvider) -> None:
        self._async: Callable[[], AsyncIdempotencyStore] | None = _optional(
            resolver, AsyncIdempotencyStore
        )
        self._sync: Callable[[], IdempotencyStore] | None = _optional(
            resolver, IdempotencyStore
        )
        options = _optional(resolver, IdempotencyOptions)
        self._options: IdempotencyOptions = (
            options() if options is not None else IdempotencyOptions()
        )
        wall = _optional(resolver, WallClock)
        self._now: Callable[[], datetime] = (
            wall() if wall is not None else SystemWallClock()
        ).now
        self._principals = principals
        self._plans: dict[type[Any], _Plan] = {}

    def applies_to(self, request_type: type[Any]) -> bool:
        """Whether the type is ``@idempotent``; a store must be bound then.

        Raises:
            ConfigurationError: No `IdempotencyStore` or `AsyncIdempotencyStore`
                is bound, or the response type cannot be stored.
        """
        if not (is_request_type(request_type) and is_idempotent(request_type)):
            return False
        name = f"{request_type.__qualname__} (module {request_type.__module__})"
        if self._async is None and self._sync is None:
            raise ConfigurationError(
                f"{name} is @idempotent but no idempotency store is bound: install "
                "mediator.sqlalchemy.SqlAlchemyModule, or bind IdempotencyStore / "
                "AsyncIdempotencyStore yourself"
            )
        try:
            outcomes = Outcomes.of(request_type)
        except Exception as error:
            raise ConfigurationError(
                f"{name} is @idempotent but its response type cannot be stored: {error}"
            ) from error
        operation = f"{request_type.__module__}:{request_type.__qualname__}"
        self._plans[request_type] = _Plan(
            operation,
            (("command", operation),),
            key_field_of(request_type),
            outcomes,
        )
        return True

    async def handle(self, request: Any, next: Next[Any]) -> Any:
        """Claim the key, then run the rest of the chain, replay, or refuse."""
        plan, scope, key, print_ = self._prepare(request)
        store = (
            self._async()
            if self._async is not None
            else AwaitedStore(self._sync_store())
        )
        mark_replay(False)
        options = self._options
        claim = await store.claim(
            scope,
            key,
            print_,
            now=self._now(),
            lease=options.lease,
            retention=options.retention,
        )
        # The sync store only when it is the one in use: resolving another would
        # open a session of its own.
        sync = store.store if isinstance(store, AwaitedStore) else None
        return await self._run(request, next, plan, scope, key, claim, store, sync)

    async def handle_threaded(self, request: Any, next: Next[Any]) -> Any:
        """`handle` for a request whose handler is a plain def, run in a thread.

        With an `IdempotencyStore` bound (with an `AsyncIdempotencyStore` too),
        that sync store, built and called on the request's worker thread: the
        thread of the handler and of the sync unit of work, whose `Session` the
        store completes the claim on, so a ``@transactional`` command's record
        commits with the handler's writes. Without one, as `handle`.
        """
        if self._sync is None:
            return await self.handle(request, next)
        plan, scope, key, print_ = self._prepare(request)
        lane = scope_lane(_scope(request))
        mark_replay(False)
        options = self._options
        sync, claim = await lane.run(
            _build_and_claim,
            self._sync,
            (scope, key, print_, self._now(), options.lease, options.retention),
        )
        store = _OnLane(sync, lane)
        return await self._run(request, next, plan, scope, key, claim, store, sync)

    async def _run(
        self,
        request: Any,
        next: Next[Any],
        plan: _Plan,
        scope: str,
        key: str,
        claim: Claim,
        store: AsyncIdempotencyStore,
        sync: IdempotencyStore | None,
    ) -> Any:
        """Replay, refuse, or run the rest of the chain under the claim; settle it."""
        token = _token(request, claim, plan)
        if token is None:
            return plan.outcomes.replay(_replayed(claim))
        claimed = Claimed(
            request, scope, key, token, store, sync, plan.outcomes, self._now
        )
        state = _scope(request)
        register(state, claimed)
        try:
            with running(ActiveSend(scope, key)):
                result = await next()
        except DomainError as error:
            if _unsettled(state, claimed):
                await _noting(error, claimed.afinish(error_outcome(error)))
            raise
        except BaseException as error:
            if _unsettled(state, claimed):
                await _noting(error, claimed.arelease())
            raise
        finally:
            mark_replay(False)
        if _returned(state, claimed, result):
            await claimed.afinish(plan.outcomes.response(result))
        return result

    def handle_sync(self, request: Any, next: SyncNext[Any]) -> Any:
        """The same on the sync path, with the bound `IdempotencyStore`."""
        plan, scope, key, print_ = self._prepare(request)
        store = self._sync_store()
        mark_replay(False)
        options = self._options
        claim = store.claim(
            scope,
            key,
            print_,
            now=self._now(),
            lease=options.lease,
            retention=options.retention,
        )
        token = _token(request, claim, plan)
        if token is None:
            return plan.outcomes.replay(_replayed(claim))
        claimed = Claimed(
            request,
            scope,
            key,
            token,
            AwaitedStore(store),
            store,
            plan.outcomes,
            self._now,
        )
        state = _scope(request)
        register(state, claimed)
        try:
            with running(ActiveSend(scope, key)):
                result = next()
        except DomainError as error:
            if _unsettled(state, claimed):
                _noting_sync(error, claimed.finish, error_outcome(error))
            raise
        except BaseException as error:
            if _unsettled(state, claimed):
                _noting_sync(error, claimed.release)
            raise
        finally:
            mark_replay(False)
        if _returned(state, claimed, result):
            claimed.finish(plan.outcomes.response(result))
        return result

    def _prepare(self, request: Any) -> tuple[_Plan, str, str, str]:
        """The plan, scope, key and fingerprint of one send; a bad key raises."""
        plan = self._plans[type(request)]
        options = self._options
        principal = self._principals.current()
        if principal is None and not options.allow_anonymous:
            # Before the key: who calls is what the caller must fix first.
            raise ForbiddenError(
                f"{type(request).__qualname__} is @idempotent and was sent with no "
                "principal: every anonymous caller would share its records. Send "
                "it as a principal (acting_as), or bind "
                "IdempotencyOptions(allow_anonymous=True) for a worker that sends "
                "without one"
            )
        key, _ = key_of(request, plan.field)
        scope = scope_of(principal, plan.parts, mode=options.scope)
        try:
            print_ = fingerprint(request, exclude=plan.field)
        except ValueError as error:
            raise ValidationError(
                f"{type(request).__qualname__} cannot be fingerprinted",
                [FieldError((), str(error))],
            ) from error
        return plan, scope, key, print_

    def _sync_store(self) -> IdempotencyStore:
        if self._sync is None:
            raise SyncPathError(
                "only an AsyncIdempotencyStore is bound, so send_sync cannot run "
                "an @idempotent command: await mediator.send(...) instead, or bind "
                "an IdempotencyStore too"
            )
        return self._sync()


def _optional(resolver: Wiring, key: type[Any]) -> Callable[[], Any] | None:
    try:
        return resolver.factory(key, context="IdempotencyBehavior").make
    except UnresolvableDependencyError:
        return None


def _scope(request: Any) -> ScopeState:
    scope = active_scope()
    if scope is None:  # the behavior's route always opens one
        raise ConfigurationError(
            f"IdempotencyBehavior ran outside a request scope for "
            f"{type(request).__qualname__}; it must be registered with the mediator"
        )
    return scope


def _token(request: Any, claim: Claim, plan: _Plan) -> str | None:
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


def _bad_claim(claim: Claim, plan: _Plan) -> NoReturn:
    raise ConfigurationError(
        f"the idempotency store answered {claim!r} for {plan.operation}: a "
        "'claimed' claim needs a token, a 'replay' an outcome"
    )


def _replayed(claim: Claim) -> StoredOutcome:
    mark_replay(True)
    return cast(StoredOutcome, claim.outcome)  # `_token` checked it


def _unsettled(state: ScopeState, claimed: Claimed) -> bool:
    """Forget the failed send's claim; whether it still needs finishing or release.

    Not when its transaction committed it already (the failure came after),
    nor when completing found it taken over: it is someone else's now.
    """
    discard(state, claimed)
    return not (claimed.done or claimed.lost)


def _returned(state: ScopeState, claimed: Claimed, result: object) -> bool:
    """The send returned: whether its claim is the behavior's to finish now.

    Not when its transaction completed it, nor inside a running unit of work,
    whose outermost commit completes it (and whose rollback releases it).
    """
    if claimed.done:
        return False
    if in_unit_of_work():
        claimed.deferred = result
        return False
    discard(state, claimed)
    return True


async def _noting(error: BaseException, step: Any) -> None:
    """Await `step`; a failure of its own is noted on `error`, never raised."""
    try:
        await step
    except Exception as failure:
        _note(error, failure)


def _noting_sync(error: BaseException, step: Callable[..., None], *args: Any) -> None:
    try:
        step(*args)
    except Exception as failure:
        _note(error, failure)


def _note(error: BaseException, failure: Exception) -> None:
    # The send's own failure is the one the caller needs; the key is free
    # again when its lease ends.
    error.add_note(
        "settling the idempotency key also failed: "
        f"{type(failure).__qualname__}: {failure}"
    )


def _build_and_claim(
    make: Callable[[], IdempotencyStore],
    args: tuple[str, str, str, datetime, timedelta, timedelta],
) -> tuple[IdempotencyStore, Claim]:
    """Build the request's sync store and claim the key with it: in its thread."""
    scope, key, print_, now, lease, retention = args
    store = make()
    claim = store.claim(scope, key, print_, now=now, lease=lease, retention=retention)
    return store, claim


class _OnLane:
    """A sync `IdempotencyStore` on the async path, called on a request's lane.

    The lane is the thread of the request's plain-def handler and sync unit of
    work, so `complete` writes on their `Session`, in their transaction.
    """

    def __init__(self, store: IdempotencyStore, lane: Lane) -> None:
        self.store = store
        self.lane = lane

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
        return await self.lane.run(
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
        await self.lane.run(
            partial(self.store.complete, scope, key, token, outcome, now=now)
        )

    async def finish(
        self, scope: str, key: str, token: str, outcome: StoredOutcome, *, now: datetime
    ) -> None:
        await self.lane.run(
            partial(self.store.finish, scope, key, token, outcome, now=now)
        )

    async def release(self, scope: str, key: str, token: str) -> None:
        await self.lane.run(self.store.release, scope, key, token)

    async def purge_expired(self, *, now: datetime) -> int:
        return await self.lane.run(partial(self.store.purge_expired, now=now))
