"""Handler base classes and how a handler's request type is read from them."""

from __future__ import annotations

import inspect
from abc import ABC, abstractmethod
from collections.abc import AsyncIterable, Awaitable, Iterable
from dataclasses import dataclass
from enum import Enum
from typing import Any, Generic, TypeVar, cast, get_args, get_origin

from mediator._core.requests import Notification, Request, StreamQuery

__all__ = [
    "CommandHandler",
    "NotificationHandler",
    "QueryHandler",
    "RequestHandler",
    "StreamHandler",
]

R = TypeVar("R")
T = TypeVar("T")
TRequest = TypeVar("TRequest", bound=Request[Any], contravariant=True)
TCommand = TypeVar("TCommand", bound=Request[Any], contravariant=True)
TQuery = TypeVar("TQuery", bound=Request[Any], contravariant=True)
TNotification = TypeVar("TNotification", bound=Notification, contravariant=True)
TStream = TypeVar("TStream", bound=StreamQuery[Any], contravariant=True)


class RequestHandler(ABC, Generic[TRequest, R]):
    """Handles one request type; `handle` may be ``async def`` or plain ``def``.

    The request type is read from the generic base, so one class declares both
    what it handles and what it returns. Dependencies come through the
    constructor, decorated with ``@inject``.

    A plain ``def handle`` serves both paths: `Mediator.send_sync` runs it in
    the caller's thread, and `Mediator.send` builds and runs it in a worker
    thread, in a copy of the send's context, so it never blocks the event loop
    (the hop costs tens of microseconds per send). An ``async def handle`` runs
    on the loop and only under `send`.

    Example:
        >>> from decimal import Decimal
        >>> from mediator import Query
        >>> class GetPrice(Query[Decimal]):
        ...     sku: str
        >>> class GetPriceHandler(RequestHandler[GetPrice, Decimal]):
        ...     async def handle(self, request: GetPrice) -> Decimal:
        ...         return Decimal("9.99")
    """

    @abstractmethod
    def handle(self, request: TRequest, /) -> R | Awaitable[R]:
        """Handle the request and return its response."""


class CommandHandler(RequestHandler[TCommand, R]):
    """A `RequestHandler` for a `Command`."""


class QueryHandler(RequestHandler[TQuery, R]):
    """A `RequestHandler` for a `Query`."""


class NotificationHandler(ABC, Generic[TNotification]):
    """One of the handlers a notification type is published to.

    A handler registered for a base notification class also receives its
    subclasses. A plain ``def handle`` runs in a worker thread under
    `Mediator.publish`, as a request handler's does under `send`.
    """

    @abstractmethod
    def handle(self, notification: TNotification, /) -> Awaitable[None] | None:
        """React to the notification."""


class StreamHandler(ABC, Generic[TStream, T]):
    """Answers a `StreamQuery` with items, usually as an async generator.

    `handle` may be an async generator, a plain generator, or a plain function
    returning an (async) iterable. A plain one is called in a worker thread
    when the first item is pulled, and a plain generator is advanced there, one
    hop per item (tens of microseconds each), and closed there.
    """

    @abstractmethod
    def handle(self, query: TStream, /) -> AsyncIterable[T] | Iterable[T]:
        """Yield the items that answer the query."""


# --- Introspection, done once per handler class at registration ----------------


class HandlerKind(Enum):
    """The three families of handlers."""

    REQUEST = "request"
    NOTIFICATION = "notification"
    STREAM = "stream"


_ROOTS: dict[type[Any], HandlerKind] = {
    RequestHandler: HandlerKind.REQUEST,
    CommandHandler: HandlerKind.REQUEST,
    QueryHandler: HandlerKind.REQUEST,
    NotificationHandler: HandlerKind.NOTIFICATION,
    StreamHandler: HandlerKind.STREAM,
}

_MESSAGE_BASES: dict[HandlerKind, type[Any]] = {
    HandlerKind.REQUEST: Request,
    HandlerKind.NOTIFICATION: Notification,
    HandlerKind.STREAM: StreamQuery,
}


class CallStyle(Enum):
    """How `handle` produces its result, decided once per handler class."""

    ASYNC = "async"  # async def: returns an awaitable
    SYNC = "sync"  # plain def: returns the result
    ASYNC_GENERATOR = "async generator"
    GENERATOR = "generator"


@dataclass(frozen=True, slots=True)
class HandlerInfo:
    """What registration learnt about one handler class."""

    handler: type[Any]
    kind: HandlerKind
    message_type: type[Any]
    style: CallStyle

    @property
    def is_async(self) -> bool:
        """True when `handle` cannot run without an event loop."""
        return self.style in (CallStyle.ASYNC, CallStyle.ASYNC_GENERATOR)


