"""`SqlAlchemyModule` refuses, when it is built, an argument of the wrong kind."""

from __future__ import annotations

import warnings
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from injector import Injector
from sqlalchemy.ext.asyncio import (
    AsyncEngine,
    AsyncSession,
    async_sessionmaker,
    create_async_engine,
)
from sqlalchemy.orm import Session, sessionmaker

from mediator import Mediator, MediatorModule
from mediator.sqlalchemy import SqlAlchemyModule
from tests.mediator._support.shop_db import (
    ASYNC_HANDLERS,
    Account,
    Base,
    OpenAccountAsync,
)

pytestmark = pytest.mark.anyio


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[sa.Engine]:
    engine = sa.create_engine(f"sqlite:///{tmp_path / 'sync.db'}")
    yield engine
    engine.dispose()


@pytest.fixture
async def async_engine(tmp_path: Path) -> AsyncIterator[AsyncEngine]:
    engine = create_async_engine(f"sqlite+aiosqlite:///{tmp_path / 'async.db'}")
    yield engine
    await engine.dispose()


def wrong(
    engine: sa.Engine, async_engine: AsyncEngine, case: str
) -> tuple[dict[str, Any], str]:
    """The keyword arguments of one mistake and the exact error it must raise."""
    url = "sqlite:///app.db"
    module = "SqlAlchemyModule"
    per_send = "the module opens one session per send"
    cases: dict[str, tuple[dict[str, Any], str]] = {
        "async engine as engine": (
            {"engine": async_engine},
            f"{module}(engine=...) takes an Engine, got an AsyncEngine: "
            "pass it as async_engine= instead",
        ),
        "engine as async_engine": (
            {"async_engine": engine},
            f"{module}(async_engine=...) takes an AsyncEngine, got an Engine: "
            "pass it as engine= instead",
        ),
        "sessionmaker as async_session_factory": (
            {"async_session_factory": sessionmaker(engine)},
            f"{module}(async_session_factory=...) takes an async_sessionmaker, got a "
            "sessionmaker: pass it as session_factory= instead",
        ),
        "async_sessionmaker as session_factory": (
            {"session_factory": async_sessionmaker(async_engine)},
            f"{module}(session_factory=...) takes a sessionmaker, got an "
            "async_sessionmaker: pass it as async_session_factory= instead",
        ),
        "URL as engine": (
            {"engine": url},
            f"{module}(engine=...) takes an Engine, got a URL: pass "
            "engine=create_engine(url), or async_engine=create_async_engine(url)",
        ),
        "URL as async_engine": (
            {"async_engine": url},
            f"{module}(async_engine=...) takes an AsyncEngine, got a URL: pass "
            "engine=create_engine(url), or async_engine=create_async_engine(url)",
        ),
        "URL object as engine": (
            {"engine": sa.make_url(url)},
            f"{module}(engine=...) takes an Engine, got a URL: pass "
            "engine=create_engine(url), or async_engine=create_async_engine(url)",
        ),
        "Session as session_factory": (
            {"session_factory": Session(engine)},
            f"{module}(session_factory=...) takes a sessionmaker, got a Session: "
            f"pass the sessionmaker that makes it as session_factory= ({per_send})",
        ),
        "Session as engine": (
            {"engine": Session(engine)},
            f"{module}(engine=...) takes an Engine, got a Session: "
            f"pass the sessionmaker that makes it as session_factory= ({per_send})",
        ),
        "AsyncSession as async_session_factory": (
            {"async_session_factory": AsyncSession(async_engine)},
            f"{module}(async_session_factory=...) takes an async_sessionmaker, got an "
            "AsyncSession: pass the async_sessionmaker that makes it as "
            f"async_session_factory= ({per_send})",
        ),
        "unbound sessionmaker": (
            {"session_factory": sessionmaker()},
            f"{module}(session_factory=...) is a sessionmaker with no engine: "
            "make it with sessionmaker(engine), or pass engine= instead",
        ),
        "unbound async_sessionmaker": (
            {"async_session_factory": async_sessionmaker()},
            f"{module}(async_session_factory=...) is an async_sessionmaker with no "
            "engine: make it with async_sessionmaker(async_engine), or pass "
            "async_engine= instead",
        ),
        "sessionmaker bound to an async engine": (
            {"session_factory": sessionmaker(bind=async_engine)},  # type: ignore[call-overload]
            f"{module}(session_factory=...) is bound to an AsyncEngine: make "
            "async_sessionmaker(async_engine) and pass it as async_session_factory=",
        ),
        "async_sessionmaker bound to a sync engine": (
            {"async_session_factory": async_sessionmaker(bind=engine)},  # type: ignore[call-overload]
            f"{module}(async_session_factory=...) is bound to an Engine: make "
            "sessionmaker(engine) and pass it as session_factory=",
        ),
        "something else": (
            {"engine": 42},
            f"{module}(engine=...) takes an Engine, got int: pass engine=, "
            "async_engine=, session_factory= or async_session_factory=",
        ),
    }
    return cases[case]


CASES = [
    "async engine as engine",
    "engine as async_engine",
    "sessionmaker as async_session_factory",
    "async_sessionmaker as session_factory",
    "URL as engine",
    "URL as async_engine",
    "URL object as engine",
    "Session as session_factory",
    "Session as engine",
    "AsyncSession as async_session_factory",
    "unbound sessionmaker",
    "unbound async_sessionmaker",
    "sessionmaker bound to an async engine",
    "async_sessionmaker bound to a sync engine",
    "something else",
]


@pytest.mark.parametrize("case", CASES)
async def test_an_argument_of_the_wrong_kind_is_refused_when_the_module_is_built(
    engine: sa.Engine, async_engine: AsyncEngine, case: str
) -> None:
    arguments, message = wrong(engine, async_engine, case)

    with pytest.raises(TypeError) as caught:
        SqlAlchemyModule(**arguments)

    assert str(caught.value) == message


async def test_the_other_construction_errors_are_pinned(
    engine: sa.Engine, async_engine: AsyncEngine
) -> None:
    with pytest.raises(TypeError) as nothing:
        SqlAlchemyModule()
    with pytest.raises(TypeError) as both:
        SqlAlchemyModule(engine=engine, session_factory=sessionmaker(engine))
    with pytest.raises(TypeError) as both_async:
        SqlAlchemyModule(
            async_engine=async_engine,
            async_session_factory=async_sessionmaker(async_engine),
        )

    assert str(nothing.value) == (
        "SqlAlchemyModule needs an engine: engine=, async_engine=, "
        "session_factory= or async_session_factory="
    )
    assert str(both.value) == (
        "SqlAlchemyModule takes engine= or session_factory=, not both"
    )
    assert str(both_async.value) == (
        "SqlAlchemyModule takes async_engine= or async_session_factory=, not both"
    )


async def test_an_async_session_factory_commits_what_an_async_send_wrote(
    async_engine: AsyncEngine,
) -> None:
    async with async_engine.begin() as connection:
        await connection.run_sync(Base.metadata.create_all)
    factory = async_sessionmaker(async_engine, expire_on_commit=False)
    module = MediatorModule(lambda m: m.add_handler(*ASYNC_HANDLERS).use_defaults())
    mediator = Injector([module, SqlAlchemyModule(async_session_factory=factory)]).get(
        Mediator
    )

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        await mediator.send(OpenAccountAsync(email="kept@example.org"))

    async with async_engine.connect() as connection:
        emails = (await connection.scalars(sa.select(Account.email))).all()
    assert emails == ["kept@example.org"]
