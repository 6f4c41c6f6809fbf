"""`FallbackHandler`: the degraded answer of a ``@fallback`` query, and its checks.

What a fallback handler class declares (the query it answers, what it
returns, how its ``handle`` runs) is read when the mediator is built: a
handler for another query, or one returning another type, fails the build,
not the first outage.
"""

from __future__ import annotations

import inspect
import sys
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, ForwardRef, Generic, TypeVar, cast, get_origin

from mediator._core.errors import ConfigurationError
from mediator._core.handlers import type_arguments
from mediator._core.requests import Query, response_type

__all__ = ["FallbackHandler", "FallbackPlan", "check_fallback_class", "plan_of"]

R = TypeVar("R")
TQuery = TypeVar("TQuery", bound=Query[Any], contravariant=True)


class FallbackHandler(ABC, Generic[TQuery, R]):
    """Answers a ``@fallback`` query, degraded, when its chain gave up.

    ``handle(request, failure)`` gets the query and the failure the chain
    raised (after its retries), and returns what the query's handler would
    have: a cached copy, a default, an answer from a second source. It may
    be ``async def`` or plain ``def`` (run in a worker thread under `send`,
    as a plain handler is), and it says where its answer comes from and how
    fresh it is with `degraded`. It is built by injector like any handler,
    once per fallback.

    Name the query in the generic base. The query's ``@fallback`` names this
    class, so define the handler first, naming the query as a string (a
    forward reference), as the example does: the name is resolved in the
    handler's module when the mediator is built, or matched against the
    marked query's name when the module imports it only for type checking.

    Example:
        >>> from mediator import Query, degraded, fallback
        >>> class StockFromCache(FallbackHandler["GetStock", int]):
        ...     def handle(self, request: "GetStock", failure: Exception) -> int:
        ...         degraded(source="stock-cache")
        ...         return 0
        >>> @fallback(StockFromCache)
        ... class GetStock(Query[int]):
        ...     sku: str
    """

    @abstractmethod
    def handle(self, request: TQuery, failure: Exception, /) -> R | Awaitable[R]:
        """Answer `request`, whose chain failed with `failure`."""


def check_fallback_class(handler: object) -> type[Any]:
    """`handler` when it is a concrete fallback handler class; else a TypeError.

    What can be told from the class alone is checked when ``@fallback`` is
    applied; the query and the response type it names, when the mediator is
    built (`plan_of`): the query may not exist yet.
    """
    if not (isinstance(handler, type) and issubclass(handler, FallbackHandler)):
        raise TypeError(
            "@fallback takes a FallbackHandler class: write "
            "@fallback(YourFallbackHandler) above a Query class, got "
            f"{handler!r}"
        )
    handler = cast("type[Any]", handler)
    where = _name(handler)
    if inspect.isabstract(handler):
        raise TypeError(f"{where} is abstract: implement handle(request, failure)")
    handle: object = inspect.getattr_static(handler, "handle")
    if inspect.isasyncgenfunction(handle) or inspect.isgeneratorfunction(handle):
        raise TypeError(
            f"{where}: handle() is a generator; a fallback handler returns the "
            "answer, as the query's handler does"
        )
    return handler


@dataclass(frozen=True, slots=True)
class FallbackPlan:
    """How the fallback of one query type is built and called."""

    name: str
    make: Callable[[], Any]
    is_async: bool
    scoped: bool  # building it may reach request-scoped services


def plan_of(
    query: type[Any], handler: type[Any], make: Callable[[], Any], *, scoped: bool
) -> FallbackPlan:
    """The plan of `query`'s fallback, after checking what `handler` declares.

    Raises:
        ConfigurationError: `handler` names no query, another query, or a
            response type that is not the query's.
    """
    where = _name(handler)
    args = type_arguments(handler, (FallbackHandler,)) or ()
    if len(args) != 2:
        raise ConfigurationError(
            f"{where} must name its query and response type: derive it from "
            f"FallbackHandler[{query.__qualname__}, ...]"
        )
    answered = _resolve(args[0], handler, query)
    if not (isinstance(answered, type) and issubclass(query, answered)):
        raise ConfigurationError(
            f"{_name(query)} is marked @fallback({handler.__qualname__}), but "
            f"{where} answers {_shown(answered)}: derive it from "
            f"FallbackHandler[{query.__qualname__}, ...]"
        )
    expected = response_type(query)
    returned = _resolve(args[1], handler, expected)
    if not _returns(returned, expected):
        raise ConfigurationError(
            f"{where} returns {_shown(returned)}, but {_name(query)} answers "
            f"{_shown(expected)}: a fallback returns what the query's handler "
            f"does, FallbackHandler[{query.__qualname__}, {_shown(expected)}]"
        )
    handle: object = inspect.getattr_static(handler, "handle")
    if isinstance(handle, staticmethod | classmethod):
        handle = cast("object", handle.__func__)  # pyright: ignore[reportUnknownMemberType]
    return FallbackPlan(where, make, inspect.iscoroutinefunction(handle), scoped)


def _resolve(argument: object, handler: type[Any], meant: object) -> object:
    """`argument`, a forward reference resolved; `meant` when it names it."""
    if isinstance(argument, str):
        argument = ForwardRef(argument)
    if not isinstance(argument, ForwardRef):
        return argument
    name = argument.__forward_arg__
    first, *rest = name.split(".")
    found: object = getattr(sys.modules.get(handler.__module__), first, None)
    for part in rest:
        found = getattr(found, part, None)
    if found is not None:
        return found
    # Imported only under TYPE_CHECKING: the name is all there is to go by.
    names = {
        getattr(meant, "__name__", None),
        getattr(meant, "__qualname__", None),
        f"{getattr(meant, '__module__', '')}.{getattr(meant, '__qualname__', '')}",
    }
    return meant if name in names else argument


def _returns(returned: object, expected: object) -> bool:
    if expected is Any or returned is Any or returned == expected:
        return True
    return (
        isinstance(returned, type)
        and isinstance(expected, type)
        and get_origin(expected) is None
        and issubclass(returned, expected)
    )


def _shown(kind: object) -> str:
    if isinstance(kind, ForwardRef):
        return kind.__forward_arg__
    if isinstance(kind, type) and get_origin(kind) is None:
        return kind.__qualname__
    return repr(kind).replace("typing.", "")


def _name(cls: type[Any]) -> str:
    return f"{cls.__qualname__} (module {cls.__module__})"
