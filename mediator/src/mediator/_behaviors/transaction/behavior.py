"""`TransactionBehavior` and the units of work it runs each attempt in."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any, ClassVar, Final, Protocol, cast, runtime_checkable

from injector import inject

from mediator._behaviors.transaction.drive import drive_attempt
from mediator._behaviors.transaction.drive_sync import drive_attempt_sync
from mediator._behaviors.transaction.flow import attempt, outcome_of
from mediator._behaviors.transaction.marker import is_transactional
from mediator._core.behavior import Next, SyncNext
from mediator._core.errors import ConfigurationError, SyncPathError
from mediator._core.requests import is_request_type
from mediator._core.scope import UNIT_OF_WORK, ScopeState, active_scope
from mediator._core.stage import Stage
from mediator._core.threads import Lane, scope_lane
from mediator._core.wiring import Wiring

__all__ = ["AsyncUnitOfWork", "TransactionBehavior", "UnitOfWork"]

_CONTEXT: Final = "TransactionBehavior"


@runtime_checkable
class UnitOfWork(Protocol):
    """A transaction, used by one attempt: begun, then committed or rolled back."""

    def begin(self) -> None:
        """Start the transaction."""
        ...

    def commit(self) -> None:
        """Make the attempt's writes durable."""
        ...

    def rollback(self) -> None:
        """Discard the attempt's writes."""
        ...

    def savepoint(self) -> UnitOfWork:
        """The unit of work of one nested attempt, inside this one's transaction.

        Its `begin` sets a savepoint, `commit` releases it, and `rollback` rolls
        back to it: the nested attempt's writes go, the writes made before it
        stay. Called while this unit's transaction (or savepoint) is running.
        """
        ...

    def translate_error(self, error: BaseException) -> BaseException:
        """The error to raise for `error`, or `error` itself.

        For example a `ConflictError` for a unique violation, or a
        `TransientDatabaseError` for a serialization failure.
        """
        ...


@runtime_checkable
class AsyncUnitOfWork(Protocol):
    """`UnitOfWork` for async drivers; used on the async path when bound."""

    async def begin(self) -> None:
        """Start the transaction."""
        ...

    async def commit(self) -> None:
        """Make the attempt's writes durable."""
        ...

    async def rollback(self) -> None:
        """Discard the attempt's writes."""
        ...

    def savepoint(self) -> AsyncUnitOfWork:
        """The unit of work of one nested attempt: see `UnitOfWork.savepoint`."""
        ...

    def translate_error(self, error: BaseException) -> BaseException:
        """The error to raise for `error`, or `error` itself."""
        ...


