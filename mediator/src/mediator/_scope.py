"""The request scope: services built once per top-level send, shared by nested ones."""

from __future__ import annotations

from contextvars import ContextVar
from typing import Any, TypeVar

from injector import Injector, Provider, Scope, ScopeDecorator

from mediator._errors import ScopeError

__all__ = ["RequestScope", "request_scope"]

T = TypeVar("T")


class ScopeState(dict[object, Any]):
    """The instances of one request scope, by key.

    Closed when its top-level send ends; a task that outlives the send then
    opens a scope of its own.

    A dict subclass without ``__init__`` so that opening a scope stays cheap.
    """

    open: bool = True


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
    """Opens a request scope for a top-level send; inside one, joins it instead."""

    __slots__ = ("_state", "_token")

    def __enter__(self) -> None:
        state = current_scope.get()
        if state is not None and state.open:
            self._token = None
            return
        self._state = state = ScopeState()
        self._token = current_scope.set(state)

    def __exit__(self, *_: object) -> None:
        if self._token is not None:
            self._state.open = False
            current_scope.reset(self._token)
