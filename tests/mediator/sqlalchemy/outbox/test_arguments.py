"""Wrong arguments and wrong set-ups are refused with errors that say what to do:
at construction for the relay, at the call for the outbox, and as a dead message
(with its reason) for a message the relay cannot deliver."""

from __future__ import annotations

import sys
import types
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any, cast

import pytest
import sqlalchemy as sa
from injector import Injector
from pydantic import SecretStr
from sqlalchemy.ext.asyncio import create_async_engine
from sqlalchemy.pool import NullPool

from mediator import ConfigurationError, Mediator, MediatorModule, Outbox
from mediator.sqlalchemy import OutboxRelay, SqlAlchemyModule, outbox_table
from tests.mediator.sqlalchemy.outbox import app
from tests.mediator.sqlalchemy.outbox.conftest import Backend, Shop, place

pytestmark = pytest.mark.anyio


@pytest.fixture
def sqlite_shop(tmp_path: Path) -> tuple[Any, sa.Engine]:
    engine = sa.create_engine(f"sqlite:///{tmp_path / 'arguments.db'}")
    async_engine = create_async_engine(
        f"sqlite+aiosqlite:///{tmp_path / 'arguments.db'}", poolclass=NullPool
    )
    return app.build("sync", engine, async_engine), engine


class NotAHandoff:
    def send(self, message: object) -> None: ...


@pytest.mark.parametrize(
    ("change", "error", "named"),
    [
        (
            {"mediator": object()},
            TypeError,
            r"OutboxRelay\(mediator=\.\.\.\) takes a Mediator, got object",
        ),
        (
            {"engine": "sqlite://"},
            TypeError,
            r"OutboxRelay\(engine=\.\.\.\) takes an Engine or an AsyncEngine, got str",
        ),
        (
            {"batch": 0},
            ValueError,
            r"OutboxRelay\(batch=\.\.\.\) must be an int of at least 1, got 0",
        ),
        ({"batch": True}, ValueError, r"OutboxRelay\(batch=\.\.\.\)"),
        ({"concurrency": 0}, ValueError, r"OutboxRelay\(concurrency=\.\.\.\)"),
        ({"max_attempts": 0}, ValueError, r"OutboxRelay\(max_attempts=\.\.\.\)"),
        (
            {"lease": timedelta(seconds=-1)},
            ValueError,
            r"OutboxRelay\(lease=\.\.\.\) must be a positive timedelta",
        ),
        (
            {"lease": 30},
            ValueError,
            r"OutboxRelay\(lease=\.\.\.\) must be a positive timedelta, got 30",
        ),
        (
            {"poll_interval": timedelta(0)},
            ValueError,
            r"OutboxRelay\(poll_interval=\.\.\.\)",
        ),
        (
            {"base_delay": timedelta(minutes=2), "max_delay": timedelta(minutes=1)},
            ValueError,
            r"OutboxRelay: base_delay \(120 s\) must not exceed max_delay \(60 s\)",
        ),
        (
            {"handoff": NotAHandoff()},
            TypeError,
            r"OutboxRelay\(handoff=\.\.\.\) takes a Handoff \(hand_off\(message\)\) "
            r"or an AsyncHandoff",
        ),
        (
            {"clock": object()},
            TypeError,
            r"OutboxRelay\(clock=\.\.\.\) takes a WallClock",
        ),
        ({"random": 0.5}, TypeError, r"OutboxRelay\(random=\.\.\.\)"),
    ],
)
def test_the_relay_refuses_a_wrong_argument_naming_it(
    sqlite_shop: tuple[Any, sa.Engine],
    change: dict[str, Any],
    error: type[Exception],
    named: str,
) -> None:
    mediator, engine = sqlite_shop
    arguments: dict[str, Any] = {"mediator": mediator, "engine": engine, **change}

    with pytest.raises(error, match=f"^{named}"):
        OutboxRelay(**arguments)


def test_the_relay_takes_good_arguments(sqlite_shop: tuple[Any, sa.Engine]) -> None:
    mediator, engine = sqlite_shop
    relay = OutboxRelay(
        mediator,
        engine,
        batch=1,
        lease=timedelta(seconds=1),
        base_delay=timedelta(seconds=1),
        max_delay=timedelta(seconds=1),
    )
    assert relay.last_stats is None


