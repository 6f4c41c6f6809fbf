"""A small schema and handlers for the unit-of-work tests (SQLite and PostgreSQL)."""

from __future__ import annotations

from typing import Any

from injector import inject
from sqlalchemy import ForeignKey, String, func, select
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

from mediator import (
    Command,
    CommandHandler,
    Mediator,
    Query,
    QueryHandler,
    transactional,
)


class Base(DeclarativeBase):
    pass


class Account(Base):
    __tablename__ = "uow_accounts"

    id: Mapped[int] = mapped_column(primary_key=True)
    email: Mapped[str] = mapped_column(String(200), unique=True)
    balance: Mapped[int] = mapped_column(default=0)


class Entry(Base):
    __tablename__ = "uow_entries"

    id: Mapped[int] = mapped_column(primary_key=True)
    account_id: Mapped[int] = mapped_column(ForeignKey("uow_accounts.id"))
    note: Mapped[str] = mapped_column(String(200))


@transactional
class OpenAccount(Command[int]):
    email: str
    fail_after_write: bool = False


@transactional
class AddEntry(Command[int]):
    account_id: int
    note: str


@transactional
class OpenWithEntry(Command[int]):
    """Sends AddEntry from inside its handler: both must share one transaction."""

    email: str
    fail_at_end: bool = False


class CountAccounts(Query[int]):
    pass


class Boom(RuntimeError):
    pass


class OpenAccountHandler(CommandHandler[OpenAccount, int]):
    @inject
    def __init__(self, session: Session) -> None:
        self.session = session

    def handle(self, request: OpenAccount) -> int:
        account = Account(email=request.email)
        self.session.add(account)
        self.session.flush()
        if request.fail_after_write:
            raise Boom("after the write")
        return account.id


class AddEntryHandler(CommandHandler[AddEntry, int]):
    @inject
    def __init__(self, session: Session) -> None:
        self.session = session

    def handle(self, request: AddEntry) -> int:
        entry = Entry(account_id=request.account_id, note=request.note)
        self.session.add(entry)
        self.session.flush()
        return entry.id


class OpenWithEntryHandler(CommandHandler[OpenWithEntry, int]):
    @inject
    def __init__(self, session: Session, mediator: Mediator) -> None:
        self.session = session
        self.mediator = mediator

    def handle(self, request: OpenWithEntry) -> int:
        account = Account(email=request.email)
        self.session.add(account)
        self.session.flush()
        self.mediator.send_sync(AddEntry(account_id=account.id, note="opening"))
        if request.fail_at_end:
            raise Boom("after the nested send")
        return account.id


class CountAccountsHandler(QueryHandler[CountAccounts, int]):
    @inject
    def __init__(self, session: Session) -> None:
        self.session = session

    def handle(self, request: CountAccounts) -> int:
        return self.session.scalar(select(func.count()).select_from(Account)) or 0


SYNC_HANDLERS: tuple[type[Any], ...] = (
    OpenAccountHandler,
    AddEntryHandler,
    OpenWithEntryHandler,
    CountAccountsHandler,
)


# --- the async twins, on AsyncSession ------------------------------------------


@transactional
class OpenAccountAsync(Command[int]):
    email: str
    fail_after_write: bool = False


class OpenAccountAsyncHandler(CommandHandler[OpenAccountAsync, int]):
    @inject
    def __init__(self, session: AsyncSession) -> None:
        self.session = session

    async def handle(self, request: OpenAccountAsync) -> int:
        account = Account(email=request.email)
        self.session.add(account)
        await self.session.flush()
        if request.fail_after_write:
            raise Boom("after the write")
        return account.id


ASYNC_HANDLERS: tuple[type[Any], ...] = (OpenAccountAsyncHandler,)


def count_rows(session: Session, model: type[Base]) -> int:
    return session.scalar(select(func.count()).select_from(model)) or 0
