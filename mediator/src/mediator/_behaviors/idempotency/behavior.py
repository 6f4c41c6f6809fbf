"""`IdempotencyBehavior`: an ``@idempotent`` command takes effect once per key."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any, ClassVar

from injector import inject

from mediator._behaviors.idempotency.drive import drive_send
from mediator._behaviors.idempotency.drive_sync import drive_send_sync
from mediator._behaviors.idempotency.fingerprint import fingerprint
from mediator._behaviors.idempotency.flow import (
    ClaimTimes,
    Plan,
    SendFlow,
    request_state,
)
from mediator._behaviors.idempotency.marker import (
    is_idempotent,
    key_field_of,
    key_of,
    minted_key_running,
    scope_of,
)
from mediator._behaviors.idempotency.options import (
    DEFAULT_LEASE,
    DEFAULT_RETENTION,
    DEFAULT_SCOPE,
    MAX_RETENTION,
    IdempotencyOptions,
)
from mediator._behaviors.idempotency.outcome import Outcomes
from mediator._behaviors.idempotency.store import (
    AsyncIdempotencyStore,
    AwaitedStore,
    Claim,
    IdempotencyStore,
)
from mediator._core.behavior import Next, SyncNext
from mediator._core.clock import SystemWallClock, WallClock
from mediator._core.context import PrincipalProvider, mark_replay
from mediator._core.errors import (
    ConfigurationError,
    FieldError,
    ForbiddenError,
    SyncPathError,
    ValidationError,
)
from mediator._core.requests import is_request_type
from mediator._core.stage import Stage
from mediator._core.threads import scope_lane
from mediator._core.wiring import Wiring

# The options' names are re-exported: the ASGI middleware takes its defaults here.
__all__ = [
    "DEFAULT_LEASE",
    "DEFAULT_RETENTION",
    "DEFAULT_SCOPE",
    "MAX_RETENTION",
    "IdempotencyBehavior",
    "IdempotencyOptions",
]


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
        context = "IdempotencyBehavior"
        self._async: Callable[[], AsyncIdempotencyStore] | None = resolver.optional(
            AsyncIdempotencyStore, context=context
        )
        self._sync: Callable[[], IdempotencyStore] | None = resolver.optional(
            IdempotencyStore, context=context
        )
        options = resolver.optional(IdempotencyOptions, context=context)
        self._options: IdempotencyOptions = (
            options() if options is not None else IdempotencyOptions()
        )
        wall = resolver.optional(WallClock, context=context)
        self._now: Callable[[], datetime] = (
            wall() if wall is not None else SystemWallClock()
        ).now
        self._principals = principals
        self._plans: dict[type[Any], Plan] = {}

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
        self._plans[request_type] = Plan(
            operation,
            (("command", operation),),
            key_field_of(request_type),
            outcomes,
        )
        return True

    async def handle(self, request: Any, next: Next[Any]) -> Any:
        """Claim the key, then run the rest of the chain, replay, or refuse."""
        send = self._prepare(request)
        store = (
            self._async()
            if self._async is not None
            else AwaitedStore(self._sync_store())
        )
        mark_replay(False)
        claim = await store.claim(
            send.scope, send.key, send.fingerprint, **send.times()
        )
        # The sync store only when it is the one in use: resolving another would
        # open a session of its own.
        sync = store.store if isinstance(store, AwaitedStore) else None
        held = send.start(claim, store, sync)
        return send.replay(claim) if held is None else await drive_send(held, next)

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
        send = self._prepare(request)
        lane = scope_lane(request_state(request))
        mark_replay(False)
        sync, claim = await lane.run(_build_and_claim, self._sync, send, send.times())
        # Its calls on the async path run on the lane too, so `complete` writes
        # on the handler's `Session`, in its transaction.
        held = send.start(claim, AwaitedStore(sync, lane.run), sync)
        return send.replay(claim) if held is None else await drive_send(held, next)

    def handle_sync(self, request: Any, next: SyncNext[Any]) -> Any:
        """The same on the sync path, with the bound `IdempotencyStore`."""
        send = self._prepare(request)
        store = self._sync_store()
        mark_replay(False)
        claim = send.claim_on(store, send.times())
        held = send.start(claim, AwaitedStore(store), store)
        return send.replay(claim) if held is None else drive_send_sync(held, next)

    def _prepare(self, request: Any) -> SendFlow:
        """The flow of one send: its scope, key and fingerprint; a bad key raises."""
        plan = self._plans[type(request)]
        options = self._options
        principal = self._principals.current()
        if (
            principal is None
            and not options.allow_anonymous
            and not (plan.field is None and minted_key_running())
        ):
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
        return SendFlow(
            request,
            plan,
            scope,
            key,
            print_,
            options.lease,
            options.retention,
            self._now,
        )

    def _sync_store(self) -> IdempotencyStore:
        if self._sync is None:
            raise SyncPathError(
                "only an AsyncIdempotencyStore is bound, so send_sync cannot run "
                "an @idempotent command: await mediator.send(...) instead, or bind "
                "an IdempotencyStore too"
            )
        return self._sync()


def _build_and_claim(
    make: Callable[[], IdempotencyStore], send: SendFlow, times: ClaimTimes
) -> tuple[IdempotencyStore, Claim]:
    """Build the request's sync store and claim the key with it: in its thread."""
    store = make()
    return store, send.claim_on(store, times)