Use = Callable[[Outbox], object]


def using(use: Use) -> Use:
    """`use`, typed: what `Probe`'s handler does with its outbox."""
    return use


async def probe(shop: Shop, use: Use) -> None:
    app.Probing.use = use
    await shop.send(app.Probe())


@pytest.mark.parametrize(
    ("use", "error", "message"),
    [
        (
            using(lambda outbox: outbox.send(cast(Any, app.Lookup(name="x")))),
            TypeError,
            r"^Outbox\.send\(\) takes a Command, got the query Lookup$",
        ),
        (
            using(
                lambda outbox: outbox.send(cast(Any, app.OrderPlaced(order_id="o1")))
            ),
            TypeError,
            r"^Outbox\.send\(\) takes a Command, got OrderPlaced: use publish\(\)$",
        ),
        (
            using(lambda outbox: outbox.publish(cast(Any, app.Reserve(order_id="o1")))),
            TypeError,
            r"^Outbox\.publish\(\) takes a Notification, got Reserve: use send\(\)$",
        ),
        (
            using(lambda outbox: outbox.send(app.WithSecret(card="4111111111111111"))),
            ValueError,
            r"^WithSecret has sensitive fields \(card\): the outbox stores messages in "
            r"the clear",
        ),
        (
            using(
                lambda outbox: outbox.send(app.WithSecretStr(password=SecretStr("pw")))
            ),
            ValueError,
            r"^WithSecretStr has sensitive fields \(password\)",
        ),
        (
            using(
                lambda outbox: outbox.send(
                    app.WithNestedSecret(cards=[app.Card(number=SecretStr("4111"))])
                )
            ),
            ValueError,
            r"^WithNestedSecret has sensitive fields \(cards\)",
        ),
        (
            using(lambda outbox: outbox.publish(app.Shipped(token=SecretStr("t")))),
            ValueError,
            r"^Shipped has sensitive fields \(token\)",
        ),
        (
            using(
                lambda outbox: outbox.send(app.Reserve(order_id="o1"), ordering_key="")
            ),
            TypeError,
            r"^ordering_key is 1 to 255 characters, got 0$",
        ),
        (
            using(
                lambda outbox: outbox.send(
                    app.Reserve(order_id="o1"), ordering_key=cast(str, 7)
                )
            ),
            TypeError,
            r"^ordering_key must be a string or None, got 7$",
        ),
    ],
    ids=[
        "a-query",
        "a-notification-sent",
        "a-command-published",
        "a-sensitive-field",
        "a-secretstr",
        "a-nested-secret",
        "a-notification-secret",
        "an-empty-ordering-key",
        "an-int-ordering-key",
    ],
)
async def test_the_outbox_refuses_what_it_cannot_record(
    shop: Shop, use: Use, error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        await probe(shop, use)
    assert shop.backend.messages() == []


async def test_a_sensitive_message_fails_the_recording_handler_and_records_nothing(
    shop: Shop,
) -> None:
    with pytest.raises(ValueError, match="record a reference to the secret"):
        await shop.send(place("o1", ("reserve", "o1"), ("secret", "4111111111111111")))
    assert shop.backend.messages() == []
    assert shop.backend.orders() == []


@pytest.mark.parametrize(
    "handler", [app.UnrecordedHandler, app.UnrecordedAsyncHandler], ids=["def", "async"]
)
def test_the_outbox_in_the_handler_of_a_plain_request_fails_the_build(
    handler: type[Any], backend: Backend
) -> None:
    module = MediatorModule(lambda m: m.add_handler(handler).use_defaults())
    with pytest.raises(
        ConfigurationError,
        match=rf"{handler.__name__} .* takes the Outbox, but Unrecorded .* is not "
        "@transactional",
    ):
        Injector([module, SqlAlchemyModule(engine=backend.engine)]).get(Mediator)


def test_an_outbox_not_in_a_send_is_a_configuration_error() -> None:
    outbox = Injector([SqlAlchemyModule(engine=sa.create_engine("sqlite://"))]).get(
        Outbox
    )
    with pytest.raises(ConfigurationError, match="@transactional"):
        outbox.send(app.Reserve(order_id="o1"))


async def test_a_message_whose_type_is_not_loaded_is_dead_at_once_with_the_reason(
    shop: Shop,
) -> None:
    [message_id] = await shop.send(place("o1", ("reserve", "o1")))
    with shop.backend.engine.begin() as connection:
        connection.execute(
            sa.update(outbox_table).values(message_type="tests.gone_module:Ghost")
        )
    relay = shop.relay(max_attempts=10)

    assert await shop.run_once(relay) == 1

    row = shop.backend.message(message_id)
    assert (row.state, row.attempts) == ("dead", 1)
    assert row.last_error.startswith(
        "ConfigurationError: the outbox message type 'tests.gone_module:Ghost' is "
        "not a loaded Command class in this process"
    )
    assert app.Observed.of("reserve") == []


async def test_a_message_no_handler_takes_is_dead_at_once_with_the_reason(
    shop: Shop,
) -> None:
    [message_id] = await shop.send(place("o1", ("unhandled", "u1")))
    relay = shop.relay(max_attempts=10)

    assert await shop.run_once(relay) == 1

    row = shop.backend.message(message_id)
    assert (row.state, row.attempts) == ("dead", 1)
    assert row.last_error.startswith("HandlerNotFoundError: ")
    assert "Unhandled" in row.last_error


@pytest.mark.parametrize(
    "planted",
    [
        "not json",
        '{"id": "ada"}',
        '{"id": 7, "roles": []}',
        '{"id": "ada", "roles": "admin"}',
        '{"id": "ada", "roles": ["admin"], "tenant": {"nested": 1}}',
        "[1, 2]",
    ],
)
async def test_a_principal_the_outbox_did_not_write_is_dead_at_once(
    shop: Shop, planted: str
) -> None:
    [message_id] = await shop.send(place("o1", ("reserve", "o1")))
    with shop.backend.engine.begin() as connection:
        connection.execute(sa.update(outbox_table).values(principal=planted))

    assert await shop.run_once(shop.relay(max_attempts=10)) == 1

    row = shop.backend.message(message_id)
    assert (row.state, row.attempts) == ("dead", 1)
    assert row.last_error.startswith(
        "ConfigurationError: the outbox message's principal is not one the outbox "
        "writes"
    )
    assert app.Observed.of("reserve") == []


async def test_a_type_is_read_from_the_modules_namespace_never_its_getattr(
    shop: Shop, monkeypatch: pytest.MonkeyPatch
) -> None:
    asked: list[str] = []
    lazy = types.ModuleType("tests_lazy_module")

    def lazy_getattr(name: str) -> object:  # a PEP 562 hook that would import
        asked.append(name)
        return app.Reserve

    lazy.__getattr__ = lazy_getattr  # type: ignore[method-assign]
    monkeypatch.setitem(sys.modules, lazy.__name__, lazy)
    [message_id] = await shop.send(place("o1", ("reserve", "o1")))
    with shop.backend.engine.begin() as connection:
        connection.execute(
            sa.update(outbox_table).values(message_type="tests_lazy_module:Reserve")
        )

    assert await shop.run_once(shop.relay(max_attempts=10)) == 1

    row = shop.backend.message(message_id)
    assert (row.state, row.attempts) == ("dead", 1)
    assert row.last_error.startswith("ConfigurationError: ")
    assert asked == []


async def test_a_payload_that_no_longer_fits_is_dead_at_once(shop: Shop) -> None:
    [message_id] = await shop.send(place("o1", ("reserve", "o1")))
    with shop.backend.engine.begin() as connection:
        connection.execute(sa.update(outbox_table).values(payload='{"order": 1}'))

    assert await shop.run_once(shop.relay(max_attempts=10)) == 1

    row = shop.backend.message(message_id)
    assert (row.state, row.attempts) == ("dead", 1)
    assert row.last_error == "ValidationError"


async def test_a_missing_outbox_table_is_a_configuration_error_naming_the_fix(
    shop: Shop,
) -> None:
    outbox_table.drop(shop.backend.engine)
    relay = shop.relay()
    dialect = shop.backend.dialect

    with pytest.raises(ConfigurationError) as raised:
        await shop.run_once(relay)

    text = str(raised.value)
    assert "'mediator_outbox' does not exist" in text
    assert "create_outbox_table(engine)" in text
    assert f"0002_outbox.{dialect}.sql" in text
    with pytest.raises(ConfigurationError, match="create_outbox_table"):
        await shop.stats(relay)
