"""A nested `@retryable @transactional` send inside an outer transactional one.

Shared by the SQLite tests and the PostgreSQL integration tests. The outer
handler writes ``outer``, then sends the inner command; the inner handler writes
``inner<attempt>``, flushes, and fails its first `fail` attempts with the error
the script names.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any, ClassVar

import sqlalchemy as sa
from injector import Injector, Module, inject
from sqlalchemy import String
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

from mediator import Command, CommandHandler, Mediator, MediatorModule, transactional
from mediator_resilience import (
    ResilienceMediatorModule,
    ResilienceMediatorOptions,
    retryable,
)
from mediator_resilience.testing import FakeClock


class Base(DeclarativeBase):
    pass


class Row(Base):
    __tablename__ = "nested_retry_rows"

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(50))


class Counter(Base):
    """A row another connection bumps, to provoke a serialization failure."""

    __tablename__ = "nested_retry_counter"

    id: Mapped[int] = mapped_column(primary_key=True)
    n: Mapped[int] = mapped_column(default=0)


class Flaky(RuntimeError):
    """A failure a retry may fix: not a `DomainError`."""


class Script:
    """How many inner attempts fail, with what, and what happened."""

    failures: ClassVar[int] = 0
    error: ClassVar[type[Exception]] = Flaky
    inner_attempts: ClassVar[int] = 0
    outer_attempts: ClassVar[int] = 0
    # Run inside the inner handler on the attempts that fail, before raising.
    hook: ClassVar[Callable[[Any], Any] | None] = None

    @classmethod
    def reset(cls, failures: int = 0) -> None:
        cls.failures = failures
        cls.error = Flaky
        cls.inner_attempts = 0
        cls.outer_attempts = 0
        cls.hook = None


@retryable
@transactional
class Outer(Command[None]):
    pass


@retryable
@transactional
class Inner(Command[None]):
    pass


class OuterHandler(CommandHandler[Outer, None]):
    @inject
    def __init__(self, session: Session, mediator: Mediator) -> None:
        self.session = session
        self.mediator = mediator

    def handle(self, request: Outer) -> None:
        Script.outer_attempts += 1
        self.session.add(Row(name=f"outer{Script.outer_attempts}"))
        self.session.flush()
        self.mediator.send_sync(Inner())


class InnerHandler(CommandHandler[Inner, None]):
    @inject
    def __init__(self, session: Session) -> None:
        self.session = session

    def handle(self, request: Inner) -> None:
        Script.inner_attempts += 1
        self.session.add(Row(name=f"inner{Script.inner_attempts}"))
        self.session.flush()
        if Script.inner_attempts <= Script.failures:
            if Script.hook is not None:
                Script.hook(self.session)
            raise Script.error("inner attempt")
        self.session.execute(sa.update(Counter).values(n=Counter.n + 1))


@retryable
@transactional
class OuterAsync(Command[None]):
    pass


@retryable
@transactional
class InnerAsync(Command[None]):
    pass


class OuterAsyncHandler(CommandHandler[OuterAsync, None]):
    @inject
    def __init__(self, session: AsyncSession, mediator: Mediator) -> None:
        self.session = session
        self.mediator = mediator

    async def handle(self, request: OuterAsync) -> None:
        Script.outer_attempts += 1
        self.session.add(Row(name=f"outer{Script.outer_attempts}"))
        await self.session.flush()
        await self.mediator.send(InnerAsync())


class InnerAsyncHandler(CommandHandler[InnerAsync, None]):
    @inject
    def __init__(self, session: AsyncSession) -> None:
        self.session = session

    async def handle(self, request: InnerAsync) -> None:
        Script.inner_attempts += 1
        self.session.add(Row(name=f"inner{Script.inner_attempts}"))
        await self.session.flush()
        if Script.inner_attempts <= Script.failures:
            if Script.hook is not None:
                await Script.hook(self.session)
            raise Script.error("inner attempt")
        await self.session.execute(sa.update(Counter).values(n=Counter.n + 1))


SYNC_HANDLERS = (OuterHandler, InnerHandler)
ASYNC_HANDLERS = (OuterAsyncHandler, InnerAsyncHandler)


def build(
    database: Module, handlers: tuple[type[Any], ...], *, max_retry_attempts: int = 3
) -> Mediator:
    """A mediator with the default chain, retry, `handlers` and `database`."""
    mediator = MediatorModule(lambda m: m.add_handler(*handlers).use_defaults())
    resilience = ResilienceMediatorModule(
        ResilienceMediatorOptions(
            max_retry_attempts=max_retry_attempts, use_jitter=False
        ),
        clock=FakeClock(),
        random=random.Random(3).random,
    )
    return Injector([mediator, resilience, database]).get(Mediator)


def names(engine: sa.Engine) -> list[str]:
    with Session(engine) as session:
        return list(session.scalars(sa.select(Row.name).order_by(Row.id)))
