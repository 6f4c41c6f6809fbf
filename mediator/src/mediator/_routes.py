"""Composes the route of one message type: its behaviors around its handler.

Everything here runs once per message type, when the mediator is built. What
it returns is a chain of plain closures: a send looks the route up by type and
calls it, with no per-send decisions left to make.
"""

from __future__ import annotations

import asyncio
from collections.abc import (
    AsyncGenerator,
    AsyncIterable,
    AsyncIterator,
    Awaitable,
    Callable,
    Coroutine,
    Iterable,
)
from dataclasses import dataclass
from functools import partial
from types import TracebackType
from typing import Any, NoReturn

from mediator._errors import SyncPathError
from mediator._handlers import CallStyle, HandlerInfo
from mediator._scope import ScopeState, active_scope, current_scope, enter_scope

__all__ = [
    "AsyncRoute",
    "BehaviorInfo",
    "NotificationTarget",
    "PublishRoute",
    "StreamRoute",
    "SyncPublishRoute",
    "SyncRoute",
]

AsyncRoute = Callable[[Any], Awaitable[Any]]
SyncRoute = Callable[[Any], Any]
StreamRoute = Callable[[Any], AsyncGenerator[Any, None]]
PublishRoute = Callable[[Any, bool, bool], Awaitable[None]]
SyncPublishRoute = Callable[[Any, bool], None]


@dataclass(frozen=True, slots=True)
class BehaviorInfo:
    """One behavior instance with the optional parts it was found to have."""

    instance: Any
    name: str
    handle_sync: Callable[[Any, Callable[[], Any]], Any] | None
    handle_stream: (
        Callable[[Any, Callable[[], AsyncIterator[Any]]], AsyncIterator[Any]] | None
    )
    applies_to: Callable[[type[Any]], bool] | None
    scoped: bool  # it may reach request-scoped services: sends through it open a scope

    def applies(self, message_type: type[Any]) -> bool:
        """Whether the behavior wraps `message_type`; asked once per type."""
        return self.applies_to is None or bool(self.applies_to(message_type))


# --- send ----------------------------------------------------------------------


def async_route(
    info: HandlerInfo,
    make: Callable[[], Any],
    behaviors: list[BehaviorInfo],
    *,
    scoped: bool,
    instance: Any = None,
) -> AsyncRoute:
    """The async route of a request type: behaviors, outermost first, around it.

    A singleton handler built already is called through its bound method.
    """

    def call_async(request: Any) -> Awaitable[Any]:
        return make().handle(request)  # type: ignore[no-any-return]

    async def call_sync(request: Any) -> Any:
        return make().handle(request)

    route: AsyncRoute = call_async if info.style is CallStyle.ASYNC else call_sync
    if instance is not None and info.style is CallStyle.ASYNC:
        route = instance.handle
    for behavior in reversed(behaviors):
        route = _wrap_async(behavior.instance.handle, route)
    return _scoped_async(route) if scoped else route


def _wrap_async(
    handle: Callable[[Any, Any], Awaitable[Any]], inner: AsyncRoute
) -> AsyncRoute:
    def step(request: Any, handle: Any = handle, inner: Any = inner) -> Awaitable[Any]:
        # partial(), not a lambda: it is cheaper to create, and one is made per step.
        return handle(request, partial(inner, request))  # type: ignore[no-any-return]

    return step


def _scoped_async(inner: AsyncRoute) -> AsyncRoute:
    async def run(request: Any) -> Any:
        async with enter_scope():
            return await inner(request)

    return run


