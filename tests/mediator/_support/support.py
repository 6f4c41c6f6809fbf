"""Small recording fakes shared by the mediator tests."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterable
from typing import Any

from injector import Injector, Module

from mediator import (
    Mediator,
    MediatorConfig,
    MediatorModule,
    Next,
    Stage,
    StreamNext,
    SyncNext,
)


class Journal:
    """Records what ran, in order; shared by the fakes of one test."""

    def __init__(self) -> None:
        self.entries: list[str] = []

    def add(self, entry: str) -> None:
        self.entries.append(entry)


def recording_behavior(name: str, stage: Stage, journal: Journal) -> type[Any]:
    """A distinct behavior class that logs entry and exit on every path."""

    class Recording:
        async def handle(self, request: Any, next: Next[Any]) -> Any:
            journal.add(f"{name}>")
            result = await next()
            journal.add(f"<{name}")
            return result

        def handle_sync(self, request: Any, next: SyncNext[Any]) -> Any:
            journal.add(f"{name}>")
            result = next()
            journal.add(f"<{name}")
            return result

        async def handle_stream(
            self, request: Any, next: StreamNext[Any]
        ) -> AsyncIterator[Any]:
            journal.add(f"{name}>")
            async for item in next():
                yield item
            journal.add(f"<{name}")

    Recording.stage = stage  # type: ignore[attr-defined]
    Recording.__qualname__ = Recording.__name__ = f"Recording{name}"
    return Recording


def build(
    configure: Callable[[MediatorConfig], object],
    *modules: Module,
    journal: Journal | None = None,
) -> Mediator:
    """A mediator from one `MediatorModule` plus extra modules (bound after it)."""

    def bind_journal(binder: Any) -> None:
        if journal is not None:
            binder.bind(Journal, to=journal)

    return Injector([bind_journal, MediatorModule(configure), *modules]).get(Mediator)


def ordered(entries: Iterable[str]) -> list[str]:
    return list(entries)