class TransactionBehavior:
    """Wraps each attempt of a `@transactional` request in a unit of work.

    Innermost of the built-in behaviors (stage TRANSACTION), inside retry: each
    attempt gets a fresh transaction, and a failed attempt's writes are rolled
    back before the next. A request sent from inside a transactional handler
    joins the running transaction: each of its attempts runs in a savepoint
    (`UnitOfWork.savepoint`), released when it succeeds and rolled back to when
    it fails, so a retried nested request leaves only its last attempt's
    writes, committed or rolled back with the outer transaction. When rolling
    back to the savepoint fails, the outer transaction is lost: the failure is
    raised as a `TransientDatabaseError`, which only a retry of the whole unit
    can fix.

    The async path uses the bound `AsyncUnitOfWork` when there is one, else the
    `UnitOfWork`; `send_sync` needs a `UnitOfWork`. A request whose handler is
    a plain ``def`` gets the `UnitOfWork` on both paths when one is bound (with
    both bound too), since such a handler uses the sync `Session`: under
    `send`, its begin, commit and rollback run in the worker thread of the
    request, the one the handler runs in, so they never block the event loop.
    A failure while rolling back never hides the failure that caused it.
    """

    stage: ClassVar[Stage] = Stage.TRANSACTION

    @inject
    def __init__(self, resolver: Wiring) -> None:
        self._async: Callable[[], AsyncUnitOfWork] | None = resolver.optional(
            AsyncUnitOfWork, context=_CONTEXT
        )
        self._sync: Callable[[], UnitOfWork] | None = resolver.optional(
            UnitOfWork, context=_CONTEXT
        )

    def applies_to(self, request_type: type[Any]) -> bool:
        """Whether the type is `@transactional`; a unit of work must be bound then.

        Raises:
            ConfigurationError: No `UnitOfWork` or `AsyncUnitOfWork` is bound.
        """
        if not (is_request_type(request_type) and is_transactional(request_type)):
            return False
        if self._async is None and self._sync is None:
            raise ConfigurationError(
                f"{request_type.__qualname__} (module {request_type.__module__}) is "
                "@transactional but no UnitOfWork is bound: install "
                "mediator.sqlalchemy.SqlAlchemyModule, or bind UnitOfWork / "
                "AsyncUnitOfWork yourself"
            )
        return True

    async def handle(self, request: Any, next: Next[Any]) -> Any:
        """Run one attempt in a unit of work, or in a savepoint of the running one."""
        return await self._arun(request, next, threaded=False)

    async def handle_threaded(self, request: Any, next: Next[Any]) -> Any:
        """`handle` for a request whose handler is a plain def, run in a thread.

        The sync `UnitOfWork` when one is bound, its calls made on the request's
        worker thread; else the `AsyncUnitOfWork`, on the loop. A nested send
        joins the running unit, as with `handle`.
        """
        return await self._arun(request, next, threaded=True)

    def handle_sync(self, request: Any, next: SyncNext[Any]) -> Any:
        """The same on the sync path, with the bound `UnitOfWork`."""
        scope = _scope(request)
        outer: object = scope.get(UNIT_OF_WORK)
        unit = (
            self._sync_unit(request)
            if outer is None
            else _sync_savepoint(request, outer)
        )
        flow = attempt(scope, outer, unit, request)
        return outcome_of(drive_attempt_sync(flow, unit, next))

    async def _arun(self, request: Any, next: Next[Any], *, threaded: bool) -> Any:
        scope = _scope(request)
        outer: object = scope.get(UNIT_OF_WORK)
        unit = self._async_unit(request, scope, outer, threaded=threaded)
        flow = attempt(scope, outer, unit, request)
        return outcome_of(await drive_attempt(flow, unit, next))

    def _async_unit(
        self, request: Any, scope: ScopeState, outer: object, *, threaded: bool
    ) -> AsyncUnitOfWork:
        """The unit of work of an attempt on the async path.

        A savepoint of the running unit, for a nested send; for a plain-def
        handler the sync `UnitOfWork` (on its worker thread) when one is bound;
        else the `AsyncUnitOfWork`, or the sync one called on the loop.
        """
        if outer is not None:
            return _async_savepoint(outer)
        if threaded and self._sync is not None:
            return _InThread(self._sync(), scope_lane(scope))
        if self._async is not None:
            return self._async()
        return _Awaitable(self._sync_unit(request))

    def _sync_unit(self, request: Any) -> UnitOfWork:
        if self._sync is None:
            raise SyncPathError(
                f"{type(request).__qualname__} is @transactional and only an "
                "AsyncUnitOfWork is bound, so send_sync cannot run it: await "
                "mediator.send(...) instead, or bind a sync UnitOfWork too"
            )
        return self._sync()


class _Awaitable:
    """A sync `UnitOfWork` used on the async path (no async one is bound)."""

    def __init__(self, unit: UnitOfWork) -> None:
        self.unit = unit

    async def begin(self) -> None:
        self.unit.begin()

    async def commit(self) -> None:
        self.unit.commit()

    async def rollback(self) -> None:
        self.unit.rollback()

    def savepoint(self) -> _Awaitable:
        return _Awaitable(self.unit.savepoint())

    def translate_error(self, error: BaseException) -> BaseException:
        return self.unit.translate_error(error)


class _InThread(_Awaitable):
    """A sync `UnitOfWork` whose calls run on the request's worker thread.

    The thread is the one a plain-def handler of the request runs in, so the
    session's connection stays on one thread, and a rollback waits for a
    handler still running after its send was cancelled.
    """

    def __init__(self, unit: UnitOfWork, lane: Lane) -> None:
        super().__init__(unit)
        self.lane = lane

    async def begin(self) -> None:
        await self.lane.run(self.unit.begin)

    async def commit(self) -> None:
        await self.lane.run(self.unit.commit)

    async def rollback(self) -> None:
        await self.lane.run(self.unit.rollback)

    def savepoint(self) -> _InThread:
        return _InThread(self.unit.savepoint(), self.lane)


def _async_savepoint(outer: object) -> AsyncUnitOfWork:
    """A savepoint of the running unit of work, for a nested send on the async path."""
    if inspect.iscoroutinefunction(cast(AsyncUnitOfWork, outer).begin):
        return cast(AsyncUnitOfWork, outer).savepoint()
    return _Awaitable(cast(UnitOfWork, outer).savepoint())


def _sync_savepoint(request: Any, outer: object) -> UnitOfWork:
    """A savepoint of the running unit of work, for a nested `send_sync`."""
    if isinstance(outer, _Awaitable):
        return outer.unit.savepoint()
    if inspect.iscoroutinefunction(cast(UnitOfWork, outer).begin):
        raise SyncPathError(
            f"{type(request).__qualname__} is @transactional and was sent with "
            "send_sync inside a transaction of an AsyncUnitOfWork, whose savepoints "
            "must be awaited: await mediator.send(...) instead"
        )
    return cast(UnitOfWork, outer).savepoint()


def _scope(request: Any) -> ScopeState:
    scope = active_scope()
    if scope is None:  # the route of a transactional request always opens one
        raise ConfigurationError(
            f"TransactionBehavior ran outside a request scope for "
            f"{type(request).__qualname__}; it must be registered with the mediator"
        )
    return scope