def sync_route(
    info: HandlerInfo,
    make: Callable[[], Any],
    behaviors: list[BehaviorInfo],
    *,
    scoped: bool,
    instance: Any = None,
) -> SyncRoute:
    """The `send_sync` route; raises `SyncPathError` on use if a part is async only."""
    if info.is_async:
        return _refuse(
            f"{_name(info.handler)} handles {info.message_type.__qualname__} with "
            "async def, so send_sync cannot run it: await mediator.send(...) "
            "instead, or make handle() a plain def"
        )
    for behavior in behaviors:
        if behavior.handle_sync is None:
            return _refuse(
                f"behavior {behavior.name} applies to {info.message_type.__qualname__} "
                "but has no handle_sync, so send_sync cannot run it: await "
                "mediator.send(...) instead, or give the behavior a handle_sync"
            )

    def call(request: Any) -> Any:
        return make().handle(request)

    route: SyncRoute = call if instance is None else instance.handle
    for behavior in reversed(behaviors):
        route = _wrap_sync(behavior.handle_sync, route)  # type: ignore[arg-type]
    return _scoped_sync(route) if scoped else route


def _wrap_sync(
    handle: Callable[[Any, Callable[[], Any]], Any], inner: SyncRoute
) -> SyncRoute:
    def step(request: Any) -> Any:
        return handle(request, lambda: inner(request))

    return step


def _scoped_sync(inner: SyncRoute) -> SyncRoute:
    def run(request: Any) -> Any:
        with enter_scope():
            return inner(request)

    return run


def _refuse(message: str) -> Callable[..., NoReturn]:
    def refuse(*_: Any) -> NoReturn:
        raise SyncPathError(message)

    return refuse


def _name(cls: type[Any]) -> str:
    return f"{cls.__qualname__} (module {cls.__module__})"


# --- stream --------------------------------------------------------------------


def stream_route(
    info: HandlerInfo,
    make: Callable[[], Any],
    behaviors: list[BehaviorInfo],
    *,
    scoped: bool,
) -> StreamRoute:
    """The route of a stream query: stream-aware behaviors around the handler.

    Every route yields an async generator, so the consumer can always
    ``aclose()`` it (or use ``contextlib.aclosing``) to stop early.
    """

    def from_generator(query: Any) -> AsyncGenerator[Any, None]:
        return _from_sync(make().handle(query))

    def from_async_generator(query: Any) -> AsyncGenerator[Any, None]:
        return make().handle(query)  # type: ignore[no-any-return]

    def from_iterable(query: Any) -> AsyncGenerator[Any, None]:
        return _from_iterable(make().handle(query), info)

    route: StreamRoute = {
        CallStyle.GENERATOR: from_generator,
        CallStyle.ASYNC_GENERATOR: from_async_generator,
    }.get(info.style, from_iterable)

    for behavior in reversed(behaviors):
        if behavior.handle_stream is not None:
            route = _wrap_stream(behavior.handle_stream, route)
    if not scoped:
        return route
    return lambda query: _ScopedStream(route, query)


def _wrap_stream(
    handle: Callable[[Any, Callable[[], AsyncIterator[Any]]], AsyncIterator[Any]],
    inner: StreamRoute,
) -> StreamRoute:
    def step(query: Any) -> AsyncGenerator[Any, None]:
        return _closing_step(handle, inner, query)

    return step


async def _closing_step(
    handle: Callable[[Any, Callable[[], AsyncIterator[Any]]], AsyncIterator[Any]],
    inner: StreamRoute,
    query: Any,
) -> AsyncGenerator[Any, None]:
    # An `async for` over next() does not close it when the behavior's own
    # generator is closed early; garbage collection would, some time later. So
    # every stream opened through next() is closed here, in order, on every path.
    opened: list[AsyncGenerator[Any, None]] = []

    def next_stream() -> AsyncIterator[Any]:
        stream = inner(query)
        opened.append(stream)
        return stream

    outer = handle(query, next_stream)
    try:
        async for item in outer:
            yield item
    finally:
        try:
            aclose = getattr(outer, "aclose", None)
            if aclose is not None:
                await aclose()
        finally:
            for stream in reversed(opened):
                await stream.aclose()


async def _from_sync(items: Iterable[Any]) -> AsyncGenerator[Any, None]:
    for item in items:
        yield item


async def _from_async(items: AsyncIterable[Any]) -> AsyncGenerator[Any, None]:
    async for item in items:
        yield item


