"""`@transactional` and `TransactionBehavior`: one unit of work per attempt."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar, NoReturn, Protocol, TypeVar, cast, runtime_checkable

from injector import Injector, inject

from mediator._behavior import Next, SyncNext
from mediator._errors import (
    ConfigurationError,
    SyncPathError,
    UnresolvableDependencyError,
)
from mediator._requests import is_request_type
from mediator._scope import ScopeState, active_scope
from mediator._stage import Stage
from mediator._wiring import Wiring

__all__ = [
    "AsyncUnitOfWork",
    "TransactionBehavior",
    "UnitOfWork",
    "is_transactional",
    "transactional",
]

C = TypeVar("C", bound=type[Any])

_MARK = "__mediator_transactional__"
_ACTIVE = object()  # key of the running unit of work in the request scope


def transactional(cls: C | None = None, /) -> C:
    """Run every attempt of this request in its own unit of work.

    A bare class decorator, inherited by subclasses. The handler's writes are
    committed when it returns and rolled back when anything raises; a request
    sent from inside a transactional handler joins the running unit of work.

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

    def translate_error(self, error: BaseException) -> BaseException:
        """The error to raise for `error`, or `error` itself."""
        ...


class TransactionBehavior:
    """Wraps each attempt of a `@transactional` request in a unit of work.

    Innermost of the built-in behaviors (stage TRANSACTION), inside retry: each
    attempt gets a fresh transaction, and a failed attempt's writes are rolled
    back before the next. The async path uses the bound `AsyncUnitOfWork` when
    there is one, else the `UnitOfWork`; `send_sync` needs a `UnitOfWork`.
    A failure while rolling back never hides the failure that caused it.
    """

    stage: ClassVar[Stage] = Stage.TRANSACTION

    @inject
    def __init__(self, injector: Injector) -> None:
        self._wiring = Wiring(injector, fixed={})
        self._sync: Callable[[], UnitOfWork] | None = None
        self._async: Callable[[], AsyncUnitOfWork] | None = None
        self._prepared = False

    def applies_to(self, request_type: type[Any]) -> bool:
        """Whether the type is `@transactional`; a unit of work must be bound then.

        Raises:
            ConfigurationError: No `UnitOfWork` or `AsyncUnitOfWork` is bound.
        """
        if not (is_request_type(request_type) and is_transactional(request_type)):
            return False
        if not self._prepared:
            self._async = self._optional(AsyncUnitOfWork)
            self._sync = self._optional(UnitOfWork)
            self._prepared = True
        if self._async is None and self._sync is None:
            raise ConfigurationError(
                f"{request_type.__qualname__} (module {request_type.__module__}) is "
                "@transactional but no UnitOfWork is bound: install "
                "mediator.sqlalchemy.SqlAlchemyModule, or bind UnitOfWork / "
                "AsyncUnitOfWork yourself"
            )
        return True

    def _optional(self, key: type[Any]) -> Callable[[], Any] | None:
        try:
            return self._wiring.factory(key, context="TransactionBehavior").make
        except UnresolvableDependencyError:
            return None

    async def handle(self, request: Any, next: Next[Any]) -> Any:
        """Run one attempt in a unit of work, or join the one already running."""
        scope = _scope(request)
        if _ACTIVE in scope:
            return await next()
        unit = (
            self._async()
            if self._async is not None
            else _Awaitable(self._sync_unit(request))
        )
        scope[_ACTIVE] = unit
        try:
            await unit.begin()
            result = await next()
            await unit.commit()
        except BaseException as error:
            try:
                await unit.rollback()
            except Exception as failure:
                _note_rollback_failure(error, failure)
            _raise_final(unit, error)
        finally:
            del scope[_ACTIVE]
        return result

    def handle_sync(self, request: Any, next: SyncNext[Any]) -> Any:
        """The same on the sync path, with the bound `UnitOfWork`."""
        scope = _scope(request)
        if _ACTIVE in scope:
            return next()
        unit = self._sync_unit(request)
        scope[_ACTIVE] = unit
        try:
            unit.begin()
            result = next()
            unit.commit()
        except BaseException as error:
            try:
                unit.rollback()
            except Exception as failure:
                _note_rollback_failure(error, failure)
            _raise_final(unit, error)
        finally:
            del scope[_ACTIVE]
        return result

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
        self._unit = unit

    async def begin(self) -> None:
        self._unit.begin()

    async def commit(self) -> None:
        self._unit.commit()

    async def rollback(self) -> None:
        self._unit.rollback()

    def translate_error(self, error: BaseException) -> BaseException:
        return self._unit.translate_error(error)


def _scope(request: Any) -> ScopeState:
    scope = active_scope()
    if scope is None:  # the route of a transactional request always opens one
        raise ConfigurationError(
            f"TransactionBehavior ran outside a request scope for "
            f"{type(request).__qualname__}; it must be registered with the mediator"
        )
    return scope


def _raise_final(unit: UnitOfWork | AsyncUnitOfWork, error: BaseException) -> NoReturn:
    """Raise what the unit of work makes of `error`, with `error` as its cause.

    Cancellation and exits, and errors it does not translate, are raised as
    they are.
    """
    final = unit.translate_error(error) if isinstance(error, Exception) else error
    if final is error:
        raise error
    raise final from error


def _note_rollback_failure(error: BaseException, failure: Exception) -> None:
    # The failure that made us roll back is the one the caller needs; a failed
    # rollback is kept beside it, never raised instead of it.
    error.add_note(f"rolling back also failed: {type(failure).__qualname__}: {failure}")
