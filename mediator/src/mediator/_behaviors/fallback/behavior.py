"""`FallbackBehavior`: a ``@fallback`` query answers degraded when its chain fails."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import nullcontext
from datetime import datetime, timedelta
from typing import Any, ClassVar, Final, cast

from injector import inject
from pydantic import ValidationError as PydanticValidationError

from mediator._behaviors.fallback.handler import FallbackPlan, plan_of
from mediator._core.behavior import Next, SyncNext
from mediator._core.clock import SystemWallClock, WallClock
from mediator._core.degradation import Degradation, Pending, pending, settle
from mediator._core.errors import ConfigurationError, DomainError, SyncPathError
from mediator._core.markers import fallback_handler_of
from mediator._core.requests import is_request_type
from mediator._core.scope import enter_scope
from mediator._core.stage import Stage
from mediator._core.threads import in_thread
from mediator._core.wiring import Wiring

__all__ = ["FALLBACK_FAILURE", "FallbackBehavior", "is_outage"]

FALLBACK_FAILURE: Final = "fallback_failure"
"""The attribute of the original failure that holds the fallback's own failure."""

_ZERO: Final = timedelta(0)


def is_outage(error: BaseException) -> bool:
    """Whether `error` is an outage a fallback may answer for.

    False for what is the request's own answer or a mistake, which a fallback
    must never hide: a `DomainError` (validation, authorization, not found,
    conflict, business rule), a pydantic validation error, a
    `ConfigurationError`, and a cancellation, interrupt or exit (anything
    that is not an `Exception`). An `ExceptionGroup` is an outage when every
    member is. True for everything else: a connection refused, a timeout, a
    breaker open, a database that refused the transaction, a failure an inner
    layer already retried to exhaustion.

    Example:
        >>> from mediator import NotFoundError
        >>> is_outage(ConnectionError()), is_outage(NotFoundError("no sku"))
        (True, False)
    """
    if isinstance(error, BaseExceptionGroup):
        group = cast("BaseExceptionGroup[BaseException]", error)
        return all(is_outage(member) for member in group.exceptions)
    return isinstance(error, Exception) and not isinstance(
        error, DomainError | ConfigurationError | PydanticValidationError
    )


class FallbackBehavior:
    """Answers a ``@fallback`` query with its fallback handler when the chain fails.

    At stage FALLBACK (330), between authorization and idempotency, so the
    retries (RETRY, 400), the breaker and the deadline run inside it: it acts
    only once they gave up, and calls the fallback handler once. It falls back
    on an outage only (`is_outage`): a domain error, a cancellation, a
    validation or configuration error reaches the caller as it was raised.

    A fallback that answers makes the send degraded: `degradation` returns
    its `Degradation` (the source and ``as_of`` the handler gave `degraded`,
    the age of its data by the bound `WallClock`, and the original failure's
    type name); so does the audit record. A fallback that fails raises the
    original failure, not its own: its own is the original's
    ``fallback_failure`` attribute (and named in a note on it), and its
    ``__context__`` is the original. A cancellation during the fallback
    propagates as it is.

    Each fallback handler is checked when the mediator is built: the query
    and response type it names (a `ConfigurationError`), and everything it
    is built from (`UnresolvableDependencyError`). Under `send_sync`, an
    ``async def`` fallback raises `SyncPathError` on every send, before the
    chain runs, not at the first outage.
    """

    stage: ClassVar[Stage] = Stage.FALLBACK
    # Its fallback handlers are built inside a scope it enters (`_in_scope`):
    # a send that does not fall back opens none for it.
    enters_own_scope: ClassVar[bool] = True

    @inject
    def __init__(self, resolver: Wiring) -> None:
        self._wiring = resolver
        wall = resolver.optional(WallClock, context="FallbackBehavior")
        self._now: Callable[[], datetime] = (
            wall() if wall is not None else SystemWallClock()
        ).now
        self._plans: dict[type[Any], FallbackPlan] = {}

    def applies_to(self, request_type: type[Any]) -> bool:
        """Whether the type is ``@fallback``; its fallback handler is checked then.

        Raises:
            ConfigurationError: The fallback handler names another query or
                another response type.
            UnresolvableDependencyError: The fallback handler cannot be built.
        """
        handler = (
            fallback_handler_of(request_type) if is_request_type(request_type) else None
        )
        if handler is None:
            return False
        query = f"{request_type.__qualname__} (module {request_type.__module__})"
        factory = self._wiring.factory(
            handler,
            context=(
                f"fallback handler {handler.__qualname__} (module "
                f"{handler.__module__}) for {query}"
            ),
        )
        self._plans[request_type] = plan_of(
            request_type, handler, factory.make, scoped=factory.scoped
        )
        return True

    async def handle(self, request: Any, next: Next[Any]) -> Any:
        """Run the chain; on an outage, answer with the fallback handler."""
        found: Degradation | None = None
        try:
            try:
                return await next()
            except Exception as error:
                if not is_outage(error):
                    raise
                plan = self._plans[type(request)]
                answer: Any = None
                with pending() as said:
                    try:
                        async with _in_scope(plan):
                            if plan.is_async:
                                answer = await plan.make().handle(request, error)
                            else:
                                answer = await in_thread(
                                    _answer, plan.make, request, error
                                )
                    except Exception as failure:
                        _keep(error, failure, plan)
                        lost = True
                    else:
                        lost = False
                if lost:
                    raise
                found = self._degradation(said, error)
                return answer
        finally:
            # This send's own reading: a nested send's is not this one's.
            settle(found)

    def handle_sync(self, request: Any, next: SyncNext[Any]) -> Any:
        """The same on the sync path; an ``async def`` fallback is refused first."""
        plan = self._plans[type(request)]
        if plan.is_async:
            raise SyncPathError(
                f"the fallback handler {plan.name} of "
                f"{type(request).__qualname__} is async def, so send_sync cannot "
                "run it: await mediator.send(...) instead, or make its handle() "
                "a plain def"
            )
        found: Degradation | None = None
        try:
            try:
                return next()
            except Exception as error:
                if not is_outage(error):
                    raise
                answer: Any = None
                with pending() as said:
                    try:
                        with _in_scope(plan):
                            answer = _answer(plan.make, request, error)
                    except Exception as failure:
                        _keep(error, failure, plan)
                        lost = True
                    else:
                        lost = False
                if lost:
                    raise
                found = self._degradation(said, error)
                return answer
        finally:
            settle(found)

    def _degradation(self, said: Pending, error: Exception) -> Degradation:
        as_of = said.as_of
        age = None if as_of is None else max(self._now() - as_of, _ZERO)
        return Degradation(said.source, as_of, age, type(error).__qualname__)


def _in_scope(plan: FallbackPlan) -> enter_scope | nullcontext[None]:
    """The request scope, entered (or joined) when the fallback may reach it."""
    return enter_scope() if plan.scoped else nullcontext()


def _answer(make: Callable[[], Any], request: Any, failure: Exception) -> Any:
    """Build the fallback handler and call its plain-def ``handle``."""
    return make().handle(request, failure)


def _keep(original: Exception, failure: Exception, plan: FallbackPlan) -> None:
    """Attach the fallback's `failure` to the `original` raised in its place."""
    setattr(original, FALLBACK_FAILURE, failure)
    original.add_note(
        f"the fallback handler {plan.name} failed too, with "
        f"{type(failure).__qualname__} (the original's {FALLBACK_FAILURE})"
    )
