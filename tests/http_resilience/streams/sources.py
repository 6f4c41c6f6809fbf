"""Small recording sources and factories for the stream retry tests.

Fakes, not mocks: each source is an iterator over a list that fails where its
script says, and records how often it was closed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from http_resilience import StreamRetryContext


class Broken(Exception):
    """What a scripted source raises when it breaks."""


class CloseFailed(Exception):
    """What a scripted source raises when closing it fails."""


@dataclass(frozen=True)
class Attempt:
    """How one attempt's source behaves.

    `fail_after` items are produced before it raises `failure` (None: it runs to
    the end); closing it raises `close_failure` when one is given. A resuming
    source starts after the `items_yielded` of its context.
    """

    fail_after: int | None = None
    failure: BaseException | None = None
    close_failure: BaseException | None = None


@dataclass
class _Source:
    items: Sequence[int]
    attempt: Attempt
    number: int
    produced: list[int] = field(default_factory=list[int])
    closed: int = 0

    def _next(self) -> int:
        if self.attempt.fail_after is not None and (
            len(self.produced) == self.attempt.fail_after
        ):
            raise self.attempt.failure or Broken(f"attempt {self.number} broke")
        if len(self.produced) >= len(self.items):
            raise _End
        item = self.items[len(self.produced)]
        self.produced.append(item)
        return item

    def _close(self) -> None:
        self.closed += 1
        if self.attempt.close_failure is not None:
            raise self.attempt.close_failure


class _End(Exception):
    pass


class BareAsyncSource(_Source):
    """An async iterator with nothing to close."""

    def __aiter__(self) -> BareAsyncSource:
        return self

    async def __anext__(self) -> int:
        try:
            return self._next()
        except _End:
            raise StopAsyncIteration from None


class AsyncSource(BareAsyncSource):
    """An async iterator (not a generator) with an `aclose` that is recorded."""

    async def aclose(self) -> None:
        self._close()


class BareSyncSource(_Source):
    """An iterator with nothing to close."""

    def __iter__(self) -> BareSyncSource:
        return self

    def __next__(self) -> int:
        try:
            return self._next()
        except _End:
            raise StopIteration from None


class SyncSource(BareSyncSource):
    """An iterator (not a generator) with a `close` that is recorded."""

    def close(self) -> None:
        self._close()


S = TypeVar("S", bound=_Source)


@dataclass
class Factory(Generic[S]):
    """Builds one scripted source per attempt and records every call.

    Attempts past the end of the script run to the end without failing.
    """

    items: Sequence[int]
    script: Sequence[Attempt]
    kind: Callable[[Sequence[int], Attempt, int], S]
    resume: bool = False
    contexts: list[StreamRetryContext] = field(default_factory=list[StreamRetryContext])
    sources: list[S] = field(default_factory=list[S])

    def __call__(self, context: StreamRetryContext) -> S:
        self.contexts.append(context)
        number = len(self.contexts)
        attempt = self.script[number - 1] if number <= len(self.script) else Attempt()
        items = self.items[context.items_yielded :] if self.resume else self.items
        source = self.kind(items, attempt, number)
        self.sources.append(source)
        return source

    @property
    def closes(self) -> list[int]:
        return [source.closed for source in self.sources]


def async_factory(
    items: Sequence[int], *script: Attempt, resume: bool = False
) -> Factory[AsyncSource]:
    return Factory(list(items), script, AsyncSource, resume)


def sync_factory(
    items: Sequence[int], *script: Attempt, resume: bool = False
) -> Factory[SyncSource]:
    return Factory(list(items), script, SyncSource, resume)


def bare_async_factory(
    items: Sequence[int], *script: Attempt
) -> Factory[BareAsyncSource]:
    return Factory(list(items), script, BareAsyncSource)


def bare_sync_factory(
    items: Sequence[int], *script: Attempt
) -> Factory[BareSyncSource]:
    return Factory(list(items), script, BareSyncSource)


def breaks(
    after: int = 0,
    *,
    failure: BaseException | None = None,
    close_failure: BaseException | None = None,
) -> Attempt:
    """An attempt that breaks after `after` items."""
    return Attempt(after, failure, close_failure)
