"""`@transactional` and `TransactionBehavior`: one unit of work per attempt."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import Any, ClassVar, NoReturn, Protocol, TypeVar, cast, runtime_checkable

from injector import inject

from mediator._behaviors.transaction.drive import drive_attempt
from mediator._behaviors.transaction.drive_sync import drive_attempt_sync
from mediator._core.behavior import Next, SyncNext
from mediator._core.errors import (
    ConfigurationError,
    SyncPathError,
    TransientDatabaseError,
    UnresolvableDependencyError,
)
from mediator._core.requests import is_request_type
from mediator._core.scope import (
    UNIT_OF_WORK,
    CommitStep,
    ScopeState,
    Step,
    active_scope,
    in_unit_of_work,
    participants,
)
from mediator._core.stage import Stage
from mediator._core.threads import Lane, scope_lane
from mediator._core.wiring import Wiring

__all__ = [
    "AsyncUnitOfWork",
    "TransactionBehavior",
    "UnitOfWork",
    "in_unit_of_work",
    "is_transactional",
    "transactional",
]

C = TypeVar("C", bound=type[Any])

_MARK = "__mediator_transactional__"


def transactional(cls: C | None = None, /) -> C:
    """Run every attempt of this request in its own unit of work.

    A bare class decorator, inherited by subclasses. The handler's writes are
    committed when it returns and rolled back when anything raises; a request
    sent from inside a transactional handler joins the running unit of work,
    each of its attempts in a savepoint of its own.

    Raises:
        TypeError: Used with arguments, or on something that is not a request
            class.

    Example:
        >>> from mediator import Command
        >>> @transactional
        ... class PlaceOrder(Command[int]):
        ...     sku: str
    """
    if cls is None or not isinstance(cast(object, cls), type):
        raise TypeError(
            "@transactional is a bare class decorator: write @transactional above "
            f"a Command or Query class, not @transactional(...); got {cls!r}"
        )
    if not is_request_type(cls):
        raise TypeError(f"@transactional goes on Command or Query classes, not {cls!r}")
    setattr(cls, _MARK, True)
    return cls


def is_transactional(request_or_type: object) -> bool:
    """Whether a request (or request class) is marked `@transactional`."""
    cls = (
        request_or_type if isinstance(request_or_type, type) else type(request_or_type)
    )
    return bool(getattr(cls, _MARK, False))


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
        self._async: Callable[[], AsyncUnitOfWork] | None = _optional(
            resolver, AsyncUnitOfWork
        )
        self._sync: Callable[[], UnitOfWork] | None = _optional(resolver, UnitOfWork)

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
        scope = _scope(request)
        outer: object = scope.get(UNIT_OF_WORK)
        unit: AsyncUnitOfWork
        if outer is not None:
            unit = _async_savepoint(outer)
        elif self._async is not None:
            unit = self._async()
        else:
            unit = _Awaitable(self._sync_unit(request))
        flow = _attempt(scope, outer, unit, request)
        return _result(await drive_attempt(flow, unit, next))

    async def handle_threaded(self, request: Any, next: Next[Any]) -> Any:
        """`handle` for a request whose handler is a plain def, run in a thread.

        The sync `UnitOfWork` when one is bound, its calls made on the request's
        worker thread; else the `AsyncUnitOfWork`, on the loop. A nested send
        joins the running unit, as with `handle`.
        """
        scope = _scope(request)
        outer: object = scope.get(UNIT_OF_WORK)
        unit: AsyncUnitOfWork
        if outer is not None:
            unit = _async_savepoint(outer)
        elif self._sync is not None:
            unit = _InThread(self._sync(), scope_lane(scope))
        else:
            unit = cast(Callable[[], AsyncUnitOfWork], self._async)()
        flow = _attempt(scope, outer, unit, request)
        return _result(await drive_attempt(flow, unit, next))

    def handle_sync(self, request: Any, next: SyncNext[Any]) -> Any:
        """The same on the sync path, with the bound `UnitOfWork`."""
        scope = _scope(request)
        outer: object = scope.get(UNIT_OF_WORK)
        unit = (
            self._sync_unit(request)
            if outer is None
            else _sync_savepoint(request, outer)
        )
        flow = _attempt(scope, outer, unit, request)
        return _result(drive_attempt_sync(flow, unit, next))

    def _sync_unit(self, request: Any) -> UnitOfWork:
        if self._sync is None:
            raise SyncPathError(
                f"{type(request).__qualname__} is @transactional and only an "
                "AsyncUnitOfWork is bound, so send_sync cannot run it: await "
                "mediator.send(...) instead, or bind a sync UnitOfWork too"
            )
        return self._sync()


def _optional(resolver: Wiring, key: type[Any]) -> Callable[[], Any] | None:
    try:
        return resolver.factory(key, context="TransactionBehavior").make
    except UnresolvableDependencyError:
        return None


_NEXT = "next"  # the step that runs the rest of the chain, as the drivers know it


@dataclass(frozen=True, slots=True)
class _Failed:
    """The attempt's own failure, for the driver to raise as it is.

    Raised from the generator, a `StopIteration` would turn into a
    `RuntimeError`; raised after the driver returns it, every failure stays
    what it was.
    """

    error: BaseException


_Flow = Generator[str | Step, Any, Any]


def _attempt(
    scope: ScopeState,
    outer: object,
    unit: UnitOfWork | AsyncUnitOfWork,
    request: object,
) -> _Flow:
    """One attempt in `unit`, as the steps a driver performs, async or sync.

    It yields the name of each step: ``"begin"``, ``"commit"`` or ``"rollback"``
    (the unit's method to call) or `_NEXT` (the rest of the chain); and the
    `Step`s of the scope's participants (`mediator._core.scope`): before the
    outermost commit, theirs to run in the transaction (completing the
    idempotency claims due, so they commit with the handler's writes); after a
    rollback, theirs undoing the attempt's part (releasing the claims of the
    sends that returned inside it). The driver sends back what the step
    returned, or throws in what it raised. It returns the response, or
    `_Failed` with the failure to raise as it is.
    """
    scope[UNIT_OF_WORK] = unit
    marks = {kind: joined.mark() for kind, joined in participants(scope)}
    try:
        yield "begin"
        result = yield _NEXT
        due = _due(scope, request, result) if outer is None else []
        for step in due:
            yield step
        yield "commit"
        for step in due:
            step.committed()
    except BaseException as error:
        try:
            yield "rollback"
        except Exception as failure:
            _note_rollback_failure(error, failure)
            if outer is not None:
                _raise_lost(error)
        for kind, joined in participants(scope):
            undone = joined.after_rollback(marks.get(kind, 0))
            if undone is None:
                continue
            try:
                yield undone
            except Exception as failure:
                # The key is free again when its lease ends; the failure that
                # rolled the attempt back is the one to raise.
                error.add_note(
                    "releasing an idempotency key also failed: "
                    f"{type(failure).__qualname__}: {failure}"
                )
        final = unit.translate_error(error) if isinstance(error, Exception) else error
        if final is error:
            return _Failed(error)
        raise final from error
    finally:
        _restore(scope, outer)
    return result


def _due(scope: ScopeState, request: object, response: object) -> list[CommitStep]:
    """The participants' steps to run before the outermost commit, in order."""
    steps = (
        joined.before_commit(request, response) for _, joined in participants(scope)
    )
    return [step for step in steps if step is not None]


def _result(outcome: Any) -> Any:
    if isinstance(outcome, _Failed):
        raise outcome.error
    return outcome


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


def _restore(scope: ScopeState, outer: object) -> None:
    """Make the unit of work around the attempt the running one again, if any."""
    if outer is None:
        del scope[UNIT_OF_WORK]
    else:
        scope[UNIT_OF_WORK] = outer


def _scope(request: Any) -> ScopeState:
    scope = active_scope()
    if scope is None:  # the route of a transactional request always opens one
        raise ConfigurationError(
            f"TransactionBehavior ran outside a request scope for "
            f"{type(request).__qualname__}; it must be registered with the mediator"
        )
    return scope


def _raise_lost(error: BaseException) -> NoReturn:
    """A nested attempt failed and its savepoint could not be rolled back to.

    The outer transaction may hold the attempt's writes or be unusable: it must
    not go on, so the failure becomes one that only a fresh transaction fixes.
    Cancellation and exits stay as they are.
    """
    if not isinstance(error, Exception):
        raise error
    raise TransientDatabaseError(
        "the transaction was lost, try again (rolling back to a savepoint failed)"
    ) from error


def _note_rollback_failure(error: BaseException, failure: Exception) -> None:
    # The failure that made us roll back is the one the caller needs; a failed
    # rollback is kept beside it, never raised instead of it.
    error.add_note(f"rolling back also failed: {type(failure).__qualname__}: {failure}")
