"""Turns injector bindings into plain factories, once, when the mediator is built.

A per-send ``injector.get`` of a transient class re-reads the constructor's
signature every time (tens of microseconds). Here each dependency graph is
walked once: every binding becomes a zero-argument callable, and anything that
could not be built on the first send (a missing binding, a constructor that is
not ``@inject``-ed, an abstract class) is reported now, with the path to it.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final, cast, get_origin

from injector import (
    AssistedBuilder,
    Binder,
    ClassAssistedBuilder,
    ClassProvider,
    InstanceProvider,
    NoScope,
    Provider,
    ProviderOf,
    ScopeDecorator,
    SingletonScope,
    UnsatisfiedRequirement,
    get_bindings,  # pyright: ignore[reportUnknownVariableType]
)
from injector import Error as InjectorError
from injector import Injector as _Injector

from mediator._core.errors import UnresolvableDependencyError
from mediator._core.scope import RequestScope, ScopeState, active_scope

__all__ = ["PROVIDED_BY", "Factory", "Wiring", "bound_explicitly", "provided_by"]

_UNSET: Any = object()
_LOOKUPS: tuple[object, ...] = (ProviderOf, AssistedBuilder, ClassAssistedBuilder)


@dataclass(frozen=True, slots=True)
class Factory:
    """Builds one thing; `scoped` says whether it may reach the request scope.

    It may, through a request-scoped binding, the mediator (nested sends), the
    injector or a `ProviderOf`, or a provider whose inside we cannot see. A send
    whose route reaches none of these opens no scope: nothing in it could tell.
    """

    make: Callable[[], Any]
    scoped: bool
    instance: Any = None  # the one instance, when it is a singleton built already


class Wiring:
    """Compiles factories against one injector; each key is compiled once.

    The mediator has one: its handlers, its behaviors, and what the built-in
    behaviors build (validators, policies, the unit of work) are all compiled
    by it. A behavior gets it by asking for `Wiring` in its constructor.
    """

    def __init__(self, injector: _Injector, *, fixed: dict[object, object]) -> None:
        self._injector = injector
        self._fixed = {**fixed, Wiring: self}
        self._done: dict[object, Factory] = {}

    def factory(self, key: Any, *, context: str) -> Factory:
        """The factory for `key`; `context` starts every error message.

        Raises:
            UnresolvableDependencyError: Something in the graph cannot be built.
        """
        return self._compile(key, context, ())

    def optional(self, key: Any, *, context: str) -> Callable[[], Any] | None:
        """What builds `key`, or None when it cannot be built (an optional part).

        A behavior asks this for what it may do without, such as a unit of work
        or a store that no module binds.
        """
        try:
            return self.factory(key, context=context).make
        except UnresolvableDependencyError:
            return None

    def _compile(self, key: Any, context: str, path: tuple[str, ...]) -> Factory:
        if key in self._fixed:
            value = self._fixed[key]
            return Factory(lambda: value, scoped=True)
        if key is _Injector or get_origin(key) in _LOOKUPS:
            # Whoever holds the injector (or a provider from it) can reach
            # request-scoped services at any time: open a scope for them.
            value = self._injector.get(key)
            return Factory(lambda: value, scoped=True)
        done = self._done.get(key)
        if done is not None:
            return done
        here = (*path, _describe(key))
        if _describe(key) in path:
            raise UnresolvableDependencyError(
                f"{context}: circular dependency {' -> '.join(here)}"
            )
        if not path and isinstance(key, type) and self._unbound(key):
            # A handler or behavior class nobody bound, which is most of them:
            # what injector would bind implicitly, without making the binding.
            scope = _scope_of(key)
            if scope is NoScope:
                result = self._constructor(key, context, here)
                self._done[key] = result
                return result
        try:
            binding, _ = self._injector.binder.get_binding(key)
        except UnsatisfiedRequirement:
            if not path and isinstance(key, type):
                # A handler or behavior class needs no binding of its own, even
                # in an injector that does not bind classes implicitly.
                inner = self._constructor(key, context, here)
                result = self._apply_scope(key, _scope_of(key), inner, bound=False)
                self._done[key] = result
                return result
            raise UnresolvableDependencyError(
                f"{context}: {' -> '.join(here)} has no binding; bind it in a "
                f"Module (binder.bind({_describe(key)}, to=...))"
            ) from None
        except (TypeError, InjectorError) as error:
            # injector cannot bind it implicitly, e.g. a Protocol or a union.
            what = "is abstract and" if _is_abstract(key) else "cannot be built: it"
            raise UnresolvableDependencyError(
                f"{context}: {' -> '.join(here)} {what} has no binding; bind an "
                f"implementation (binder.bind({_describe(key)}, to=...))"
            ) from error
        scope = binding.scope
        if isinstance(scope, ScopeDecorator):
            scope = scope.scope
        provider = cast(object, binding.provider)  # pyright: ignore[reportUnknownMemberType]
        inner = self._from_provider(provider, context, here)
        result = self._apply_scope(key, scope, inner)
        self._done[key] = result
        return result

    def _check_provided(
        self,
        key: object,
        parameter: str,
        owner: type[Any],
        context: str,
        path: tuple[str, ...],
    ) -> None:
        """Refuse a dependency only a module can build when no module bound it.

        Built implicitly, such a class would fail later (an `AsyncSession`
        reading annotations it cannot resolve) or, worse, work wrong (an
        `HttpClientFactory` with none of the application's clients).
        """
        advice = provided_by(key)
        if advice is None or self._bound_explicitly(key):
            return
        where = " -> ".join((*path, _describe(key)))
        raise UnresolvableDependencyError(
            f"{context}: parameter {parameter!r} of {owner.__qualname__} needs "
            f"{_describe(key)} (module {getattr(key, '__module__', '?')}), which "
            f"only a module provides, and none bound it ({where}); {advice}"
        )

    def _bound_explicitly(self, key: object) -> bool:
        return bound_explicitly(self._injector, key)

    def _unbound(self, key: type[Any]) -> bool:
        binder: Binder | None = self._injector.binder
        while binder is not None:
            if binder.has_binding_for(key):
                return False
            binder = binder.parent
        return True

    def _from_provider(
        self, provider: object, context: str, path: tuple[str, ...]
    ) -> Factory:
        if isinstance(provider, InstanceProvider):
            value = cast(object, provider.get(self._injector))  # pyright: ignore[reportUnknownMemberType]
            return Factory(lambda: value, scoped=False)
        if isinstance(provider, ClassProvider):
            cls: type[Any] = provider._cls  # pyright: ignore[reportPrivateUsage, reportUnknownMemberType, reportUnknownVariableType]
            return self._constructor(cls, context, path)
        # A provider method, a callable, a multibinding: opaque, so resolve it the
        # injector's way on every call and assume it may need the request scope.
        opaque = cast("Provider[Any]", provider)
        injector = self._injector
        return Factory(lambda: opaque.get(injector), scoped=True)

    def _constructor(
        self, cls: type[Any], context: str, path: tuple[str, ...]
    ) -> Factory:
        if _is_abstract(cls):
            raise UnresolvableDependencyError(
                f"{context}: {' -> '.join(path)} is abstract and has no binding; "
                f"bind an implementation (binder.bind({cls.__qualname__}, to=...))"
            )
        init = cls.__init__
        if init is object.__init__:
            return Factory(cls, scoped=False)
        try:
            wanted = get_bindings(init)
        except Exception as error:  # e.g. annotations naming what is not importable
            raise UnresolvableDependencyError(
                f"{context}: {' -> '.join(path)} cannot be built by the injector "
                f"({type(error).__qualname__}: {error}); bind it in a Module"
            ) from error
        missing = [
            name
            for name, parameter in list(inspect.signature(init).parameters.items())[1:]
            if parameter.default is inspect.Parameter.empty
            and parameter.kind
            not in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
            and name not in wanted
        ]
        if missing:
            raise UnresolvableDependencyError(
                f"{context}: {' -> '.join(path)} needs {', '.join(map(repr, missing))} "
                f"but {cls.__qualname__}.__init__ is not decorated with @inject "
                "(or those parameters have no type annotation)"
            )
        for name, dep in wanted.items():
            self._check_provided(dep, name, cls, context, path)
        parts = [
            (name, self._compile(dep, context, path)) for name, dep in wanted.items()
        ]
        if not parts:
            return Factory(cls, scoped=False)
        makers = tuple((name, part.make) for name, part in parts)

        def construct() -> Any:
            return cls(**{name: make() for name, make in makers})

        return Factory(construct, scoped=any(part.scoped for _, part in parts))

    def _apply_scope(
        self, key: Any, scope: object, inner: Factory, *, bound: bool = True
    ) -> Factory:
        if scope is NoScope:
            return inner
        injector = self._injector
        if isinstance(scope, type) and issubclass(scope, SingletonScope):
            # Resolved through the injector, so the instance is the one the rest
            # of the application shares; the unbound fallback builds it itself.
            resolve: Callable[[], Any] = (
                (lambda: injector.get(key)) if bound else inner.make
            )
            if not inner.scoped:
                # Nothing in its graph can reach the mediator being built: build
                # it now, so a send calls it without a lookup.
                value = resolve()
                return Factory(lambda: value, scoped=False, instance=value)
            cell: list[Any] = [_UNSET]

            def singleton() -> Any:
                value = cell[0]
                if value is _UNSET:
                    value = cell[0] = resolve()
                return value

            return Factory(singleton, scoped=False)
        if isinstance(scope, type) and issubclass(scope, RequestScope):
            make = inner.make

            def scoped() -> Any:
                state: ScopeState | None = active_scope()
                if state is None:
                    return injector.get(key)  # raises ScopeError
                try:
                    return state[key]
                except KeyError:
                    value = state[key] = make()
                    return value

            return Factory(scoped, scoped=True)
        return Factory(lambda: injector.get(key), scoped=True)


PROVIDED_BY: Final = "__provided_by__"
"""The class attribute naming the module that provides a class (our convention).

A class only a module can build sets it to what to add, such as
``"HttpClientsModule(...) from http_resilience.injector"``; the mediator reads
it without importing the class's package.
"""

# Classes of other projects that only a module of ours (or a binding of yours)
# provides, by module and qualified name, so no import is needed to know them.
_FOREIGN: Final[dict[tuple[str, str], str]] = {
    ("sqlalchemy.orm.session", "Session"): (
        "add SqlAlchemyModule(engine=...) (from mediator.sqlalchemy) to the "
        "Injector's modules"
    ),
    ("sqlalchemy.ext.asyncio.session", "AsyncSession"): (
        "add SqlAlchemyModule(async_engine=...) (from mediator.sqlalchemy) to "
        "the Injector's modules"
    ),
    ("sqlalchemy.engine.base", "Engine"): (
        "bind the engine in a Module (binder.bind(Engine, to=engine)); for "
        "sessions, add SqlAlchemyModule(engine=...) (from mediator.sqlalchemy)"
    ),
    ("sqlalchemy.ext.asyncio.engine", "AsyncEngine"): (
        "bind the engine in a Module (binder.bind(AsyncEngine, to=engine)); for "
        "sessions, add SqlAlchemyModule(async_engine=...) (from mediator.sqlalchemy)"
    ),
}


def provided_by(key: object) -> str | None:
    """What to add so that `key` is bound, when only a module can build it.

    None for everything else. A class of ours says so in ``__provided_by__``
    (its own, not a base's: a subclass of yours is yours to build); a few
    classes of other projects are known by name.
    """
    if not isinstance(key, type):
        return None
    own: object = key.__dict__.get(PROVIDED_BY)
    if isinstance(own, str):
        return f"add {own} to the Injector's modules"
    return _FOREIGN.get((key.__module__, key.__qualname__))


def bound_explicitly(injector: _Injector, key: object) -> bool:
    """Whether a module of `injector` (or of a parent) bound `key`."""
    binder: Binder | None = injector.binder
    while binder is not None:
        if binder.has_explicit_binding_for(cast("type[Any]", key)):
            return True
        binder = binder.parent
    return False


def _scope_of(cls: type[Any]) -> object:
    scope: object = getattr(cls, "__scope__", NoScope)
    return scope.scope if isinstance(scope, ScopeDecorator) else scope


def _is_abstract(key: object) -> bool:
    return isinstance(key, type) and (
        inspect.isabstract(key) or bool(getattr(key, "_is_protocol", False))
    )


def _describe(key: object) -> str:
    return getattr(key, "__qualname__", None) or repr(key)