def _from_iterable(result: object, info: HandlerInfo) -> AsyncGenerator[Any, None]:
    if isinstance(result, AsyncIterable):
        items: AsyncIterable[Any] = result  # pyright: ignore[reportUnknownVariableType]
        return _from_async(items)
    if isinstance(result, Iterable):
        plain: Iterable[Any] = result  # pyright: ignore[reportUnknownVariableType]
        return _from_sync(plain)
    raise TypeError(
        f"{_name(info.handler)} returned {type(result).__qualname__}; a stream "
        "handler must yield items or return an (async) iterable"
    )


class _ScopedStream(AsyncGenerator[Any, None]):
    """Runs every step of a stream inside its request scope, and only those steps.

    The consumer's own code between items never sees the scope. A stream opened
    inside a send joins that send's scope; otherwise it owns a scope, closed
    when the stream ends, fails or is closed.
    """

    __slots__ = ("_done", "_inner", "_owned", "_query", "_route", "_state")

    def __init__(self, route: StreamRoute, query: Any) -> None:
        self._route = route
        self._query = query
        parent = active_scope()
        self._owned = parent is None
        self._state = ScopeState() if parent is None else parent
        self._inner: AsyncGenerator[Any, None] | None = None
        self._done = False

    def __aiter__(self) -> AsyncGenerator[Any, None]:
        return self

    def __anext__(self) -> Coroutine[Any, Any, Any]:
        return self.asend(None)

    async def asend(self, value: None) -> Any:
        """Advance the stream inside its scope."""
        if self._done:
            raise StopAsyncIteration
        token = current_scope.set(self._state)
        try:
            if self._inner is None:
                self._inner = self._route(self._query)
            return await self._inner.asend(value)
        except StopAsyncIteration:
            await self._end(None)
            raise
        except BaseException as failure:
            await self._end(failure)
            raise
        finally:
            current_scope.reset(token)

    async def athrow(
        self,
        typ: type[BaseException] | BaseException,
        val: object = None,
        tb: TracebackType | None = None,
    ) -> Any:
        """Raise inside the handler's generator, as for any async generator."""
        error = typ if isinstance(typ, BaseException) else typ()
        inner = self._inner
        if self._done or inner is None:
            await self._end(error)
            raise error
        token = current_scope.set(self._state)
        try:
            return await inner.athrow(error)
        except StopAsyncIteration:
            await self._end(None)
            raise
        except BaseException as failure:
            await self._end(failure)
            raise
        finally:
            current_scope.reset(token)

    async def aclose(self) -> None:
        """Stop early: closes the handler's generator and ends the scope."""
        if self._done:
            return
        inner = self._inner
        token = current_scope.set(self._state)
        try:
            if inner is not None:
                await inner.aclose()
        except BaseException as failure:
            await self._end(failure)
            raise
        else:
            await self._end(None)
        finally:
            current_scope.reset(token)

    async def _end(self, failure: BaseException | None) -> None:
        if self._done:
            return
        self._done = True
        self._inner = None
        if self._owned:
            await self._state.aclose(failure)


# --- publish -------------------------------------------------------------------

NotificationTarget = tuple[HandlerInfo, Callable[[], Any]]


def publish_route(
    message_type: type[Any],
    targets: list[NotificationTarget],
    behaviors: list[BehaviorInfo],
    *,
    scoped: bool,
) -> PublishRoute:
    """The route of a notification type: behaviors around delivery to every handler."""
    type_name = message_type.__qualname__

    async def deliver(
        notification: Any, concurrent: bool, stop_on_first_failure: bool
    ) -> None:
        if concurrent:
            await _deliver_concurrently(
                notification, targets, type_name, stop_on_first_failure
            )
        else:
            await _deliver_in_turn(
                notification, targets, type_name, stop_on_first_failure
            )

    route: PublishRoute = deliver
    for behavior in reversed(behaviors):
        route = _wrap_publish(behavior.instance.handle, route)
    if not scoped:
        return route

    async def run(notification: Any, concurrent: bool, stop: bool) -> None:
        async with enter_scope():
            await route(notification, concurrent, stop)

    return run