def handler_kind(cls: type[Any]) -> HandlerKind | None:
    """The family `cls` belongs to, or None when it is not a handler class."""
    for base in cls.__mro__:
        kind = _ROOTS.get(base)
        if kind is not None:
            return kind
    return None


def is_concrete_handler(cls: type[Any]) -> bool:
    """True for a handler class that registration can use as it is."""
    return (
        handler_kind(cls) is not None
        and cls not in _ROOTS
        and not inspect.isabstract(cls)
        and isinstance(_message_type_of(cls), type)
    )


def inspect_handler(cls: type[Any]) -> HandlerInfo:
    """Read a handler class once: its family, message type and call style.

    Raises:
        TypeError: `cls` is not a concrete handler class with a concrete message
            type, or its `handle` does not fit its family.
    """
    kind = handler_kind(cls)
    where = f"{cls.__qualname__} (module {cls.__module__})"
    if kind is None or cls in _ROOTS:
        raise TypeError(
            f"{where} is not a handler: derive it from RequestHandler, "
            "CommandHandler, QueryHandler, NotificationHandler or StreamHandler"
        )
    if inspect.isabstract(cls):
        raise TypeError(f"{where} is abstract: implement handle()")
    message_type = _message_type_of(cls)
    expected = _MESSAGE_BASES[kind]
    if not isinstance(message_type, type) or not issubclass(message_type, expected):
        raise TypeError(
            f"{where} must name a concrete {expected.__name__} subclass as its "
            f"first type argument, got {message_type!r}"
        )
    return HandlerInfo(cls, kind, message_type, _call_style(cls, kind, where))


def _call_style(cls: type[Any], kind: HandlerKind, where: str) -> CallStyle:
    handle: object = inspect.getattr_static(cls, "handle")
    if isinstance(handle, staticmethod | classmethod):
        handle = cast("object", handle.__func__)  # pyright: ignore[reportUnknownMemberType]
    if inspect.isasyncgenfunction(handle):
        style = CallStyle.ASYNC_GENERATOR
    elif inspect.isgeneratorfunction(handle):
        style = CallStyle.GENERATOR
    elif inspect.iscoroutinefunction(handle):
        style = CallStyle.ASYNC
    else:
        style = CallStyle.SYNC
    if kind is HandlerKind.STREAM:
        if style is CallStyle.ASYNC:
            raise TypeError(
                f"{where}: a stream handler's handle() must yield items (an async "
                "generator), not be a coroutine that returns them"
            )
    elif style in (CallStyle.ASYNC_GENERATOR, CallStyle.GENERATOR):
        raise TypeError(
            f"{where}: handle() is a generator; only StreamHandler may yield. "
            "Derive from StreamHandler and use a StreamQuery, or return the result"
        )
    return style


def _message_type_of(cls: type[Any]) -> object:
    return first_type_argument(cls, tuple(_ROOTS))


def first_type_argument(cls: type[Any], roots: tuple[type[Any], ...]) -> object:
    """The first type argument `cls` gives one of the generic `roots`.

    Type variables are substituted through intermediate generic classes, so
    ``class Base(RequestHandler[T, int])`` and ``class Concrete(Base[Ping])``
    resolve to ``Ping``. None when no root is parametrised.
    """
    found = type_arguments(cls, roots)
    return found[0] if found else None


def type_arguments(
    cls: type[Any], roots: tuple[type[Any], ...]
) -> tuple[object, ...] | None:
    """Every type argument `cls` gives one of the generic `roots`, substituted.

    As `first_type_argument`, but all of them: ``(Ping, int)`` for a
    ``RequestHandler[Ping, int]``. None when no root is parametrised.
    """
    return _search(cls, roots, {})


def _search(
    cls: type[Any], roots: tuple[type[Any], ...], bound: dict[object, object]
) -> tuple[object, ...] | None:
    for base in cls.__dict__.get("__orig_bases__", cls.__bases__):
        origin = get_origin(base) or base
        if not isinstance(origin, type) or not issubclass(origin, roots):
            continue
        args = tuple(
            bound.get(a, a) if isinstance(a, TypeVar) else a for a in get_args(base)
        )
        if origin in roots:
            return args or None
        params: tuple[object, ...] = getattr(origin, "__parameters__", ())
        found = _search(origin, roots, dict(zip(params, args, strict=False)))
        if found is not None:
            return found
    return None
