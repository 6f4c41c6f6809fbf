"""The route of a stream query: stream-aware behaviors around the handler."""

from __future__ import annotations

from collections.abc import (
    AsyncGenerator,
    AsyncIterable,
    AsyncIterator,
    Awaitable,
    Callable,
    Coroutine,
    Iterable,
)
from types import TracebackType
from typing import Any, cast

from mediator._core.handlers import CallStyle, HandlerInfo
from mediator._core.scope import ScopeState, active_scope, current_scope
from mediator._core.threads import acquire_lane, build_and_handle, scope_lane
from mediator._dispatch.routes import BehaviorInfo, describe

__all__ = ["StreamRoute", "stream_route"]

StreamRoute = Callable[[Any], AsyncGenerator[Any, None]]


def stream_route(
    info: HandlerInfo,
    make: Callable[[], Any],
    behaviors: list[BehaviorInfo],
    *,
    scoped: bool,
) -> StreamRoute:
    """The route of a stream query: stream-aware behaviors around the handler.

    Every route yields an async generator, so the consumer can always
    ``aclose()`` it (or use ``contextlib.aclosing``) to stop early. A
    plain-def handler runs in a worker thread (see `_in_thread`); it is called
    when the first item is pulled.
    """

    def from_async_generator(query: Any) -> AsyncGenerator[Any, None]:
        return make().handle(query)  # type: ignore[no-any-return]

    def from_def(query: Any) -> AsyncGenerator[Any, None]:
        return _in_thread(make, query, info)

    route: StreamRoute = (
        from_async_generator if info.style is CallStyle.ASYNC_GENERATOR else from_def
    )

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


_DONE: Any = object()  # what next() returns when the handler's items ran out


async def _in_thread(
    make: Callable[[], Any], query: Any, info: HandlerInfo
) -> AsyncGenerator[Any, None]:
    """A plain-def stream handler, called and advanced in a worker thread.

    The handler is built and called on the thread; a plain generator (or any
    other iterator it returns) is advanced there, one hop per item, and closed
    there, so a cursor it holds stays on one thread. A list or tuple is yielded
    from as it is, and an async iterable on the loop. The thread is the request
    scope's when the stream runs in one, else one taken for the stream.
    """
    state = active_scope()
    lane = acquire_lane() if state is None else scope_lane(state)
    try:
        result = await lane.run(build_and_handle, make, query)
        if isinstance(result, list | tuple):
            for item in cast("Iterable[Any]", result):
                yield item
        elif isinstance(result, AsyncIterable):
            items: AsyncIterable[Any] = result  # pyright: ignore[reportUnknownVariableType]
            async for item in items:
                yield item
        elif isinstance(result, Iterable):
            iterable: Iterable[Any] = result  # pyright: ignore[reportUnknownVariableType]
            iterator = await lane.run(iter, iterable)
            try:
                while (item := await lane.run(next, iterator, _DONE)) is not _DONE:
                    yield item
            finally:
                close = getattr(iterator, "close", None)
                if close is not None:
                    await lane.run(close)
        else:
            raise TypeError(
                f"{describe(info.handler)} returned {type(result).__qualname__}; a "
                "stream handler must yield items or return an (async) iterable"
            )
    finally:
        if state is None:
            lane.release()


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
        return await self._step(lambda inner: inner.asend(value))

    async def athrow(
        self,
        typ: type[BaseException] | BaseException,
        val: object = None,
        tb: TracebackType | None = None,
    ) -> Any:
        """Raise inside the handler's generator, as for any async generator."""
        error = typ if isinstance(typ, BaseException) else typ()
        if self._done or self._inner is None:
            await self._end(error)
            raise error
        return await self._step(lambda inner: inner.athrow(error))

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

    async def _step(
        self, advance: Callable[[AsyncGenerator[Any, None]], Awaitable[Any]]
    ) -> Any:
        """One step of the handler's generator, inside the scope.

        The handler's generator is made on the first step; the scope ends with
        the stream (exhausted or failed).
        """
        token = current_scope.set(self._state)
        try:
            if self._inner is None:
                self._inner = self._route(self._query)
            return await advance(self._inner)
        except StopAsyncIteration:
            await self._end(None)
            raise
        except BaseException as failure:
            await self._end(failure)
            raise
        finally:
            current_scope.reset(token)

    async def _end(self, failure: BaseException | None) -> None:
        if self._done:
            return
        self._done = True
        self._inner = None
        if self._owned:
            await self._state.aclose(failure)