def _wrap_publish(
    handle: Callable[[Any, Any], Awaitable[Any]], inner: PublishRoute
) -> PublishRoute:
    def step(notification: Any, concurrent: bool, stop: bool) -> Awaitable[None]:
        return handle(notification, lambda: inner(notification, concurrent, stop))

    return step


def _failed(
    type_name: str, errors: list[Exception], total: int
) -> ExceptionGroup[Exception]:
    return ExceptionGroup(
        f"{len(errors)} of {total} handlers of {type_name} failed", errors
    )


async def _deliver_in_turn(
    notification: Any, targets: list[NotificationTarget], type_name: str, stop: bool
) -> None:
    errors: list[Exception] = []
    for info, make in targets:
        try:
            result = make().handle(notification)
            if info.style is CallStyle.ASYNC:
                await result
        except (
            Exception
        ) as error:  # every failure is kept; BaseException passes through
            errors.append(error)
            if stop:
                break
    if errors:
        raise _failed(type_name, errors, len(targets))


async def _call(info: HandlerInfo, make: Callable[[], Any], notification: Any) -> None:
    result = make().handle(notification)
    if info.style is CallStyle.ASYNC:
        await result


async def _deliver_concurrently(
    notification: Any, targets: list[NotificationTarget], type_name: str, stop: bool
) -> None:
    if stop:
        try:
            async with asyncio.TaskGroup() as group:
                for info, make in targets:
                    group.create_task(_call(info, make, notification))
        except ExceptionGroup as failures:
            raise _failed(type_name, list(failures.exceptions), len(targets)) from None
        return
    tasks = [
        asyncio.ensure_future(_call(info, make, notification)) for info, make in targets
    ]
    outcomes = await asyncio.gather(*tasks, return_exceptions=True)
    errors: list[Exception] = []
    for outcome in outcomes:
        if isinstance(outcome, Exception):
            errors.append(outcome)
        elif isinstance(outcome, BaseException):
            raise outcome  # cancellation and exits are never collected or swallowed
    if errors:
        raise _failed(type_name, errors, len(targets))


def sync_publish_route(
    message_type: type[Any],
    targets: list[NotificationTarget],
    behaviors: list[BehaviorInfo],
    *,
    scoped: bool,
) -> SyncPublishRoute:
    """The `publish_sync` route; refuses on use if a handler or behavior is async."""
    type_name = message_type.__qualname__
    for info, _ in targets:
        if info.is_async:
            return _refuse(
                f"{_name(info.handler)} handles {type_name} with async def, so "
                "publish_sync cannot run it: await mediator.publish(...) instead, "
                "or make handle() a plain def"
            )
    for behavior in behaviors:
        if behavior.handle_sync is None:
            return _refuse(
                f"behavior {behavior.name} applies to {type_name} but has no "
                "handle_sync, so publish_sync cannot run it"
            )

    def deliver(notification: Any, stop: bool) -> None:
        errors: list[Exception] = []
        for _, make in targets:
            try:
                make().handle(notification)
            except Exception as error:
                errors.append(error)
                if stop:
                    break
        if errors:
            raise _failed(type_name, errors, len(targets))

    route: SyncPublishRoute = deliver
    for behavior in reversed(behaviors):
        route = _wrap_sync_publish(behavior.handle_sync, route)  # type: ignore[arg-type]
    if not scoped:
        return route

    def run(notification: Any, stop: bool) -> None:
        with enter_scope():
            route(notification, stop)

    return run


def _wrap_sync_publish(
    handle: Callable[[Any, Callable[[], Any]], Any], inner: SyncPublishRoute
) -> SyncPublishRoute:
    def step(notification: Any, stop: bool) -> None:
        handle(notification, lambda: inner(notification, stop))

    return step
