"""The request scope: services built once per top-level send, shared by nested ones."""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Iterator
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, Final, Protocol, TypeVar, cast

from injector import Injector, Provider, Scope, ScopeDecorator

from mediator._core.errors import ScopeError, SyncPathError

if TYPE_CHECKING:
    from mediator._core.threads import Lane

__all__ = [
    "UNIT_OF_WORK",
    "CommitStep",
    "RequestScope",
    "Step",
    "TransactionParticipant",
    "at_scope_exit",
    "find_participant",
    "in_unit_of_work",
    "join_transaction",
    "participants",
    "request_scope",
]

T = TypeVar("T")
P = TypeVar("P", bound="TransactionParticipant")


class ScopeState(dict[object, Any]):
    """The instances of one request scope, by key.

    Closed when its top-level send ends: its cleanups run (see `at_scope_exit`),
    and a task that outlives the send opens a scope of its own.

    A dict subclass without ``__init__`` so that opening a scope stays cheap.
    """

    open: bool = True
    cleanups: list[Callable[[], object]] | None = None
    lane: Lane | None = None  # the worker thread of its sync work, once it has some

    def close(self, failure: BaseException | None) -> None:
        """End the scope on the sync path: run the cleanups, newest first.

        An async cleanup cannot be awaited here: what it returned is closed and
        a `SyncPathError` reported in its place.
        """
        if self.cleanups is None:  # the common case: close it and be done
            self.open = False
            return
        errors: list[Exception] = []
        for cleanup, result in self._run_cleanups(errors):
            errors.append(_refused(cleanup, result))
        _report(errors, failure)

    async def aclose(self, failure: BaseException | None) -> None:
        """End the scope on the async path: run the cleanups, awaiting async ones.

        A scope that ran sync work in a worker thread (a plain-def handler, a
        sync unit of work) runs its cleanups on that thread too, after the work
        queued there, so a sync `Session` is closed where it was used; what a
        cleanup returns that must be awaited is awaited here.
        """
        lane = self.lane
        if lane is not None:
            self.lane = None
            try:
                await self._aclose_on(lane, failure)
            finally:
                lane.release()
            return
        if self.cleanups is None:
            self.open = False
            return
        errors: list[Exception] = []
        for _, result in self._run_cleanups(errors):
            try:
                await result
            except Exception as error:
                errors.append(error)
        _report(errors, failure)

    async def _aclose_on(self, lane: Lane, failure: BaseException | None) -> None:
        self.open = False
        errors: list[Exception] = []
        for cleanup in reversed(self.cleanups or ()):
            try:
                result = await lane.run(cleanup)
                if inspect.isawaitable(result):
                    await result
            except Exception as error:
                errors.append(error)
        _report(errors, failure)

    def _run_cleanups(
        self, errors: list[Exception]
    ) -> Iterator[tuple[Callable[[], object], Awaitable[object]]]:
        """Close the scope and call its cleanups, newest first, keeping failures.

        What a cleanup returns that must be awaited is handed to the caller, the
        path's driver, before the next cleanup runs; the rest is the same on both
        paths. Every failure is added to `errors`, in the order the cleanups ran.
        """
        self.open = False
        for cleanup in reversed(self.cleanups or ()):
            try:
                result = cleanup()
            except Exception as error:
                errors.append(error)
                continue
            if inspect.isawaitable(result):
                yield cleanup, result


def _refused(cleanup: Callable[[], object], result: Awaitable[object]) -> Exception:
    """The failure of an async cleanup on the sync path, its awaitable closed."""
    try:
        close = getattr(result, "close", None)
        if close is not None:
            close()
    except Exception as error:
        return error
    return SyncPathError(
        f"the scope cleanup {cleanup!r} is async and the send is "
        "sync: await mediator.send(...) instead"
    )


def _report(errors: list[Exception], failure: BaseException | None) -> None:
    # A cleanup that fails never hides the send's own failure: it is noted on it.
    if not errors:
        return
    if failure is not None:
        for error in errors:
            failure.add_note(
                f"scope cleanup also failed: {type(error).__qualname__}: {error}"
            )
        return
    if len(errors) == 1:
        raise errors[0]
    raise ExceptionGroup("request scope cleanups failed", errors)


# The scope of the send running in this context. Tasks copy their context, so a
# notification handler run concurrently joins the scope of the send around it,
# while sends started side by side (gather, separate tasks) never see each other's.
current_scope: ContextVar[ScopeState | None] = ContextVar(
    "mediator_scope", default=None
)


def active_scope() -> ScopeState | None:
    """The open scope of the current context, if any."""
    state = current_scope.get()
    return state if state is not None and state.open else None


class RequestScope(Scope):
    """An injector scope holding one instance per key for each top-level send.

    Bind with ``binder.bind(Key, to=..., scope=RequestScope)`` or decorate a
    class with `request_scope`. A nested send (a handler sending another
    request) joins the scope of its parent and gets the same instances. Asking
    for a scoped service outside any send raises `ScopeError`.
    """

    def get(self, key: type[T], provider: Provider[T]) -> Provider[T]:
        """Return a provider that caches `key` in the current request scope."""
        return _ScopedProvider(key, provider)


class _ScopedProvider(Provider[T]):
    def __init__(self, key: type[T], provider: Provider[T]) -> None:
        self._key = key
        self._provider = provider

    def get(self, injector: Injector) -> T:
        state = active_scope()
        if state is None:
            raise ScopeError(
                f"{_describe(self._key)} is request-scoped and no send is running: "
                "ask for it from a handler or behavior, or during a send"
            )
        try:
            instance: T = state[self._key]
        except KeyError:
            instance = state[self._key] = self._provider.get(injector)
        return instance


def _describe(key: object) -> str:
    return getattr(key, "__qualname__", None) or repr(key)


request_scope = ScopeDecorator(RequestScope)
"""Class decorator binding the class in `RequestScope`, like injector's `singleton`."""


class enter_scope:
    """Opens a request scope for a top-level send; inside one, joins it instead.

    ``with`` on the sync path, ``async with`` on the async path (where async
    cleanups are awaited).
    """

    __slots__ = ("_state", "_token")

    def _enter(self) -> None:
        state = current_scope.get()
        if state is not None and state.open:
            self._token = None
            return
        self._state = state = ScopeState()
        self._token = current_scope.set(state)

    def __enter__(self) -> None:
        self._enter()

    def __exit__(
        self, _type: object, failure: BaseException | None, _tb: object
    ) -> None:
        if self._token is not None:
            current_scope.reset(self._token)
            self._state.close(failure)

    async def __aenter__(self) -> None:
        self._enter()

    async def __aexit__(
        self, _type: object, failure: BaseException | None, _tb: object
    ) -> None:
        if self._token is not None:
            current_scope.reset(self._token)
            await self._state.aclose(failure)


def at_scope_exit(cleanup: Callable[[], object]) -> None:
    """Run `cleanup` when the current request scope ends (newest first).

    A request-scoped resource registers its own release, e.g. a provider that
    opens a database session registers ``session.close``. `cleanup` may return
    an awaitable on the async path. A cleanup that fails does not hide the
    send's own failure; it is noted on it.

    Raises:
        ScopeError: No send is running.
    """
    state = active_scope()
    if state is None:
        raise ScopeError("at_scope_exit() needs a running send: call it during one")
    if state.cleanups is None:
        state.cleanups = []
    state.cleanups.append(cleanup)


# --- the unit of work of the scope, and who takes part in it ----------------------

UNIT_OF_WORK: Final = object()
"""Key of the running unit of work in the request scope (`TransactionBehavior`'s)."""

_PARTICIPANTS: Final = object()  # key of the scope's participants, by type


def in_unit_of_work() -> bool:
    """Whether the current send runs inside a unit of work.

    True in a send nested in a `@transactional` handler (and in that handler),
    False at the top level and outside any send. A retry uses it to leave a
    failure that dooms the transaction (`TransientDatabaseError`) to the
    outermost send, which can run the whole unit again.

    Example:
        >>> in_unit_of_work()
        False
    """
    scope = active_scope()
    return scope is not None and UNIT_OF_WORK in scope


class Step(Protocol):
    """Work the transaction's flow hands its driver, besides the unit's own."""

    async def arun(self) -> object:
        """Do it on the async path."""
        ...

    def run(self) -> object:
        """Do it on the sync path."""
        ...


class CommitStep(Step, Protocol):
    """A `Step` run in the transaction just before it commits."""

    def committed(self) -> None:
        """The transaction committed, with the step's work in it."""
        ...


class TransactionParticipant(Protocol):
    """Work of another behavior that commits or rolls back with the scope's unit.

    The transaction asks each participant of its request scope, in the order
    they joined: when an attempt begins, for a mark; before the outermost
    commit, for a step to run in the transaction; after an attempt rolls back,
    for a step undoing what was done since that attempt's mark.
    """

    def mark(self) -> int:
        """A point in the participant's history: where an attempt begins."""
        ...

    def before_commit(self, request: object, response: object) -> CommitStep | None:
        """The step to run before the outermost commit of `request`, if any."""
        ...

    def after_rollback(self, since: int) -> Step | None:
        """The step undoing what was done after the mark `since`, if any."""
        ...


def join_transaction(state: ScopeState, kind: type[P]) -> P:
    """The scope's participant of type `kind`, made (``kind()``) on first use."""
    joined: dict[type[Any], TransactionParticipant] | None = state.get(_PARTICIPANTS)
    if joined is None:
        joined = state[_PARTICIPANTS] = {}
    found = joined.get(kind)
    if found is None:
        found = joined[kind] = kind()
    return cast(P, found)


def find_participant(state: ScopeState, kind: type[P]) -> P | None:
    """The scope's participant of type `kind`, if it joined."""
    joined: dict[type[Any], TransactionParticipant] | None = state.get(_PARTICIPANTS)
    return None if joined is None else cast("P | None", joined.get(kind))


def participants(
    state: ScopeState,
) -> list[tuple[type[Any], TransactionParticipant]]:
    """The scope's participants, by type, in the order they joined."""
    joined: dict[type[Any], TransactionParticipant] | None = state.get(_PARTICIPANTS)
    return [] if joined is None else list(joined.items())
